"""The Pulsar binary protocol: one ``pulsar-client`` program against a sidecar, against raw
confluent-kafka on the same broker, and against Apache Pulsar standalone.

Figures (printed, and returned by :func:`run`; nothing is asserted):

* ``*_produce_per_s`` – producer throughput: 100-byte messages sent asynchronously with
  batching on (the client's defaults: 1,000 messages or 10 ms per batch, up to 1,000
  pending), counted once every send was acknowledged;
* ``null_produce_per_s`` – the same program against :mod:`bench._null_pulsar`, a broker
  that stores nothing and answers every SEND at once: the client program's own ceiling
  on this machine, which neither the sidecar nor Pulsar can exceed;
* ``*_e2e_p50_ms`` / ``*_e2e_p99_ms`` – end-to-end latency at a fixed rate
  (:data:`RATE` messages/s for :data:`LATENCY_S` seconds): the send time is written into
  the payload, the consumer (a Shared subscription, acking every message) takes the
  difference on receipt.

The sidecar and Pulsar each run as their own process; the Pulsar client program is the
same function for both (:func:`_client_throughput`, :func:`_client_latency`). The raw Kafka
baseline is confluent-kafka with the same payloads, ``acks=all``, idempotence on and
``linger.ms=10`` (the Pulsar client's batching delay), consumed by a plain consumer.

Apache Pulsar standalone is started by ``docker/pulsar/pulsarctl.py`` (Maven Central jars,
no Docker) unless ``$PULSAR_BROKER_URL`` names a running one; ``BENCH_NO_PULSAR=1`` skips
it. Run alone: ``python -m bench.binary``.
"""

from __future__ import annotations

import contextlib
import os
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from confluent_kafka import Consumer as RawConsumer
from confluent_kafka import Producer as RawProducer
from confluent_kafka import TopicPartition

from sync import TopicName, kafka_topic_of
from sync.transport import KafkaConfig, KafkaTransport, TopicSpec

from ._servers import free_port, pulsar_standalone, sidecar

__all__ = ["run"]

ROOT = Path(__file__).resolve().parent.parent
SIZE = 100
MESSAGES = 100_000
RATE = 1_000
LATENCY_S = 10.0
WARM_UP = 2_000
_STAMP = struct.Struct(">d")


def _payload(sent_at: float = 0.0) -> bytes:
    return _STAMP.pack(sent_at).ljust(SIZE, b"x")


def _percentiles(samples: list[float]) -> tuple[float, float]:
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return cuts[49] * 1000, cuts[98] * 1000


# --------------------------------------------------------------------------- the client


def _client_throughput(service_url: str, topic: str, count: int) -> float:
    """Send ``count`` messages with batching on; messages/s until the last ack."""
    import pulsar

    client = pulsar.Client(service_url, operation_timeout_seconds=60)
    try:
        producer = client.create_producer(
            topic, batching_enabled=True, block_if_queue_full=True, send_timeout_millis=60_000
        )
        for _ in range(WARM_UP):  # the first sends open connections and Kafka producers
            producer.send_async(_payload(), None)
        producer.flush()
        done = threading.Event()
        acked = failed = 0

        def on_sent(result: object, _mid: object) -> None:
            nonlocal acked, failed
            if result == pulsar.Result.Ok:
                acked += 1
            else:
                failed += 1
            if acked + failed == count:
                done.set()

        payload = _payload()
        start = time.perf_counter()
        for _ in range(count):
            producer.send_async(payload, on_sent)
        producer.flush()
        done.wait(120)
        elapsed = time.perf_counter() - start
        if failed:
            print(f"  ({failed} sends failed)")
        return acked / elapsed
    finally:
        client.close()


