"""Messaging benchmarks: routing speed, and one sidecar over WebSocket vs raw Kafka.

Figures (printed, and returned by :func:`run`; nothing is asserted):

* ``route_murmur3_per_s`` – keyed ``choose_partition`` with Murmur3 (router only);
* ``producer_route_per_s`` – the same through ``PartitionedProducer.choose_partition``;
* ``ws_produce_per_s`` / ``kafka_produce_per_s`` – 100-byte messages published through
  one sidecar's WebSocket producer (acknowledged by Kafka) vs confluent-kafka directly;
* ``ws_consume_per_s`` / ``kafka_consume_per_s`` – the same messages received (and
  acknowledged, for the WebSocket consumer) vs a raw confluent-kafka consumer.

The sidecar runs as its own process (``broker-shim run``), so the benchmark's WebSocket
client (aiohttp's, in this process) does not share its interpreter. The producer keeps up
to 1,000 sends unanswered (Pulsar's ``maxPendingMessages``), as Pulsar's WebSocket clients
pipeline; a message counts once its ``ok`` came back. Run alone: ``python -m bench.messaging``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import random
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import orjson
from confluent_kafka import Consumer as RawConsumer
from confluent_kafka import Producer as RawProducer
from confluent_kafka import TopicPartition

from sync import TopicName, kafka_topic_of
from sync.messaging import PartitionedProducer, ProducerClient
from sync.routing import HashingScheme, RoundRobinPartitionRouter, RoutedMessage, TopicMetadata
from sync.transport import KafkaConfig, KafkaTransport, MemoryTransport, TopicSpec

from ._servers import sidecar

__all__ = ["run"]

ROOT = Path(__file__).resolve().parent.parent
PAYLOAD = b"x" * 100
PARTITIONS = 4
WARM_UP = 5_000


# --------------------------------------------------------------------------- routing


def bench_routing(keys: int = 200_000) -> tuple[float, float]:
    """Keyed Murmur3 choose_partition per second: the router alone, then via a producer."""
    rng = random.Random(1)
    names = [f"user-{rng.getrandbits(40):x}" for _ in range(keys)]
    msgs = [RoutedMessage(key=k) for k in names]
    meta = TopicMetadata(16)
    router = RoundRobinPartitionRouter(HashingScheme.Murmur3_32Hash)
    choose = router.choose_partition
    start = time.perf_counter()
    for m in msgs:
        choose(m, meta)
    router_rate = keys / (time.perf_counter() - start)

    memory = MemoryTransport()
    topic = TopicName.parse("persistent://bench/ns/route")
    memory.admin().ensure_topic(TopicSpec(kafka_topic_of(topic), 16))
    client = ProducerClient(memory)
    try:
        from sync.messaging import ProducerConfig

        producer = PartitionedProducer(
            client, topic, ProducerConfig(hashing_scheme="Murmur3_32Hash"), num_partitions=16
        )
        route = producer.choose_partition
        start = time.perf_counter()
        for k in names:
            route(k)
        producer_rate = keys / (time.perf_counter() - start)
    finally:
        client.close()
    return router_rate, producer_rate


# --------------------------------------------------------------------------- raw kafka


def bench_raw_kafka(bootstrap: str, count: int) -> tuple[float, float]:
    """confluent-kafka produce (acks=all, idempotent, linger 1 ms) then consume, msgs/s."""
    transport = KafkaTransport(KafkaConfig(bootstrap))
    topic = f"bench-raw-{uuid.uuid4().hex[:8]}"
    transport.admin().ensure_topic(TopicSpec(topic, PARTITIONS))
    producer = RawProducer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 1,
        }
    )
    delivered = 0

    def on_delivery(err: object, _msg: object) -> None:
        nonlocal delivered
        if err is None:
            delivered += 1

    start = time.perf_counter()
    for i in range(count):
        while True:
            try:
                producer.produce(topic, PAYLOAD, partition=i % PARTITIONS, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    producer.flush(60)
    produce_rate = delivered / (time.perf_counter() - start)

    consumer = RawConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got = 0
    start = time.perf_counter()
    while got < count and time.perf_counter() - start < 120:
        got += sum(1 for m in consumer.consume(1000, 1.0) if m.error() is None)
    consume_rate = got / (time.perf_counter() - start)
    consumer.close()
    transport.admin().delete_topic(topic)
    return produce_rate, consume_rate


# --------------------------------------------------------------------------- sidecar


@contextlib.contextmanager
def _sidecar(bootstrap: str) -> Iterator[str]:
    """One sidecar process (:func:`bench._servers.sidecar`); yields its WebSocket base URL."""
    with sidecar(bootstrap) as broker:
        yield broker.web_url.replace("http://", "ws://", 1) + "/ws/v2"


async def _ws_produce(url: str, count: int, window: int) -> float:
    """Publish ``count`` messages keeping up to ``window`` unanswered, as Pulsar's
    WebSocket clients pipeline sends; only ``ok`` answers count, and every send must
    be answered in order (each answer carries its send's ``context``)."""
    payload = base64.b64encode(PAYLOAD).decode()
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(url, max_msg_size=0, compress=0) as ws:
            acked = errors = 0
            room = asyncio.Semaphore(window)

            async def reader() -> None:
                nonlocal acked, errors
                while acked + errors < count:
                    msg = await ws.receive()
                    if msg.type is not aiohttp.WSMsgType.TEXT:
                        raise RuntimeError(f"producer connection ended: {msg.type!r}")
                    answer = orjson.loads(msg.data)
                    if answer.get("context") != acked + errors:
                        raise RuntimeError(f"answer out of order: {answer}")
                    if answer["result"] == "ok":
                        acked += 1
                    else:
                        errors += 1
                    room.release()

            start = time.perf_counter()
            task = asyncio.create_task(reader())
            for i in range(count):
                await room.acquire()
                await ws.send_str('{"payload":"' + payload + '","context":' + str(i) + "}")
            await task
            elapsed = time.perf_counter() - start
    if errors:
        print(f"  ({errors} WebSocket sends failed)")
    return acked / elapsed


async def _ws_consume(url: str, count: int) -> float:
    """Receive ``count`` messages, acknowledging each one by its ``messageId``."""
    marker = '"messageId":"'
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(url, max_msg_size=0, compress=0) as ws:
            got = 0
            start = time.perf_counter()
            while got < count:
                msg = await ws.receive()
                if msg.type is not aiohttp.WSMsgType.TEXT:
                    raise RuntimeError(f"consumer connection ended: {msg.type!r}")
                text = msg.data
                at = text.index(marker) + len(marker)
                await ws.send_str('{"messageId":"' + text[at : text.index('"', at)] + '"}')
                got += 1
            return got / (time.perf_counter() - start)


def bench_sidecar(bootstrap: str, count: int) -> tuple[float, float]:
    """Produce then consume ``count`` 100-byte messages through one sidecar, msgs/s."""
    transport = KafkaTransport(KafkaConfig(bootstrap))
    topic = TopicName.parse(f"persistent://public/default/bench-ws-{uuid.uuid4().hex[:8]}")
    transport.admin().ensure_topic(TopicSpec(kafka_topic_of(topic), PARTITIONS))
    path = f"persistent/public/default/{topic.local_name}"
    with _sidecar(bootstrap) as ws_url:
        produce_url = f"{ws_url}/producer/{path}?messageRoutingMode=RoundRobinPartition"
        consume_url = (
            f"{ws_url}/consumer/{path}/bench?subscriptionType=Shared"
            "&subscriptionInitialPosition=Earliest&receiverQueueSize=1000"
        )
        # Warm-up, not timed: the Kafka producer's first send waits for its idempotence
        # id, and a sidecar just started still verifies its policy cache in the background.
        asyncio.run(_ws_produce(produce_url, WARM_UP, 1000))
        produce_rate = asyncio.run(_ws_produce(produce_url, count, 1000))
        # Everything published is consumed (and timed), warm-up included.
        consume_rate = asyncio.run(_ws_consume(consume_url, count + WARM_UP))
    transport.admin().delete_topic(kafka_topic_of(topic))
    return produce_rate, consume_rate


# --------------------------------------------------------------------------- entry


def run(bootstrap: str | None = None, *, messages: int = 50_000) -> dict[str, float]:
    """Run every messaging benchmark, print the figures and ratios, return them.

    ``bootstrap`` defaults to ``$KAFKA_BOOTSTRAP_SERVERS``; without either, a broker is
    started as the tests start one (``tests/support/kafka.py``).
    """
    bootstrap = bootstrap or os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if bootstrap is None:
        sys.path.insert(0, str(ROOT))
        from tests.support.kafka import kafka_for_tests

        with kafka_for_tests() as started:
            return run(started, messages=messages)

    router_rate, producer_route_rate = bench_routing()
    print("messaging benchmarks")
    print(f"  keyed choose_partition, Murmur3 (router)      {router_rate:>12,.0f} /s")
    print(f"  keyed choose_partition, Murmur3 (producer)    {producer_route_rate:>12,.0f} /s")
    raw_produce, raw_consume = bench_raw_kafka(bootstrap, messages)
    ws_produce, ws_consume = bench_sidecar(bootstrap, messages)
    print(
        f"  100-byte messages, {messages:,} each way, {PARTITIONS} partitions, broker {bootstrap}"
    )
    print(f"  {'':28}{'sidecar/ws':>14}{'raw kafka':>14}{'ratio':>9}")
    print(
        f"  {'produced (acked) msgs/s':28}{ws_produce:>14,.0f}{raw_produce:>14,.0f}"
        f"{ws_produce / raw_produce:>9.3f}"
    )
    print(
        f"  {'consumed msgs/s':28}{ws_consume:>14,.0f}{raw_consume:>14,.0f}"
        f"{ws_consume / raw_consume:>9.3f}"
    )
    return {
        "route_murmur3_per_s": router_rate,
        "producer_route_per_s": producer_route_rate,
        "ws_produce_per_s": ws_produce,
        "kafka_produce_per_s": raw_produce,
        "ws_consume_per_s": ws_consume,
        "kafka_consume_per_s": raw_consume,
        "produce_ratio": ws_produce / raw_produce,
        "consume_ratio": ws_consume / raw_consume,
    }


if __name__ == "__main__":
    run()
