"""Lookup, bundles, partitioned topics and the NameServer API: three real sidecar
processes on a real Kafka, and the real Pulsar Python client.

``ShimCluster`` (also used by ``test_ownership_failover.py``) runs ``broker-shim run``
processes of one fresh cluster.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sync.naming._kafka_names import kafka_topic_of
from sync.naming._names import TopicName
from sync.transport import KafkaConfig, KafkaTransport
from tests.support.http import HttpResult, http
from tests.support.kafka import free_port
from tests.support.sidecars import BIN
from tests.support.waits import wait_for


class ShimProcess:
    """One ``broker-shim run`` of a test cluster."""

    def __init__(
        self,
        bootstrap: str,
        cluster: str,
        broker_id: str,
        workdir: Path,
        *,
        session_timeout_ms: int,
        slots: int,
        extra: tuple[str, ...] = (),
    ) -> None:
        self.bootstrap = bootstrap
        self.cluster = cluster
        self.broker_id = broker_id
        self.workdir = workdir
        self.session_timeout_ms = session_timeout_ms
        self.slots = slots
        self.extra = extra
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = workdir / f"shim-{broker_id}.log"

    def start(self) -> ShimProcess:
        self.workdir.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    str(BIN / "broker-shim"), "run",
                    "--broker-id", self.broker_id,
                    "--http-port", str(self.port),
                    "--broker-port", "0",
                    "--bootstrap-servers", self.bootstrap,
                    "--cluster", self.cluster,
                    "--broker-url", f"pulsar://127.0.0.1:{self.port + 10000}",
                    "--state-dir", str(self.workdir / f"state-{self.broker_id}"),
                    "--topic", f"__change_events.{self.cluster}",
                    "--session-timeout-ms", str(self.session_timeout_ms),
                    "--ownership-slots", str(self.slots),
                    "--log-level", "warning",
                    *self.extra,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
        return self

    @property
    def broker_url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port + 10000}"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def get(self, path: str, timeout: float = 10) -> HttpResult:
        return http("GET", self.url + path, timeout=timeout)

    def put(self, path: str, body: str | None = None) -> HttpResult:
        return http("PUT", self.url + path, body)

    def put_retrying(self, path: str, limit_s: float = 120.0) -> HttpResult:
        """PUT ``path`` again while the sidecar answers 503 (it says when to retry: a
        loaded machine can take longer than one request's 30 s to move a bundle); a
        liveness bound, not a timing check."""
        deadline = time.monotonic() + limit_s
        while True:
            result = self.put(path)
            if result.status != 503 or time.monotonic() >= deadline:
                return result
            time.sleep(1.0)  # its Retry-After

    def status(self) -> dict[str, Any] | None:
        try:
            result = self.get("/policy-sync/v1/cluster", timeout=2)
        except OSError:
            return None
        return dict(result.json()) if result.status == 200 else None

    def wait_ready(self, timeout: float = 60) -> None:

        def ready() -> bool:
            if not self.alive():
                raise AssertionError(f"{self.broker_id} exited:\n{self.log_tail()}")
            status = self.status()
            return status is not None and status["state"] == "READY"

        wait_for(
            ready, lambda: f"{self.broker_id} READY in {timeout}s:\n{self.log_tail()}", timeout
        )

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def kill(self) -> None:
        """kill -9: no goodbye to the group, no release, no unregister."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGCONT)
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


class ShimCluster:
    """Several sidecars of one fresh cluster (unique topics and group)."""

    def __init__(
        self,
        bootstrap: str,
        workdir: Path,
        n: int,
        *,
        session_timeout_ms: int = 1000,
        slots: int = 16,
    ) -> None:
        self.name = "it" + uuid.uuid4().hex[:8]
        self.bootstrap = bootstrap
        self.shims = [
            ShimProcess(
                bootstrap, self.name, f"b{i}", workdir,
                session_timeout_ms=session_timeout_ms, slots=slots,
            )
            for i in range(n)
        ]  # fmt: skip

    def start(self) -> ShimCluster:
        for shim in self.shims:
            shim.start()
        for shim in self.shims:
            shim.wait_ready()
        self.wait_members({s.broker_id for s in self.shims})
        return self

    def live(self) -> list[ShimProcess]:
        return [s for s in self.shims if s.alive()]

    def wait_members(
        self,
        expected: set[str],
        timeout: float = 30,
        among: list[ShimProcess] | None = None,
    ) -> float:
        """Wait until every running sidecar (or those ``among``) lists exactly ``expected``
        as live."""
        started = time.monotonic()
        views: list[dict[str, Any] | None] = []

        def agreed() -> bool:
            views[:] = [s.status() for s in (self.live() if among is None else among)]
            return all(v is not None and set(v["liveBrokers"]) == expected for v in views)

        wait_for(agreed, lambda: f"live brokers {sorted(expected)}: {views}", timeout)
        return time.monotonic() - started

    def stop(self) -> None:
        for shim in self.shims:
            shim.stop()


def lookups(shim: ShimProcess, topics: list[str]) -> list[str | None]:
    """The brokerUrl each topic resolves to on ``shim`` (None on any error)."""
    out: list[str | None] = []
    for topic in topics:
        try:
            result = shim.get("/lookup/v2/topic/" + topic.replace("://", "/"), timeout=5)
        except OSError:
            out.append(None)
            continue
        out.append(result.json()["brokerUrl"] if result.status == 200 else None)
    return out


def wait_agreement(
    shims: list[ShimProcess],
    topics: list[str],
    *,
    ok: Callable[[str], bool] = lambda _url: True,
    timeout: float = 30,
) -> tuple[float, list[str | None]]:
    """Poll until every sidecar gives the same, acceptable owner for every topic."""
    started = time.monotonic()
    views: list[list[str | None]] = []

    def agreed() -> bool:
        views[:] = [lookups(s, topics) for s in shims]
        return (
            all(v == views[0] for v in views)
            and None not in views[0]
            and all(ok(url) for url in views[0] if url is not None)
        )

    wait_for(
        agreed, lambda: f"sidecars agreeing on {topics[:3]}…: {views}", timeout, interval_s=0.02
    )
    return time.monotonic() - started, views[0]


@pytest.fixture(scope="module")
def shim_cluster(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ShimCluster]:
    cluster = ShimCluster(kafka_bootstrap, tmp_path_factory.mktemp("lookup"), 3)
    try:
        yield cluster.start()
    finally:
        cluster.stop()


def test_every_sidecar_gives_the_same_live_answer(shim_cluster: ShimCluster) -> None:
    a, b, c = shim_cluster.shims
    # Namespaces are global (like Pulsar's configuration store): unique per run.
    orders = f"acme/orders-{shim_cluster.name}"
    topics = [f"persistent://{orders}/o-{i}" for i in range(40)]
    ns = f"/admin/v2/namespaces/{orders}"
    assert a.put("/admin/v2/tenants/acme", "{}").status in (204, 409)  # Pulsar: tenant first
    assert a.put(ns, json.dumps({"bundles": {"numBundles": 16}})).status == 204
    assert b.put(ns).status == 409
    assert c.get(ns + "/bundles").json()["numBundles"] == 16
    # The first answers claim the bundles; then all three sidecars agree.
    _, owners = wait_agreement(shim_cluster.shims, topics)
    assert set(owners) <= {s.broker_url for s in shim_cluster.shims}
    assert len(set(owners)) == 3  # 16 bundles spread over all three brokers
    body = a.get(f"/lookup/v2/topic/persistent/{orders}/o-1").json()
    # Pulsar omits the TLS URLs that are not configured.
    assert set(body) == {"brokerUrl", "httpUrl", "nativeUrl", "brokerUrlSsl"}
    owner = next(s for s in shim_cluster.shims if s.broker_url == body["brokerUrl"])
    assert body["httpUrl"] == owner.url
    # Pulsar's errors.
    bad = a.get(f"/lookup/v2/topic/persistent/{orders}/%20")
    assert bad.status == 412 and "blank" in bad.json()["reason"]
    assert a.get("/lookup/v2/topic/persistent/acme/nope/x").status == 404


def test_brokers_and_clusters_like_pulsar(shim_cluster: ShimCluster) -> None:
    for shim in shim_cluster.shims:
        assert shim_cluster.name in shim.get("/admin/v2/clusters").json()
        listed = shim.get(f"/admin/v2/brokers/{shim_cluster.name}").json()
        assert listed == sorted(f"127.0.0.1:{s.port}" for s in shim_cluster.shims)
    info = shim_cluster.shims[0].get("/registry/v1/cluster-info").json()
    assert info["clusterAddrTable"][shim_cluster.name] == ["b0", "b1", "b2"]


def test_partitioned_topics_and_the_real_pulsar_client(
    shim_cluster: ShimCluster, kafka_bootstrap: str
) -> None:
    import pulsar

    a, b, c = shim_cluster.shims
    topic = "persistent://public/default/it-" + shim_cluster.name
    path = "/admin/v2/" + topic.replace("://", "/") + "/partitions"
    assert a.put(path, "5").status == 204
    assert b.put(path, "5").status == 409
    assert a.put(path.replace("it-", "zero-"), "0").status == 406  # Pulsar's Not Acceptable
    kafka_name = kafka_topic_of(TopicName.parse(topic))
    desc = KafkaTransport(KafkaConfig(kafka_bootstrap)).admin().describe_topic(kafka_name)
    assert desc is not None and desc.partitions == 5
    for shim in shim_cluster.shims:
        assert shim.get(path).json() == {"partitions": 5, "deleted": False}
        client = pulsar.Client(shim.url)
        try:
            assert client.get_topic_partitions(topic) == [
                f"{topic}-partition-{i}" for i in range(5)
            ]
            assert client.get_topic_partitions("persistent://public/default/plain") == [
                "persistent://public/default/plain"
            ]
        finally:
            client.close()
    # Each partition is placed on its own; all sidecars agree on every one.
    wait_agreement(shim_cluster.shims, [f"{topic}-partition-{i}" for i in range(5)])
    route = c.get("/registry/v1/route/" + topic.replace("://", "/")).json()
    assert sum(q["readQueueNums"] for q in route["queueDatas"]) == 5


def test_split_and_unload_move_through_every_sidecar(shim_cluster: ShimCluster) -> None:
    a, b, c = shim_cluster.shims
    split = f"acme/split-{shim_cluster.name}"
    ns = f"/admin/v2/namespaces/{split}"
    assert a.put("/admin/v2/tenants/acme", "{}").status in (204, 409)  # Pulsar: tenant first
    assert a.put(ns, json.dumps({"bundles": {"numBundles": 2}})).status == 204
    topics = [f"persistent://{split}/s-{i}" for i in range(12)]
    wait_agreement(shim_cluster.shims, topics)
    assert b.put(ns + "/0x00000000_0x80000000/split").status == 204
    for shim in shim_cluster.shims:
        assert shim.get(ns + "/bundles").json()["numBundles"] == 3
    wait_agreement(shim_cluster.shims, topics)
    bundle = c.get(f"/lookup/v2/topic/persistent/{split}/s-0/bundle").body
    assert c.put_retrying(f"{ns}/{bundle}/unload").status == 204
    owned = a.get("/policy-sync/v1/ownership").json()["bundles"]
    assert owned.get(f"{split}/{bundle}", {}).get("state") in ("Free", "Owned")
    wait_agreement(shim_cluster.shims, topics)  # the next lookups claim it again


def test_kv_config_and_write_perms(shim_cluster: ShimCluster) -> None:
    a, b, _ = shim_cluster.shims
    kv = "/registry/v1/kv/ORDER_TOPIC_CONFIG/persistent%3A%2F%2Facme%2Forders%2Fx"
    assert a.put(kv, "b0:2;b1:2").status == 204
    assert b.get(kv).json() == {"value": "b0:2;b1:2"}
    assert http("POST", a.url + "/registry/v1/brokers/b1/wipe-write-perm").status == 200
    assert http("POST", b.url + "/registry/v1/brokers/b1/add-write-perm").status == 200
    assert http("DELETE", b.url + kv).status == 204
    assert a.get(kv).status == 404
