"""Issue 11 on real Kafka with real processes: a sidecar killed with SIGKILL and restarted
with the same broker id takes back what its dead incarnation owned, /health tells the
truth (200 exactly when policies and lookups are served), and nothing answers 500.

Waits use generous deadlines for liveness only; failover *times* are `make bench` figures.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.broker_shim.test_lookup_http import ShimCluster, ShimProcess, lookups
from tests.support.waits import wait_for

SESSION_MS = 1000
TOPICS = [f"persistent://public/default/recovery-{i}" for i in range(24)]


def _health(shim: ShimProcess) -> int:
    try:
        return shim.get("/health", timeout=5).status
    except OSError:
        return 0


def _until_healthy(shim: ShimProcess, limit_s: float = 60) -> None:

    def healthy() -> bool:
        assert shim.alive(), shim.log_tail()
        return _health(shim) == 200

    def seen() -> str:
        body = shim.get("/health").body if shim.alive() else "dead"
        return f"{shim.broker_id} healthy: {body}\n{shim.log_tail()}"

    wait_for(healthy, seen, timeout_s=limit_s)


def _serves_everything(shim: ShimProcess, owners: set[str], limit_s: float = 60) -> list[str]:
    """Wait until every topic resolves to one of ``owners``; return the answers."""
    seen: list[str | None] = []

    def settled() -> bool:
        seen[:] = lookups(shim, TOPICS)
        return all(url in owners for url in seen)

    wait_for(settled, lambda: f"lookups on {shim.broker_id} settled: {seen}", timeout_s=limit_s)
    return [url for url in seen if url is not None]


def _fences(log: str) -> str:
    """The log lines that tell why a fence was final (a failure message in CI keeps them)."""
    words = ("fenced", "renew", "ERROR", "incarnation")
    return "\n".join(line[:400] for line in log.splitlines() if any(w in line for w in words))


@pytest.fixture
def single(kafka_bootstrap: str, tmp_path: Path) -> Iterator[ShimCluster]:
    cluster = ShimCluster(kafka_bootstrap, tmp_path, 1, session_timeout_ms=SESSION_MS, slots=8)
    try:
        yield cluster.start()
    finally:
        cluster.stop()


def test_a_single_sidecar_killed_and_restarted_takes_its_bundles_back(
    single: ShimCluster,
) -> None:
    shim = single.shims[0]
    _until_healthy(shim)
    _serves_everything(shim, {shim.broker_url})
    for _round in range(3):
        shim.kill()
        shim.start()
        # Its dead incarnation still "owns" every bundle: the new one must take them back
        # (issue 11: "bundle … is already owned by 21", lookups 503 for 40 s and more).
        _until_healthy(shim)
        _serves_everything(shim, {shim.broker_url})
        status = shim.status()
        assert status is not None and status["memberState"] == "ACTIVE"
        assert "already owned" not in shim.log_tail()
    # Healthy means healthy: it stays 200 while it serves.
    assert all(_health(shim) == 200 for _ in range(20))


@pytest.fixture
def three(kafka_bootstrap: str, tmp_path: Path) -> Iterator[ShimCluster]:
    cluster = ShimCluster(kafka_bootstrap, tmp_path, 3, session_timeout_ms=SESSION_MS, slots=16)
    try:
        yield cluster.start()
    finally:
        cluster.stop()


def test_owners_killed_and_restarted_at_once_become_healthy_and_never_answer_500(
    three: ShimCluster,
) -> None:
    for shim in three.shims:
        _until_healthy(shim)
    urls = {s.broker_url for s in three.shims}
    _serves_everything(three.shims[0], urls)
    for _round in range(3):
        status = three.shims[0].status()
        assert status is not None
        counts = status["ownedBundles"]
        victim = max(three.shims, key=lambda s: counts.get(s.broker_id, 0))
        victim.kill()
        victim.start()  # immediately, with the same broker id
        _until_healthy(victim)
        for shim in three.shims:
            _until_healthy(shim)
            answers = _serves_everything(shim, urls)
            assert answers
        # While it settles nobody answers 500, on lookups or WebSocket upgrades.
        for shim in three.shims:
            for topic in TOPICS[:4]:
                path = topic.replace("persistent://", "/ws/v2/producer/persistent/")
                got = shim.get(path, timeout=10).status
                assert got < 500 or got == 503, (shim.broker_id, path, got)
                got = shim.get("/lookup/v2/topic/" + topic.replace("://", "/")).status
                assert got in (200, 503), (shim.broker_id, topic, got)


def test_an_ownership_producer_fenced_by_its_own_timeout_is_renewed_not_failed(
    three: ShimCluster,
) -> None:
    """What a stalled sidecar sees after its ownership transaction outlived
    transaction.timeout.ms: the coordinator bumped the epoch, the next commit is fenced,
    though no other process has its broker id. Simulated by bumping the epoch from outside
    (init_transactions with its transactional id); the sidecar renews its producer instead of
    failing its cluster service, and stays healthy and serving."""
    from sync._constants import OWNERSHIP_TRANSACTIONAL_ID_PREFIX
    from sync.transport import KafkaConfig, KafkaTransport

    for shim in three.shims:
        _until_healthy(shim)
    urls = {s.broker_url for s in three.shims}
    _serves_everything(three.shims[0], urls)
    victim = three.shims[1]
    bump = KafkaTransport(KafkaConfig(three.bootstrap)).producer(
        transactional_id=f"{OWNERSHIP_TRANSACTIONAL_ID_PREFIX}{three.name}.{victim.broker_id}"
    )
    bump.init_transactions(30)
    bump.close()
    # A fresh namespace's bundles need claims: each member commits for its own slots.
    ns = f"/admin/v2/namespaces/public/renewed-{three.name}"  # namespaces are global
    assert three.shims[0].put(ns, json.dumps({"bundles": {"numBundles": 16}})).status == 204
    fresh = [f"persistent://public/renewed-{three.name}/t-{i}" for i in range(48)]
    deadline = time.monotonic() + 60
    log = ""
    while "renewing it" not in log and time.monotonic() < deadline:
        lookups(victim, fresh)
        time.sleep(0.2)
        log = victim.log.read_text(errors="replace")
    assert "renewing it" in log, victim.log_tail()
    assert "cluster service failed" not in log, _fences(log)
    _until_healthy(victim)
    assert all(url in urls for url in lookups(victim, fresh))
    status = victim.status()
    assert status is not None and status["memberState"] == "ACTIVE"
