"""Issue 11: WebSocket produce + consume traffic through a sidecar while Kafka brokers die
or freeze. Every acknowledged message is delivered, and a message delivered more than
once comes back with ``redeliveryCount`` >= 1 (the chaos soak saw 36 duplicates with 0).

Faults, one after the other, each while a producer sends one message at a time (as the
soak's producers do) and a Shared consumer acknowledges every delivery:

1. kill -9 of the broker leading the topic's Kafka partition, restarted 10 s later;
2. SIGSTOP of the coordinator of the subscription's consumer group for 10 s (commits
   fail meanwhile), then SIGCONT;
3. kill -9 of that coordinator, restarted 10 s later.

Uses the shared 3-broker cluster (the ``kafka_cluster`` fixture holds its lock).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import websockets

from chaos.procs import KafkaCluster
from tests.integration.broker_shim.test_lookup_http import ShimCluster
from tests.support.waits import eventually, wait_for

TOPIC = "ws-broker-loss"
SUBSCRIPTION = "s"
KAFKA_TOPIC = f"p.public.default.{TOPIC}"
GROUP = f"policy-sync.sub/{KAFKA_TOPIC}/{SUBSCRIPTION}"


def _ask(bootstrap: str, code: str, *args: str) -> int:
    """One integer from a throw-away confluent-kafka process (no admin client here)."""
    out: list[subprocess.CompletedProcess[str]] = []

    def answered() -> bool:
        out[:] = [
            subprocess.run(
                [sys.executable, "-c", code, bootstrap, *args], capture_output=True, text=True
            )
        ]
        return out[0].returncode == 0

    wait_for(answered, lambda: f"an answer to {args}: {out[0].stderr}", timeout_s=120, interval_s=1)
    return int(out[0].stdout.strip())


_LEADER = (
    "import sys\n"
    "from confluent_kafka.admin import AdminClient\n"
    "a = AdminClient({'bootstrap.servers': sys.argv[1]})\n"
    "t = a.list_topics(sys.argv[2], timeout=10).topics[sys.argv[2]]\n"
    "assert t.error is None and t.partitions[0].leader >= 0, t\n"
    "print(t.partitions[0].leader)\n"
)
_COORDINATOR = (
    "import sys\n"
    "from confluent_kafka.admin import AdminClient\n"
    "a = AdminClient({'bootstrap.servers': sys.argv[1]})\n"
    "d = a.describe_consumer_groups([sys.argv[2]], request_timeout=10)[sys.argv[2]]\n"
    "print(d.result().coordinator.id)\n"
)


@dataclass
class _Traffic:
    url: str
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    consuming: asyncio.Event = field(default_factory=asyncio.Event)
    acked: set[str] = field(default_factory=set)
    deliveries: dict[str, list[int]] = field(default_factory=dict)
    #: The message ids each payload came with (two ids: stored twice, not redelivered).
    ids: dict[str, list[str]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    async def produce(self) -> None:
        seq = 0
        path = f"{self.url}/ws/v2/producer/persistent/public/default/{TOPIC}"
        while not self.stop.is_set():
            try:
                async with websockets.connect(path, open_timeout=10, close_timeout=2) as ws:
                    while not self.stop.is_set():
                        seq += 1
                        mid = str(seq)
                        frame = {"payload": base64.b64encode(mid.encode()).decode(), "context": mid}
                        await ws.send(json.dumps(frame))
                        answer = json.loads(await asyncio.wait_for(ws.recv(), 30))
                        if answer.get("result") == "ok":
                            self.acked.add(str(answer.get("context")))
                        await asyncio.sleep(0.02)
            except Exception as exc:  # noqa: BLE001 - reconnect, as the soak does
                self.errors.append(f"producer: {type(exc).__name__}: {exc}"[:200])
                await asyncio.sleep(0.5)

    async def consume(self) -> None:
        path = (
            f"{self.url}/ws/v2/consumer/persistent/public/default/{TOPIC}/{SUBSCRIPTION}"
            "?subscriptionType=Shared&subscriptionInitialPosition=Earliest"
        )
        while self.consuming.is_set():
            try:
                async with websockets.connect(path, open_timeout=10, close_timeout=2) as ws:
                    while self.consuming.is_set():
                        try:
                            raw = await asyncio.wait_for(ws.recv(), 1.0)
                        except TimeoutError:
                            continue
                        msg = json.loads(raw)
                        mid = base64.b64decode(msg["payload"]).decode()
                        count = int(msg.get("redeliveryCount", 0))
                        self.deliveries.setdefault(mid, []).append(count)
                        self.ids.setdefault(mid, []).append(msg["messageId"])
                        await ws.send(json.dumps({"messageId": msg["messageId"]}))
            except Exception as exc:  # noqa: BLE001 - reconnect, as the soak does
                self.errors.append(f"consumer: {type(exc).__name__}: {exc}"[:200])
                await asyncio.sleep(0.5)


async def _faults(traffic: _Traffic, brokers: KafkaCluster) -> list[str]:
    bootstrap = brokers.bootstrap
    done: list[str] = []

    async def wait_traffic(seconds: float) -> None:
        before = len(traffic.acked)
        await asyncio.sleep(seconds)
        await eventually(  # traffic flows again before the next fault
            lambda: len(traffic.acked) > before + 20,
            "20 more messages acknowledged",
            timeout_s=180,
            interval_s=0.5,
            required=False,
        )

    await wait_traffic(5)
    leader = await asyncio.to_thread(_ask, bootstrap, _LEADER, KAFKA_TOPIC)
    brokers.kill(leader)
    done.append(f"kill -9 of partition leader {leader}")
    await asyncio.sleep(10)
    await asyncio.to_thread(brokers.up)
    await wait_traffic(5)

    coordinator = await asyncio.to_thread(_ask, bootstrap, _COORDINATOR, GROUP)
    os.kill(brokers.pid(coordinator), signal.SIGSTOP)
    done.append(f"SIGSTOP of group coordinator {coordinator}")
    await asyncio.sleep(10)
    os.kill(brokers.pid(coordinator), signal.SIGCONT)
    await wait_traffic(5)

    coordinator = await asyncio.to_thread(_ask, bootstrap, _COORDINATOR, GROUP)
    brokers.kill(coordinator)
    done.append(f"kill -9 of group coordinator {coordinator}")
    await asyncio.sleep(10)
    await asyncio.to_thread(brokers.up)
    await wait_traffic(5)
    return done


async def _run(url: str, brokers: KafkaCluster) -> tuple[_Traffic, list[str]]:
    traffic = _Traffic(url)
    traffic.consuming.set()
    jobs = [asyncio.create_task(traffic.produce()), asyncio.create_task(traffic.consume())]
    try:
        done = await _faults(traffic, brokers)
        traffic.stop.set()
        await eventually(
            lambda: traffic.acked <= set(traffic.deliveries),
            "every acknowledged message delivered",
            timeout_s=180,
            interval_s=0.5,
            required=False,
        )
        await asyncio.sleep(3)  # late duplicates, if any
    finally:
        traffic.stop.set()
        traffic.consuming.clear()
        await asyncio.gather(*jobs, return_exceptions=True)
    return traffic, done


def test_ws_traffic_survives_broker_loss_without_silent_duplicates(
    kafka_cluster: KafkaCluster, tmp_path: Path
) -> None:
    cluster = ShimCluster(kafka_cluster.bootstrap, tmp_path, 1, session_timeout_ms=2000, slots=16)
    try:
        cluster.start()
        shim = cluster.shims[0]
        traffic, done = asyncio.run(_run(shim.url.replace("http://", "ws://"), kafka_cluster))
        assert shim.alive(), shim.log_tail()
    finally:
        cluster.stop()
    lost = sorted(traffic.acked - set(traffic.deliveries), key=int)
    silent = sorted((mid for mid, counts in traffic.deliveries.items() if 0 in counts[1:]), key=int)
    repeated = sum(1 for counts in traffic.deliveries.values() if len(counts) > 1)
    print(
        f"\nfaults: {done}; acknowledged {len(traffic.acked)}, delivered "
        f"{len(traffic.deliveries)}, delivered more than once {repeated}, of which without "
        f"a redelivery count {len(silent)}; reconnects/errors {len(traffic.errors)}"
    )
    assert len(traffic.acked) > 100, traffic.errors[-5:]
    assert not lost, f"acknowledged but never delivered: {lost[:20]}"
    assert not silent, (
        f"delivered again with redeliveryCount 0: {silent[:20]} "
        f"({ {m: (traffic.deliveries[m], traffic.ids[m]) for m in silent[:5]} })"
    )