def _client_latency(service_url: str, topic: str) -> tuple[float, float]:
    """End-to-end latency at :data:`RATE` messages/s: p50 and p99 in milliseconds."""
    import pulsar

    client = pulsar.Client(service_url, operation_timeout_seconds=60)
    try:
        consumer = client.subscribe(
            topic,
            f"lat-{uuid.uuid4().hex[:6]}",
            consumer_type=pulsar.ConsumerType.Shared,
            initial_position=pulsar.InitialPosition.Latest,
        )
        producer = client.create_producer(topic, batching_enabled=True)
        samples: list[float] = []
        total = int(RATE * LATENCY_S)
        stop = threading.Event()

        def receive() -> None:
            while len(samples) < total and not stop.is_set():
                try:
                    msg = consumer.receive(timeout_millis=1000)
                except pulsar.Timeout:
                    continue
                except pulsar.PulsarException:  # closed after the deadline
                    return
                samples.append(time.time() - _STAMP.unpack_from(msg.data())[0])
                consumer.acknowledge(msg)

        reader = threading.Thread(target=receive, daemon=True)
        reader.start()
        start = time.perf_counter()
        for i in range(total):
            due = start + i / RATE
            pause = due - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
            producer.send_async(_payload(time.time()), None)
        producer.flush()
        reader.join(60)
        stop.set()
        reader.join(5)
        if len(samples) < total:
            print(f"  (latency: {total - len(samples)} messages not received)")
        return _percentiles(samples[len(samples) // 10 :])  # the first tenth warms up
    finally:
        client.close()


# --------------------------------------------------------------------------- raw Kafka


def _raw_config(bootstrap: str) -> dict[str, object]:
    return {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
            "linger.ms": 10}  # fmt: skip


def _raw_throughput(bootstrap: str, topic: str, count: int) -> float:
    producer = RawProducer(_raw_config(bootstrap))
    acked = 0

    def on_delivery(err: object, _msg: object) -> None:
        nonlocal acked
        if err is None:
            acked += 1

    for _ in range(WARM_UP):
        producer.produce(topic, _payload(), partition=0)
    producer.flush(60)
    payload = _payload()
    start = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, payload, partition=0, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.005)
        producer.poll(0)
    producer.flush(120)
    return acked / (time.perf_counter() - start)


def _raw_latency(bootstrap: str, topic: str) -> tuple[float, float]:
    consumer = RawConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"lat-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": True,
            "fetch.wait.max.ms": 10,
        }  # fmt: skip
    )
    transport = KafkaTransport(KafkaConfig(bootstrap))
    end = transport.consumer().end_offsets(topic, [0])[0]
    consumer.assign([TopicPartition(topic, 0, end)])
    producer = RawProducer(_raw_config(bootstrap))
    samples: list[float] = []
    total = int(RATE * LATENCY_S)

    def receive() -> None:
        deadline = time.monotonic() + LATENCY_S + 60
        while len(samples) < total and time.monotonic() < deadline:
            for msg in consumer.consume(500, 0.1):
                if msg.error() is None:
                    samples.append(time.time() - _STAMP.unpack_from(msg.value() or b"")[0])

    reader = threading.Thread(target=receive, daemon=True)
    reader.start()
    start = time.perf_counter()
    for i in range(total):
        pause = start + i / RATE - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        producer.produce(topic, _payload(time.time()), partition=0)
        producer.poll(0)
    producer.flush(60)
    reader.join(90)
    consumer.close()
    return _percentiles(samples[len(samples) // 10 :])


# --------------------------------------------------------------------------- processes


@contextlib.contextmanager
def _null_pulsar() -> Iterator[str]:
    """:mod:`bench._null_pulsar` in its own process; yields its ``pulsar://`` URL."""
    port = free_port()
    proc = subprocess.Popen(  # noqa: S603 - the project's own module
        [sys.executable, "-m", "bench._null_pulsar", str(port)], cwd=ROOT, env=dict(os.environ)
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("the null Pulsar broker did not start") from None
                time.sleep(0.05)
        yield f"pulsar://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait(10)


# --------------------------------------------------------------------------- entry


def _topic(bootstrap: str | None) -> str:
    """A fresh one-partition topic (created in Kafka for the sidecar)."""
    name = TopicName.parse(f"persistent://public/default/bench-bin-{uuid.uuid4().hex[:8]}")
    if bootstrap is not None:
        KafkaTransport(KafkaConfig(bootstrap)).admin().ensure_topic(
            TopicSpec(kafka_topic_of(name), 1)
        )
    return str(name)


def run(bootstrap: str | None = None, *, messages: int = MESSAGES) -> dict[str, float]:
    """Run the three targets, print the figures and ratios, return them."""
    bootstrap = bootstrap or os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if bootstrap is None:
        sys.path.insert(0, str(ROOT))
        from tests.support.kafka import kafka_for_tests

        with kafka_for_tests() as started:
            return run(started, messages=messages)
    out: dict[str, float] = {"messages": messages, "rate_per_s": RATE, "size": SIZE}
    raw_topic = f"bench-bin-raw-{uuid.uuid4().hex[:8]}"
    KafkaTransport(KafkaConfig(bootstrap)).admin().ensure_topic(TopicSpec(raw_topic, 1))
    out["kafka_produce_per_s"] = _raw_throughput(bootstrap, raw_topic, messages)
    out["kafka_e2e_p50_ms"], out["kafka_e2e_p99_ms"] = _raw_latency(bootstrap, raw_topic)
    with _null_pulsar() as url:
        out["null_produce_per_s"] = _client_throughput(
            url, "persistent://public/default/bench-null", messages
        )
    with sidecar(bootstrap) as broker:
        url = broker.service_url
        out["sidecar_produce_per_s"] = _client_throughput(url, _topic(bootstrap), messages)
        lat = _client_latency(url, _topic(bootstrap))
        out["sidecar_e2e_p50_ms"], out["sidecar_e2e_p99_ms"] = lat
    with pulsar_standalone() as pulsar:
        if pulsar is not None:
            url = pulsar.service_url
            topic = f"persistent://public/default/bench-bin-{uuid.uuid4().hex[:8]}"
            out["pulsar_produce_per_s"] = _client_throughput(url, topic, messages)
            lat = _client_latency(url, topic + "-lat")
            out["pulsar_e2e_p50_ms"], out["pulsar_e2e_p99_ms"] = lat
    print("binary protocol (pulsar-client, batching on, 100-byte messages)")
    for key in sorted(out):
        print(f"  {key:<26} {out[key]:>12,.1f}")
    ratios = (
        ("sidecar / raw Kafka throughput", "sidecar_produce_per_s", "kafka_produce_per_s"),
        ("sidecar / client ceiling", "sidecar_produce_per_s", "null_produce_per_s"),
        ("Pulsar / client ceiling", "pulsar_produce_per_s", "null_produce_per_s"),
        ("sidecar / Pulsar throughput", "sidecar_produce_per_s", "pulsar_produce_per_s"),
    )
    for label, top, bottom in ratios:
        if out.get(top) and out.get(bottom):
            print(f"  {label:<32} {out[top] / out[bottom]:.2f}x")
    return out


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=2))
