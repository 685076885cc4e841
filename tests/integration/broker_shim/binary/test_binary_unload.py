"""Unloading a bundle closes the binary clients of its topics (CLOSE_PRODUCER /
CLOSE_CONSUMER); the real ``pulsar-client`` looks up again, reconnects to the (new) owner
and carries on, losing nothing acknowledged and getting nothing acknowledged again."""

from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import Iterator

import pulsar
import pytest

from sync import TopicName
from sync.naming._kafka_names import kafka_topic_of
from sync.transport import KafkaConfig, KafkaTransport
from tests.integration.broker_shim.binary.test_binary_cluster import BinaryShim
from tests.integration.broker_shim.binary.test_binary_fidelity import (
    _LARGE,
    _SENT,
    _check,
    _receive,
    _send_all,
)
from tests.integration.broker_shim.test_lookup_http import wait_agreement
from tests.support.kafka import make_topic, wait_acks_durable
from tests.support.waits import wait_for

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def shims(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[BinaryShim]]:
    """Two sidecars for both subscription types (each test unloads a topic of its own)."""
    name = "unl" + uuid.uuid4().hex[:8]
    tmp_path = tmp_path_factory.mktemp("unload")
    shims = [
        # No kill here: a session timeout that survives a loaded host (argparse keeps the
        # last value, overriding BinaryShim's 4 s).
        BinaryShim(
            kafka_bootstrap,
            name,
            f"b{i}",
            tmp_path,
            extra=("--log-level", "info", "--session-timeout-ms", "6000"),
        )
        for i in range(2)
    ]
    try:
        for s in shims:
            s.start()
        for s in shims:
            s.wait_ready()
        yield shims
    finally:
        for s in shims:
            s.stop()


def _sent_commands(shim: BinaryShim, command: str) -> float:
    """How many ``command``s the sidecar sent (its ``/metrics``)."""
    text = shim.get("/metrics").body
    pattern = rf'pulsar_binary_commands_total\{{command="{command}",direction="out"\}} (\S+)'
    found = re.search(pattern, text)
    return float(found.group(1)) if found else 0.0


def _unload(shim: BinaryShim, topic: TopicName) -> None:
    path = f"persistent/{topic.tenant}/{topic.namespace}/{topic.local_name}"
    bundle = shim.get(f"/lookup/v2/topic/{path}/bundle")
    assert bundle.status == 200, bundle.body
    result = shim.put(f"/admin/v2/namespaces/{topic.tenant}/{topic.namespace}/{bundle.body}/unload")
    assert result.status == 204, result.body


@pytest.mark.parametrize(
    "sub_type",
    [pulsar.ConsumerType.Shared, pulsar.ConsumerType.Failover],
    ids=["Shared", "Failover"],
)
def test_unload_closes_binary_clients_and_they_resume_at_the_new_owner(
    kafka_bootstrap: str, shims: list[BinaryShim], sub_type: pulsar.ConsumerType
) -> None:
    topic = make_topic(kafka_bootstrap, 1)
    _, owners = wait_agreement(shims, [str(topic)], timeout=90)  # type: ignore[arg-type]
    owner = next(s for s in shims if s.broker_url == owners[0])
    other = next(s for s in shims if s is not owner)
    client = pulsar.Client(other.broker_url, operation_timeout_seconds=30)
    try:
        producer = client.create_producer(str(topic), batching_enabled=False)
        consumer = client.subscribe(
            str(topic),
            "unload",
            consumer_type=sub_type,
            initial_position=pulsar.InitialPosition.Earliest,
        )
        for i in range(20):
            producer.send(b"%d" % i)
        acked: set[bytes] = set()
        positions: list[tuple[int, int]] = []
        for _ in range(20):
            msg = consumer.receive(timeout_millis=30_000)
            if int(msg.data()) % 5 != 4:  # a few stay unacknowledged
                consumer.acknowledge(msg)
                acked.add(msg.data())
                positions.append(
                    (max(0, msg.message_id().partition()), msg.message_id().entry_id())
                )
        # The acks are durable before the unload (a second sufficed on a quiet machine, not
        # beside two CPU hogs: acknowledged messages then came again after the move).
        wait_acks_durable(kafka_bootstrap, topic, "unload", positions)
        closed_producers = _sent_commands(owner, "CLOSE_PRODUCER")
        closed_consumers = _sent_commands(owner, "CLOSE_CONSUMER")
        _unload(other, topic)
        for i in range(20, 40):  # the producer reconnects (after looking up again)
            producer.send(b"%d" % i)
        expected = {b"%d" % i for i in range(40)} - acked
        got: list[bytes] = []
        deadline = time.monotonic() + 90
        while set(got) != expected and time.monotonic() < deadline:
            try:
                msg = consumer.receive(timeout_millis=1000)
            except pulsar.Timeout:
                continue
            got.append(msg.data())
            consumer.acknowledge(msg)
        assert set(got) == expected  # nothing acknowledged lost…
        assert not set(got) & acked  # …or delivered again
        assert len(got) == len(set(got))
        # The old owner told the client to go (it did not just drop the connection).
        assert _sent_commands(owner, "CLOSE_PRODUCER") == closed_producers + 1
        assert _sent_commands(owner, "CLOSE_CONSUMER") == closed_consumers + 1
        # and the stream is whole in Kafka: 40 records, one per send
        assert [m.entry_id() for m in [producer.send(b"last")]] == [40]
    finally:
        client.close()


