"""Compaction of stored entries (``--entry-format entry``) on the in-memory twin: the
latest message per key *inside* batches, as Pulsar's two-phase compactor keeps it, and the
compacted view's rebuilt batches (``compacted_out``), read by ``readCompacted``
subscriptions. The same paths run on real Kafka with the official client in
``tests/integration/broker_shim/binary/test_binary_entries.py``."""

from __future__ import annotations

import struct

import cramjam

from broker_shim.binary import PulsarApi_pb2 as api
from broker_shim.binary._entries import ack_set_words, decode_entry, entry_metadata
from broker_shim.binary._entry_compaction import EntryCompaction
from sync.messaging import Delivery
from sync.messaging._compaction import CompactedView, Compactor
from sync.messaging.headers import HEADER_COMPACTED_KEPT, HEADER_ENTRY, HEADER_ENTRY_COUNT
from sync.naming._kafka_names import kafka_topic_of
from sync.transport import DeliveryReport
from tests.unit.sync.messaging.test_subscriptions import Env, quiet, run, take

#: A message of a batch: its key (None: keyless), payload (None: a null value).
_Msg = tuple[str | None, bytes | None]


def _entry(messages: list[_Msg], *, batched: bool = True, lz4: bool = False) -> bytes:
    """A stored entry as a client's SEND carries it (``[size][metadata][payload]``)."""
    meta = api.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1)
    if not batched:
        ((key, payload),) = messages
        if key is not None:
            meta.partition_key = key
        if payload is None:
            meta.null_value = True
        data = payload or b""
    else:
        meta.num_messages_in_batch = len(messages)
        if messages[0][0] is not None:
            meta.partition_key = messages[0][0]  # the client's batch key: the first one's
        out = bytearray()
        for key, payload in messages:
            single = api.SingleMessageMetadata(payload_size=len(payload or b""))
            if key is not None:
                single.partition_key = key
            if payload is None:
                single.null_value = True
            raw = single.SerializeToString()
            out += struct.pack(">I", len(raw)) + raw + (payload or b"")
        data = bytes(out)
        if lz4:
            meta.compression = api.LZ4
            meta.uncompressed_size = len(data)
            data = bytes(cramjam.lz4.compress_block(data, store_size=False))
    raw_meta = meta.SerializeToString()
    return struct.pack(">I", len(raw_meta)) + raw_meta + data


def _store(env: Env, kafka_topic: str, entries: list[bytes]) -> list[int]:
    """Write ``entries`` as the sidecar stores them (key: the batch key); their offsets."""
    producer = env.transport.producer()
    offsets: list[int] = []
    for value in entries:
        meta, _ = entry_metadata(value)
        count = meta.num_messages_in_batch if meta.HasField("num_messages_in_batch") else 1
        key = meta.partition_key.encode() if meta.HasField("partition_key") else None
        headers = [(HEADER_ENTRY, b"1"), (HEADER_ENTRY_COUNT, str(count).encode())]

        def done(report: DeliveryReport) -> None:
            assert report.error is None
            offsets.append(report.offset)

        producer.produce(kafka_topic, key, value, partition=0, headers=headers, on_delivery=done)
    producer.flush(10)
    return offsets


def _messages(value: bytes) -> list[tuple[str | None, bytes | None]]:
    """What a client gets of a stored entry (compacted_out messages skipped)."""
    meta, msgs = decode_entry(value)
    return [(m.key, m.payload) for m in msgs]


