"""Demo section: the official Pulsar client (``pulsar-client``) over ``pulsar://``.

It connects to one sidecar, looks the topic's partitions up (owned by whichever sidecars
own their bundles: the client follows the lookups), produces a batch-compressed stream
and consumes it with a Shared subscription, as seed 002 traces with ``bin/pulsar-client
consume my-topic -t Shared -s demo-sub2``; then prints the commands the sidecars served,
from their ``/metrics`` (``pulsar_binary_commands_total``).
"""

from __future__ import annotations

import re
import urllib.error
import urllib.request
import uuid
from collections import Counter

__all__ = ["binary_demo"]

#: The order of a produce-then-consume session (seed 002's trace, plus the producer).
_ORDER = (
    "CONNECT",
    "PARTITIONED_METADATA",
    "LOOKUP",
    "PRODUCER",
    "SEND",
    "CLOSE_PRODUCER",
    "SUBSCRIBE",
    "FLOW",
    "ACK",
    "CLOSE_CONSUMER",
)
_LINE = re.compile(  # prometheus_client writes the labels sorted by name
    r'^pulsar_binary_commands_total\{command="(?P<cmd>[A-Z_]+)",direction="in"\} (?P<n>[0-9.e+]+)$'
)


def _served(http_urls: list[str]) -> Counter[str]:
    total: Counter[str] = Counter()
    for url in http_urls:
        with urllib.request.urlopen(url + "/metrics", timeout=5) as resp:  # noqa: S310
            for line in resp.read().decode().splitlines():
                m = _LINE.match(line)
                if m:
                    total[m["cmd"]] += int(float(m["n"]))
    return total


def _put(url: str, body: str) -> int:
    req = urllib.request.Request(url, data=body.encode(), method="PUT")  # noqa: S310
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:  # noqa: S310
            return int(resp.status)
    except urllib.error.HTTPError as err:  # 409: it exists already (a reused Kafka)
        return err.code


def binary_demo(broker_url: str, http_urls: list[str]) -> None:
    """Produce and consume through the sidecars with the real client; print the trace."""
    import pulsar  # the demo extra: the official client wheel

    name = f"binary-demo-{uuid.uuid4().hex[:6]}"
    topic = f"persistent://acme/ops/{name}"
    status = _put(f"{http_urls[0]}/admin/v2/persistent/acme/ops/{name}/partitions", "3")
    print(f"PUT /admin/v2/persistent/acme/ops/{name}/partitions 3 -> {status}")
    before = _served(http_urls)
    # The C++ client logs every connection at INFO; the demo shows its own lines instead.
    client = pulsar.Client(
        broker_url,
        operation_timeout_seconds=30,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn),
    )
    try:
        print(f"pulsar.Client({broker_url!r}); partitions: {client.get_topic_partitions(topic)}")
        producer = client.create_producer(
            topic,
            batching_enabled=True,
            compression_type=pulsar.CompressionType.LZ4,
            message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
        )
        for i in range(30):
            producer.send_async(
                f"order {i}".encode(), None, partition_key=f"customer-{i % 5}",
                properties={"n": str(i)},
            )  # fmt: skip
        producer.flush()
        producer.close()
        print("produced 30 messages (batched, LZ4) -> one Kafka record each")
        consumer = client.subscribe(
            topic,
            "demo-sub2",
            consumer_type=pulsar.ConsumerType.Shared,
            initial_position=pulsar.InitialPosition.Earliest,
        )
        got = []
        for _ in range(30):
            msg = consumer.receive(timeout_millis=30_000)
            got.append(int(msg.properties()["n"]))
            consumer.acknowledge(msg)
        consumer.close()
        print(f"consumed and acknowledged {len(got)} messages (Shared, demo-sub2)")
    finally:
        client.close()
    served = _served(http_urls) - before
    names = [c for c in _ORDER if served[c]] + sorted(c for c in served if c not in _ORDER)
    print("commands the sidecars served: " + " → ".join(f"{c}×{served[c]}" for c in names))
