"""One fence holder at a time: three real sidecars, REST writes through all of them.

Only the elected holder takes the policy writer's fence; the others forward. When the
holder is killed (-9), writes keep succeeding (the others write themselves until a new
holder is elected within the session timeout) and no acknowledged write is lost.
"""

from __future__ import annotations

import json
import signal
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.support.http import http
from tests.support.kafka import free_port
from tests.support.sidecars import Sidecar, run_cli
from tests.support.waits import wait_for

BASE = "/admin/v2/persistent/public/default/"
LIVENESS_S = 60.0
SESSION_MS = 1_500


@pytest.fixture(scope="module")
def shims(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[Sidecar]]:
    """Three sidecars for the whole module. Its tests run in file order on them: the
    first checks what the holder and the others counted from their start, each later one
    writes topics of its own, and the last kills the holder."""
    topic = f"ce-{uuid.uuid4().hex[:10]}"
    flags = ["--holder-session-timeout-ms", str(SESSION_MS)]
    workdir = tmp_path_factory.mktemp("forwarding")
    started = [
        Sidecar(kafka_bootstrap, topic, free_port(), workdir, broker_id=str(i), extra=flags)
        for i in range(3)
    ]
    try:
        for shim in started:
            shim.wait_ready()
        for topic in ("orders", "payments", "forwarded", "ctl"):  # policies need their topic
            created = http("PUT", f"{started[0].url}{BASE}{topic}")
            assert created.status in (204, 409), created.body
        yield started
    finally:
        for shim in started:
            if shim.proc.poll() is None:
                shim.stop()


def _writer(shim: Sidecar) -> dict[str, Any]:
    status = http("GET", shim.url + "/health").json()["writer"]
    assert isinstance(status, dict)
    return status


def _one_holder(shims: list[Sidecar]) -> Sidecar:
    """Wait until exactly one sidecar holds the fence and every other one knows it."""
    views: list[dict[str, Any]] = []
    holders: list[Sidecar] = []

    def one_holder() -> bool:
        views[:] = [_writer(s) for s in shims]
        holders[:] = [s for s, v in zip(shims, views, strict=True) if v["holding"]]
        return len(holders) == 1 and all(v["holder"] == holders[0].url for v in views)

    wait_for(
        one_holder,
        lambda: f"a single fence holder, known to all: {views}",
        timeout_s=LIVENESS_S,
        interval_s=0.1,
    )
    return holders[0]


def _set(shim: Sidecar, topic: str, policy: str, value: int) -> int:
    return http("POST", f"{shim.url}{BASE}{topic}/{policy}", str(value)).status


def _get(shim: Sidecar, topic: str, policy: str) -> Any:
    result = http("GET", f"{shim.url}{BASE}{topic}/{policy}")
    return result.json() if result.status == 200 and result.body else None  # unset: no body


POLICIES = ["maxConsumers", "maxProducers", "maxSubscriptionsPerTopic"]


