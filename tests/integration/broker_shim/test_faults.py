"""Faults on real Kafka: kill -9 sidecars, restart the broker, lose a cluster node.

After each fault every cache must equal a fresh replay of the log (same digest) and
no acknowledged write may be missing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from chaos.procs import KafkaCluster
from sync import CacheConfig, PolicyCache, PolicyService, PolicyTarget, ServiceConfig
from sync.transport import KafkaConfig, KafkaTransport
from tests.integration.broker_shim.test_lookup_http import ShimProcess
from tests.support.http import http
from tests.support.kafka import KAFKACTL, free_port, jar_broker
from tests.support.sidecars import Sidecar, run_cli
from tests.support.waits import wait_for


def _fresh_digest(bootstrap: str, topic: str) -> str:
    cache = PolicyCache(
        KafkaTransport(KafkaConfig(bootstrap)), config=CacheConfig(topic=topic, dead_letter=False)
    ).start()
    try:
        cache.wait_ready(120)
        return cache.digest()
    finally:
        cache.close()


class Writer:
    """Writes distinct keys in a thread and remembers what was acknowledged."""

    def __init__(self, service: PolicyService, prefix: str) -> None:
        self.service = service
        self.prefix = prefix
        self.acked: dict[str, int] = {}
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            target = PolicyTarget.parse(f"acme/ops/{self.prefix}-{i}")
            try:
                self.service.set(target, {"maxConsumerPerTopic": i})
                self.acked[target.key] = i
            except Exception:
                self.failures += 1
            i += 1

    def __enter__(self) -> Writer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(120)

    def check_present_in(self, service: PolicyService) -> None:
        service.cache.sync(60)
        for key, value in self.acked.items():
            got = service.cache.get(key)
            assert got is not None and got["maxConsumerPerTopic"] == value, key


def _seed(bootstrap: str, topic: str, n: int) -> None:
    lines = "\n".join(
        json.dumps({"target": f"acme/seed/t{i}", "policies": {"maxConsumerPerTopic": i}})
        for i in range(n)
    )
    r = run_cli("policyctl", "--topic", topic, "import", "-", bootstrap=bootstrap, stdin=lines)
    assert r.returncode == 0, r.stderr


def test_kill_9_sidecar_mid_bootstrap_and_mid_tail(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    topic = unique_name("ce")
    _seed(kafka_bootstrap, topic, 30_000)
    port = free_port()
    # mid-bootstrap: kill as soon as the sidecar reports BOOTSTRAPPING
    shim = Sidecar(kafka_bootstrap, topic, port, tmp_path)

    def bootstrapping() -> bool:
        try:
            return bool(
                http("GET", shim.url + "/health", timeout=1).json()["state"] == "BOOTSTRAPPING"
            )
        except OSError:
            return False

    wait_for(
        bootstrapping, "the sidecar bootstrapping", timeout_s=60, interval_s=0.01, required=False
    )
    shim.stop(signal.SIGKILL)
    svc = PolicyService(
        KafkaTransport(KafkaConfig(kafka_bootstrap)), ServiceConfig(cache=CacheConfig(topic=topic))
    ).start(timeout_s=120)
    try:
        shim = Sidecar(kafka_bootstrap, topic, port, tmp_path)
        shim.wait_ready(120)
        # mid-tail: kill while a writer is busy, then restart and compare
        with Writer(svc, "w") as writer:
            time.sleep(1.0)
            shim.stop(signal.SIGKILL)
            time.sleep(0.5)
        assert writer.acked and writer.failures == 0
        shim = Sidecar(kafka_bootstrap, topic, port, tmp_path)
        shim.wait_ready(120)
        svc.cache.sync(60)
        writer.check_present_in(svc)
        fresh = _fresh_digest(kafka_bootstrap, topic)
        wait_for(
            lambda: shim.digest()["digest"] == fresh,
            "the restarted sidecar's digest equal to a fresh replay's",
            timeout_s=30,
            interval_s=0.2,
        )
        assert shim.digest()["digest"] == fresh == svc.cache.digest()
        assert shim.stop() == 0
    finally:
        svc.close()


def test_broker_restart_under_a_tailing_cache(
    unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    port, cport = free_port(), free_port()
    state = tmp_path / "broker"
    ctl = [sys.executable, str(KAFKACTL)]
    node = ["--port", str(port), "--state-dir", str(state)]
    where = [*node, "--controller-port", str(cport)]
    topic = unique_name("ce")
    with jar_broker_at(ctl, where, node) as bootstrap:
        transport = KafkaTransport(KafkaConfig(bootstrap))
        writer_svc = PolicyService(transport, ServiceConfig(cache=CacheConfig(topic=topic))).start(
            timeout_s=60
        )
        tailer = PolicyService(
            KafkaTransport(KafkaConfig(bootstrap)), ServiceConfig(cache=CacheConfig(topic=topic))
        ).start(timeout_s=60)
        before = [PolicyTarget.parse(f"acme/ops/before-{i}") for i in range(20)]
        for t in before:
            writer_svc.set(t, {"maxConsumerPerTopic": 1})
        subprocess.run([*ctl, "down", *node], check=True, capture_output=True)
        time.sleep(2.0)  # the tailing cache keeps running without a broker
        subprocess.run([*ctl, "up", *where], check=True, capture_output=True)
        after = [PolicyTarget.parse(f"acme/ops/after-{i}") for i in range(20)]
        for t in after:
            writer_svc.set(t, {"maxConsumerPerTopic": 2})
        tailer.cache.sync(60)
        for t in before + after:
            assert tailer.get(t) is not None, t.key
        assert tailer.cache.digest() == _fresh_digest(bootstrap, topic)
        tailer.close()
        writer_svc.close()


class jar_broker_at:  # noqa: N801 - used like a context manager function
    """A jar broker at a fixed port/state dir (so it can be restarted with its data)."""

    def __init__(self, ctl: list[str], where: list[str], node: list[str]) -> None:
        self.ctl, self.where, self.node = ctl, where, node

    def __enter__(self) -> str:
        out = subprocess.run([*self.ctl, "up", *self.where], capture_output=True, text=True)
        assert out.returncode == 0, out.stdout + out.stderr
        return out.stdout.strip().splitlines()[-1]

    def __exit__(self, *exc: object) -> None:
        subprocess.run([*self.ctl, "down", *self.node, "--purge"], capture_output=True)


def test_losing_a_broker_of_three_during_writes(
    kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    cluster = kafka_cluster.bootstrap
    topic = unique_name("ce")

    def service() -> PolicyService:
        return PolicyService(
            KafkaTransport(KafkaConfig(cluster)),
            ServiceConfig(cache=CacheConfig(topic=topic, replication_factor=3)),
        ).start(timeout_s=120)

    writer_svc, reader = service(), service()
    try:
        with Writer(writer_svc, "w") as writer:
            wait_for(
                lambda: len(writer.acked) >= 5,
                "5 writes acknowledged",
                timeout_s=60,
                interval_s=0.1,
            )
            kafka_cluster.kill(2)
            before_kill = len(writer.acked)
            wait_for(
                lambda: len(writer.acked) >= before_kill + 20,
                "20 more writes acknowledged with 2 of 3 brokers",
                timeout_s=60,
                interval_s=0.1,
            )
        assert before_kill >= 5
        assert len(writer.acked) >= before_kill + 20, "writes must go on with 2 of 3 brokers"
        writer.check_present_in(reader)
        reader.cache.sync(60)
        assert reader.cache.digest() == writer_svc.cache.digest() == _fresh_digest(cluster, topic)
    finally:
        reader.close()
        writer_svc.close()


_ = jar_broker  # the session broker comes from the same launcher


def test_a_clean_stop_with_kafka_gone_is_bounded_by_the_shutdown_timeout(
    tmp_path: Path,
) -> None:
    """SIGTERM while Kafka is unreachable: the stop cannot release or unregister, and
    ``--shutdown-timeout`` ends it (chaos run 6: a stop during a broker outage still ran
    after 60 s and was SIGKILLed). Kafka running again, the next stop finishes cleanly."""
    port, cport = free_port(), free_port()
    ctl = [sys.executable, str(KAFKACTL)]
    node = ["--port", str(port), "--state-dir", str(tmp_path / "broker")]
    where = [*node, "--controller-port", str(cport)]
    with jar_broker_at(ctl, where, node) as bootstrap:
        shim = ShimProcess(
            bootstrap, f"stop{port}", "b0", tmp_path,
            session_timeout_ms=2000, slots=4,
            extra=("--shutdown-timeout", "3", "--log-level", "info"),
        ).start()  # fmt: skip
        try:
            shim.wait_ready(120)
            assert shim.get("/lookup/v2/topic/persistent/public/default/t").status == 200
            pid = int((tmp_path / "broker" / "kafka.pid").read_text().strip())
            os.kill(pid, signal.SIGKILL)
            shim.signal(signal.SIGTERM)
            assert shim.proc is not None
            code = shim.proc.wait(120)  # a liveness bound, not a speed check
        finally:
            shim.stop()
        log = shim.log.read_text(errors="replace")
        assert code == 0, log[-4000:]
        assert "graceful stop not finished after 3.0s" in log, log[-4000:]
        subprocess.run([*ctl, "up", *where], check=True, capture_output=True)
        shim.start()
        try:
            shim.wait_ready(120)
            shim.signal(signal.SIGTERM)
            assert shim.proc is not None
            code = shim.proc.wait(120)
        finally:
            shim.stop()
        log = shim.log.read_text(errors="replace")
        assert code == 0, log[-4000:]
        assert "stopped cleanly in" in log, log[-4000:]