def test_the_latest_message_per_key_is_kept_inside_batches() -> None:
    async def scenario() -> None:
        async with Env() as env:
            kafka_topic = kafka_topic_of(env.topic("e1"))
            offsets = _store(
                env,
                kafka_topic,
                [
                    _entry([("a", b"a1"), ("b", b"b1"), (None, b"keyless"), ("c", b"c1")]),
                    _entry([("a", b"a2"), ("d", b"d1")], lz4=True),  # compressed
                    _entry([("d", None)]),  # a null value in a batch deletes d
                    _entry([("e", b"e1"), ("e", b"e2")]),
                    _entry([("b", b"b2"), ("e", b"e3")]),  # b and e superseded: batch 3 goes
                    _entry([("f", b"")], batched=False),  # an empty unbatched value: no f
                ],
            )
            codec = EntryCompaction()
            admin = env.transport.admin()
            Compactor(kafka_topic, codec=codec).compact(env.transport, admin, 1)
            view = CompactedView(kafka_topic, codec)
            view.refresh(env.transport, admin)
            records = view.records_from(0, 0)
            assert [r.offset for r in records] == [offsets[0], offsets[1], offsets[4]]
            got = [_messages(r.value) for r in records]
            assert got == [[("c", b"c1")], [("a", b"a2")], [("b", b"b2"), ("e", b"e3")]]
            first = dict(records[0].headers)
            assert first[HEADER_ENTRY_COUNT] == b"4"  # the batch keeps its size and indexes
            assert int(first[HEADER_COMPACTED_KEPT], 16) == 1 << 3  # the kept indexes' bits
            meta, start = entry_metadata(records[0].value)
            assert meta.num_messages_in_batch == 4 and meta.compression == api.NONE
            # Pulsar's rebatchMessage: every other index compacted out, with no payload.
            singles = _singles(records[0].value[start:], 4)
            assert [s.compacted_out for s in singles] == [True, True, True, False]

    run(scenario())


def _singles(data: bytes, count: int) -> list[api.SingleMessageMetadata]:
    out, pos = [], 0
    for _ in range(count):
        (size,) = struct.unpack_from(">I", data, pos)
        single = api.SingleMessageMetadata.FromString(data[pos + 4 : pos + 4 + size])
        pos += 4 + size + single.payload_size
        out.append(single)
    return out


def test_a_later_compaction_moves_a_key_out_of_an_earlier_batch() -> None:
    async def scenario() -> None:
        async with Env() as env:
            kafka_topic = kafka_topic_of(env.topic("e2"))
            codec = EntryCompaction()
            admin = env.transport.admin()
            compactor = Compactor(kafka_topic, codec=codec)
            first = _store(env, kafka_topic, [_entry([("a", b"a1"), ("b", b"b1")])])
            compactor.compact(env.transport, admin, 1)
            _store(env, kafka_topic, [_entry([("a", None)]), _entry([("x", b"x")], batched=False)])
            compactor.compact(env.transport, admin, 1)
            view = CompactedView(kafka_topic, codec)
            view.refresh(env.transport, admin)
            records = view.records_from(0, 0)
            assert [(r.offset, _messages(r.value)) for r in records] == [
                (first[0], [("b", b"b1")]),
                (first[0] + 2, [("x", b"x")]),
            ]
            assert records[1].index == -1  # an unbatched entry is kept whole, as stored

    run(scenario())


def test_an_encrypted_batch_is_compacted_whole_by_its_batch_key() -> None:
    async def scenario() -> None:
        async with Env() as env:
            kafka_topic = kafka_topic_of(env.topic("e3"))
            meta = api.MessageMetadata(
                producer_name="p",
                sequence_id=1,
                publish_time=1,
                num_messages_in_batch=2,
                partition_key="k",
                encryption_algo="RSA",
            )
            meta.encryption_keys.add(key="client-rsa.pem", value=b"secret")
            raw = meta.SerializeToString()
            sealed = struct.pack(">I", len(raw)) + raw + b"ciphertext"
            codec = EntryCompaction()
            assert [(m.index, m.key) for m in codec.messages(sealed)] == [(-1, b"k")]
            offsets = _store(env, kafka_topic, [_entry([("k", b"old")]), sealed])
            admin = env.transport.admin()
            Compactor(kafka_topic, codec=codec).compact(env.transport, admin, 1)
            view = CompactedView(kafka_topic, codec)
            view.refresh(env.transport, admin)
            assert [(r.offset, r.value) for r in view.records_from(0, 0)] == [(offsets[1], sealed)]

    run(scenario())