def test_every_field_survives_a_bundle_move(
    kafka_bootstrap: str, shims: list[BinaryShim], keys: pulsar.CryptoKeyReader
) -> None:
    """What one sidecar stored comes back whole from the sidecar its bundle moves to (the
    owner stops; it is started again after): every field of batched and unbatched
    messages, a chunked message, an encrypted one, and a batch partly acknowledged by
    index, whose other messages alone come again, marked. Last in the module: it stops a
    sidecar of the shared pair."""
    from sync.messaging import subscription_group
    from sync.messaging._cursor import decode_ack_state

    topic = make_topic(kafka_bootstrap, 1)
    _, owners = wait_agreement(shims, [str(topic)], timeout=90)  # type: ignore[arg-type]
    owner = next(s for s in shims if s.broker_url == owners[0])
    other = next(s for s in shims if s is not owner)
    client = pulsar.Client(other.broker_url, operation_timeout_seconds=30)
    try:
        consumer = client.subscribe(
            str(topic),
            "move",
            initial_position=pulsar.InitialPosition.Earliest,
            batch_index_ack_enabled=True,
            crypto_key_reader=keys,
        )
        batched = client.create_producer(str(topic), batching_enabled=True)
        before = _send_all(batched, batched=True)  # entry 0: one batch of 4
        unbatched = client.create_producer(str(topic), batching_enabled=False)
        _send_all(unbatched, batched=False)
        large = os.urandom(_LARGE)
        client.create_producer(str(topic), batching_enabled=False, chunking_enabled=True).send(
            large
        )
        client.create_producer(str(topic), encryption_key="app-key", crypto_key_reader=keys).send(
            b"sealed", ordering_key="o"
        )
        first = [consumer.receive(timeout_millis=30_000) for _ in range(len(_SENT))]
        consumer.acknowledge(first[0])
        consumer.acknowledge(first[2])
        consumer.close()  # flushes the grouped acknowledgements
    finally:
        client.close()
    kafka_topic = kafka_topic_of(topic)
    admin = KafkaTransport(KafkaConfig(kafka_bootstrap)).admin()
    state: list[object] = []

    def committed() -> bool:  # the acknowledged indexes are in Kafka before the move
        offset, meta = admin.group_positions(subscription_group(kafka_topic, "move"), kafka_topic)[
            0
        ]
        state[:] = [decode_ack_state(offset, meta) if meta else (offset, meta)]
        return state[0] == ([], [(0, 4, 0b0101)])

    wait_for(committed, lambda: f"indexes 0 and 2 of entry 0 committed: {state}", interval_s=0.2)
    owner.stop()  # its bundles move to the other sidecar
    try:
        client = pulsar.Client(other.broker_url, operation_timeout_seconds=30)
        try:
            reader = client.create_reader(
                str(topic), pulsar.MessageId.earliest, crypto_key_reader=keys
            )
            read = _receive(reader, 2 * len(_SENT) + 2)
            _check(read[: len(_SENT)], batched.producer_name(), before)
            _check(read[len(_SENT) : 2 * len(_SENT)], unbatched.producer_name(), before)
            assert read[-2].data() == large
            assert (read[-1].data(), read[-1].ordering_key()) == (b"sealed", "o")
            again = client.subscribe(
                str(topic), "move", batch_index_ack_enabled=True, crypto_key_reader=keys
            )
            rest = [again.receive(timeout_millis=30_000) for _ in range(2)]
            assert [m.data() for m in rest] == [b"", b"plain"]  # indexes 1 and 3
            assert all(m.redelivery_count() >= 1 for m in rest)
            assert [m.partition_key() for m in rest] == ["empty", ""]
            after = [again.receive(timeout_millis=30_000) for _ in range(len(_SENT) + 2)]
            assert [m.data() for m in after][-2:] == [large, b"sealed"]
        finally:
            client.close()
    finally:
        owner.start()
        owner.wait_ready(timeout=120)
