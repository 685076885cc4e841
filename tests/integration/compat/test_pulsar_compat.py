"""Differential test against the real Pulsar 4.0.7, without starting Pulsar (issue 13).

A fresh ``broker-shim run`` (cluster ``standalone``, like Pulsar's) on the real test Kafka
gets every request of ``tests/compat/cases.py`` in order; its answers must equal the ones a
real Pulsar standalone gave (``tests/compat/pulsar-4.0.7.json``, recorded by ``make
compat``), except the differences listed with a reason in ``tests/compat/differences.json``.

Bad input writes nothing: around every write Pulsar refused, the end offsets of the
sidecar's policy topic must not move, and the registry topic may gain only the brokers'
own heartbeat records (``broker/…``, ``members/…``), never a tenant, namespace or topic.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import websockets

from sync._constants import REGISTRY_TOPIC
from sync.transport import KafkaConfig, KafkaTransport
from tests.compat.cases import CASES, Case
from tests.compat.record import (
    Answer,
    differences,
    load_differences,
    load_recorded,
    run_case,
)
from tests.support.http import http
from tests.support.kafka import free_port, jar_broker
from tests.support.sidecars import BIN
from tests.support.waits import wait_for

#: Registry keys a live sidecar writes on its own (registration heartbeats, membership).
_BACKGROUND_KEYS = ("broker/", "members/")


class CompatSidecar:
    def __init__(self, bootstrap: str, workdir: Path, extra: tuple[str, ...] = ()) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.policy_topic = f"__change_events.compat-{uuid.uuid4().hex[:8]}"
        self.log = workdir / "shim.log"
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    str(BIN / "broker-shim"), "run",
                    "--broker-id", "compat-1",
                    "--http-port", str(self.port),
                    "--bootstrap-servers", bootstrap,
                    "--cluster", "standalone",
                    "--broker-url", f"pulsar://127.0.0.1:{free_port()}",
                    # any free port: 6650 may be another run's (a second clone's tests,
                    # a real Pulsar standalone), and the sidecar then could not start
                    "--broker-port", "0",
                    "--state-dir", str(workdir / "state"),
                    "--topic", self.policy_topic,
                    "--log-level", "warning",
                    *extra,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )  # fmt: skip

    def wait_ready(self, timeout: float = 120) -> None:

        def ready() -> bool:
            assert self.proc.poll() is None, self.log.read_text(errors="replace")[-4000:]
            try:
                # Ready, and its own registration is live (Pulsar's readiness: it lists
                # its cluster and brokers).
                return http("GET", self.url + "/health", timeout=2).status == 200 and http(
                    "GET", self.url + "/admin/v2/brokers", timeout=2
                ).body not in ("", "[]")
            except OSError:
                return False

        wait_for(
            ready,
            lambda: f"the sidecar ready: {self.log.read_text(errors='replace')[-4000:]}",
            timeout_s=timeout,
            interval_s=0.1,
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture(scope="module")
def compat_kafka() -> Iterator[str]:
    """A Kafka of its own, as Pulsar standalone has its own metadata store: the suite's
    shared broker holds other tests' clusters and tenants, which the sidecar would list."""
    with jar_broker() as bootstrap:
        yield bootstrap


@pytest.fixture(scope="module")
def sidecar(compat_kafka: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CompatSidecar]:
    shim = CompatSidecar(compat_kafka, tmp_path_factory.mktemp("compat"))
    try:
        shim.wait_ready()
        yield shim
    finally:
        shim.stop()


class Offsets:
    """End offsets of the sidecar's project topics, and what was written since."""

    def __init__(self, transport: KafkaTransport, policy_topic: str) -> None:
        self.consumer = transport.consumer(read_committed=False)
        self.policy_topic = policy_topic

    def ends(self) -> tuple[dict[int, int], dict[int, int]]:
        return (
            self.consumer.end_offsets(self.policy_topic, [0]),
            self.consumer.end_offsets(REGISTRY_TOPIC, [0]),
        )

    def registry_keys_since(self, start: int, end: int) -> list[str]:
        if end <= start:
            return []
        self.consumer.assign(REGISTRY_TOPIC, {0: start})
        keys: list[str] = []
        position = start
        deadline = time.monotonic() + 30
        while position < end:
            assert time.monotonic() < deadline, "could not read the registry"
            for msg in self.consumer.consume(100, 0.2):
                offset = msg.offset()
                assert offset is not None
                position = offset + 1
                if offset < end:
                    keys.append((msg.key() or b"").decode(errors="replace"))
        return keys

    def close(self) -> None:
        self.consumer.close()


def _refused_write(case: Case, expected: Answer) -> bool:
    return case.method != "GET" and expected.status >= 400


def test_sidecar_answers_like_the_recorded_pulsar(
    sidecar: CompatSidecar, compat_kafka: str
) -> None:
    recorded = load_recorded()
    listed = load_differences()
    assert set(listed) <= {c.name for c in CASES}, "differences.json names unknown cases"
    offsets = Offsets(KafkaTransport(KafkaConfig(compat_kafka)), sidecar.policy_topic)
    actual: dict[str, Answer] = {}
    leaks: list[str] = []
    try:
        for case in CASES:
            expected = recorded[case.name]
            if not _refused_write(case, expected):
                actual[case.name] = run_case(sidecar.url, case)
                continue
            policy_before, registry_before = offsets.ends()
            actual[case.name] = answer = run_case(sidecar.url, case)
            policy_after, registry_after = offsets.ends()
            if answer.status < 400:
                continue  # a listed difference: the sidecar accepted it (checked below)
            if policy_after != policy_before:
                leaks.append(f"{case.name}: policy topic {policy_before} -> {policy_after}")
            written = offsets.registry_keys_since(registry_before[0], registry_after[0])
            foreign = [k for k in written if not k.startswith(_BACKGROUND_KEYS)]
            if foreign:
                leaks.append(f"{case.name}: registry records {foreign}")
    finally:
        offsets.close()
    found = differences(recorded, actual)
    unlisted = [d.describe() for d in found if d.name not in listed]
    now_equal = sorted(set(listed) - {d.name for d in found})
    assert not leaks, "refused requests wrote:\n" + "\n".join(leaks)
    assert not unlisted, f"{len(unlisted)} unlisted differences:\n" + "\n".join(unlisted)
    assert not now_equal, f"listed in differences.json but now equal: {now_equal}"
    # The comparison really ran: most cases agree, including the error answers.
    agreeing = [c for c in CASES if c.name not in listed]
    assert len(agreeing) >= 500
    assert sum(recorded[c.name].status >= 400 for c in agreeing) >= 200


def test_websocket_pingpong(sidecar: CompatSidecar) -> None:
    """Pulsar's ``/ws/pingpong``: every ping is answered with a pong; text is echoed."""

    async def scenario() -> None:
        url = sidecar.url.replace("http://", "ws://") + "/ws/pingpong"
        async with websockets.connect(url, open_timeout=30) as ws:
            for _ in range(3):
                pong = await ws.ping()
                await asyncio.wait_for(pong, 30)
            await ws.send("hello")
            assert await asyncio.wait_for(ws.recv(), 30) == "hello"

    asyncio.run(scenario())