def test_read_compacted_subscriptions_get_rebuilt_batches_with_their_ack_set() -> None:
    async def scenario() -> None:
        async with Env(entry_codec=EntryCompaction()) as env:
            topic = env.topic("e4")
            kafka_topic = kafka_topic_of(topic)
            offsets = _store(
                env,
                kafka_topic,
                [_entry([("a", b"a1"), ("b", b"b1"), ("c", b"c1")]), _entry([("a", b"a2")])],
            )
            await env.engine.compact(topic)
            _store(env, kafka_topic, [_entry([("a", b"a3")])])
            compacted = await env.subscribe(topic, "rc", read_compacted=True)
            got: list[Delivery] = await take(compacted, 3)
            assert [d.message_id.offset for d in got] == [offsets[0], offsets[1], offsets[1] + 1]
            assert _messages(got[0].entry.payload) == [("b", b"b1"), ("c", b"c1")]
            assert got[0].entry.count == 3
            # Index 0 was compacted out: it counts as acknowledged, so the MESSAGE carries
            # the indexes still to deliver and clients that ignore compacted_out (C++, Go)
            # skip it; acking the two others completes the entry.
            assert got[0].acked_bits == 0b001 and got[0].entry.unacked == 2
            assert ack_set_words(3, got[0].acked_bits) == [0b110]
            assert got[1].acked_bits == 0
            for d in got:
                compacted.ack(d.message_id)
            assert await quiet(compacted) == []

    run(scenario())


def test_formats_share_a_topic_and_keys_across_them() -> None:
    """The format is decided per record: message-format records (Pulsar clients through
    WebSocket, older data) and plain Kafka records are compacted by their Kafka key, entries
    per message inside, and one key's latest wins across formats."""

    async def scenario() -> None:
        async with Env() as env:
            topic = env.topic("e5")
            kafka_topic = kafka_topic_of(topic)
            producer = env.transport.producer()
            producer.produce(kafka_topic, b"m", b"plain-m", partition=0)
            producer.produce(kafka_topic, b"p", b"plain-p", partition=0)
            producer.flush(10)
            offsets = _store(env, kafka_topic, [_entry([("m", b"entry-m"), ("q", b"q1")])])
            env.publish(topic, 1, key="q")  # a message-format record supersedes q1
            codec = EntryCompaction()
            admin = env.transport.admin()
            Compactor(kafka_topic, codec=codec).compact(env.transport, admin, 1)
            view = CompactedView(kafka_topic, codec)
            view.refresh(env.transport, admin)
            records = view.records_from(0, 0)
            assert [r.offset for r in records] == [1, offsets[0], offsets[0] + 1]
            assert records[0].value == b"plain-p"
            assert _messages(records[1].value) == [("m", b"entry-m")]
            assert records[2].key == b"q" and records[2].index == -1

    run(scenario())


def test_an_unreadable_entry_is_left_out_and_the_compaction_goes_on() -> None:
    async def scenario() -> None:
        async with Env() as env:
            kafka_topic = kafka_topic_of(env.topic("e6"))
            producer = env.transport.producer()
            headers = [(HEADER_ENTRY, b"1"), (HEADER_ENTRY_COUNT, b"2")]
            producer.produce(
                kafka_topic, b"k", b"\x00\x00\x00\x09garbage", partition=0, headers=headers
            )
            producer.flush(10)
            offsets = _store(env, kafka_topic, [_entry([("k", b"k1"), ("j", b"j1")])])
            codec = EntryCompaction()
            admin = env.transport.admin()
            moved = Compactor(kafka_topic, codec=codec).compact(env.transport, admin, 1)
            assert moved == {0: offsets[0] + 1}
            view = CompactedView(kafka_topic, codec)
            view.refresh(env.transport, admin)
            assert [_messages(r.value) for r in view.records_from(0, 0)] == [
                [("k", b"k1"), ("j", b"j1")]
            ]

    run(scenario())