def test_writes_through_every_sidecar_reach_the_one_fence_holder(shims: list[Sidecar]) -> None:
    holder = _one_holder(shims)
    before = [_writer(s) for s in shims]
    errors: list[str] = []

    def work(shim: Sidecar, policy: str) -> None:
        for i in range(1, 11):
            status = _set(shim, "orders", policy, i)
            if status != 204:
                errors.append(f"{shim.url} {policy}={i}: {status}")
            # Read-your-writes on the sidecar that took the write, forwarded or not.
            if _get(shim, "orders", policy) != i:
                errors.append(f"{shim.url} does not show its own write {policy}={i}")

    threads = [
        threading.Thread(target=work, args=(s, p)) for s, p in zip(shims, POLICIES, strict=True)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(LIVENESS_S * 2)
    assert not errors, errors
    for shim in shims:
        for policy in POLICIES:
            assert _get(shim, "orders", policy) == 10, (shim.url, policy)
    after = [_writer(s) for s in shims]
    digests = {s.digest()["digest"] for s in shims}
    assert len(digests) == 1
    # The fence never left the holder: the others forwarded and never took it. Unless the
    # election itself moved (a member's session timed out: seen beside CPU hogs), which
    # legitimately moves the fence; then only the above holds.
    moved = any(
        (b.get("terms"), b["electionWaits"]) != (a.get("terms"), a["electionWaits"])
        for b, a in zip(before, after, strict=True)
    )
    if moved:
        return
    for shim, status in zip(shims, after, strict=True):
        if shim is holder:
            assert status["fenceEpochs"] == 1, status
            assert status["writtenHere"] == 10
        else:
            assert status["fenceEpochs"] == 0, status
            assert status["forwarded"] == 10 and status["fallbacks"] == 0, status


def test_a_refused_forwarded_write_does_not_fail_the_others(shims: list[Sidecar]) -> None:
    holder = _one_holder(shims)
    key = "persistent://public/default/forwarded"
    writes = [
        {"key": key, "fields": {"maxConsumerPerTopic": 4}},
        {"key": key, "fields": {"maxConsumerPerTopic": -1}},  # invalid: 412 for this one
        {"key": key, "fields": {"maxProducerPerTopic": 2}},
    ]
    path = holder.url + "/policy-sync/v1/write"
    body = json.dumps({"writes": writes})
    # Only sidecars forward: without the header the endpoint does not exist.
    assert http("POST", path, body).status == 404
    result = http("POST", path, body, timeout=60, headers={"X-Policy-Sync-Forwarded": "1"})
    assert result.status == 200, result
    ok1, bad, ok2 = result.json()["results"]
    assert "positions" in ok1 and "positions" in ok2
    assert bad["status"] == 412 and "maxConsumerPerTopic" in bad["reason"]
    for shim in shims:
        wait_for(
            lambda: _get(shim, "forwarded", "maxProducers") == 2,  # noqa: B023 - called now
            f"{shim.url} showing the forwarded maxProducers=2",
            timeout_s=LIVENESS_S,
        )
        assert _get(shim, "forwarded", "maxConsumers") == 4


def test_policyctl_writes_through_the_holder_without_fencing_it(
    shims: list[Sidecar], kafka_bootstrap: str
) -> None:
    """A policyctl run beside the sidecars sends its write to the elected holder: had it
    taken the fence, the holder's writes in flight would be decided again (on a busy
    machine, until they gave up)."""
    holder = _one_holder(shims)
    retries = _writer(holder)["fencedRetries"]
    assert _set(holder, "ctl", "maxConsumers", 3) == 204  # the holder takes its fence
    epochs = _writer(holder)["fenceEpochs"]
    done = run_cli(
        "policyctl", "--topic", holder.topic, "set", "persistent://public/default/ctl",
        "--json", '{"maxProducerPerTopic": 7}', bootstrap=kafka_bootstrap,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    assert printed["maxProducerPerTopic"] == 7 and printed["maxConsumerPerTopic"] == 3, printed
    for shim in shims:
        assert _get(shim, "ctl", "maxProducers") == 7 or _wait_value(shim, 7)
    # The holder's next write finds its fence where it left it.
    assert _set(holder, "ctl", "maxConsumers", 4) == 204
    status = _writer(holder)
    assert status["fenceEpochs"] == epochs and status["fencedRetries"] == retries, status


def _wait_value(shim: Sidecar, value: int) -> bool:
    wait_for(
        lambda: _get(shim, "ctl", "maxProducers") == value,
        f"{shim.url} showing maxProducers={value}",
        timeout_s=LIVENESS_S,
    )
    return True


def test_holder_killed_mid_load_loses_no_acknowledged_write(shims: list[Sidecar]) -> None:
    holder = _one_holder(shims)
    others = [s for s in shims if s is not holder]
    acknowledged: dict[str, int] = {}
    stop = threading.Event()
    errors: list[str] = []

    def work(shim: Sidecar, policy: str) -> None:
        i = 0
        while not stop.is_set():
            i += 1
            try:
                status = _set(shim, "payments", policy, i)
            except OSError as exc:
                errors.append(f"{policy}={i}: {exc}")
                continue
            if status == 204:
                acknowledged[policy] = i
            else:
                errors.append(f"{policy}={i}: HTTP {status}")

    threads = [
        threading.Thread(target=work, args=(s, p))
        for s, p in zip(others, POLICIES[:2], strict=True)
    ]
    for t in threads:
        t.start()
    wait_for(
        lambda: len(acknowledged) >= 2,
        "a write acknowledged through each of the two others",
        timeout_s=LIVENESS_S,
        required=False,
    )
    holder.stop(signal.SIGKILL)
    survivors = others
    new = _one_holder(survivors)  # within the liveness bound (session timeout)
    assert new is not holder
    seen = dict(acknowledged)
    wait_for(
        lambda: not any(acknowledged.get(p, 0) <= seen.get(p, 0) + 3 for p in POLICIES[:2]),
        "writes going on after the new election",
        timeout_s=LIVENESS_S,
    )
    stop.set()
    for t in threads:
        t.join(LIVENESS_S)
    assert not errors, errors  # every write was answered 204, through the kill

    # Every survivor comes to hold every acknowledged write (a cache that has not read the
    # last one yet catches up; a lost write never would), and they agree.
    def holds(shim: Sidecar, policy: str) -> Callable[[], bool]:
        return lambda: (_get(shim, "payments", policy) or 0) >= acknowledged[policy]

    for shim in survivors:
        for policy in POLICIES[:2]:
            wait_for(
                holds(shim, policy),
                f"{shim.url} holds {policy}={acknowledged[policy]}",
                timeout_s=LIVENESS_S,
            )
    wait_for(
        lambda: len({s.digest()["digest"] for s in survivors}) == 1,
        "the survivors agree",
        timeout_s=LIVENESS_S,
    )
