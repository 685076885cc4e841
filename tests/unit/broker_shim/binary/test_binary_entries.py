"""The stored-entry format (docs/entry-design.md): a SEND checked whole and stored as sent,
dispatched verbatim, unpacked for WebSocket consumers; what is refused or quarantined."""

from __future__ import annotations

import struct

import cramjam
import pytest

from broker_shim.binary import PulsarApi_pb2 as api
from broker_shim.binary._entries import (
    EntryError,
    ack_set_words,
    check_entry,
    decode_entry,
    entry_frame,
    entry_metadata,
)
from broker_shim.binary._framing import FrameError, encode_payload_command, parse_frame
from broker_shim.ws._entries import EntryAcks
from sync.messaging import Delivery, MessageId
from sync.messaging._cursor import Entry
from tests.unit.broker_shim.binary.test_binary_framing import _batch, _meta, _send_cmd


def _entry_of(meta: api.MessageMetadata, payload: bytes) -> bytes:
    """The entry a client's SEND carries, taken from the frame as the sidecar does."""
    frame = parse_frame(encode_payload_command(_send_cmd(), meta, payload)[4:])
    assert frame.metadata is not None
    return frame.entry


def _delivery(
    value: bytes,
    *,
    count: int = 1,
    offset: int = 5,
    redelivered: int = 0,
    version: bytes = b"1",
    acked_bits: int = 0,
) -> Delivery:
    headers = [("__pulsar.entry", version), ("__pulsar.count", b"%d" % count)]
    entry = Entry(0, offset, None, value, headers, 1_700_000_000_000)
    entry.stored_entry = True
    entry.count = count
    entry.acked_bits = acked_bits
    return Delivery(MessageId(-1, offset), entry, redelivered, acked_bits)


_MESSAGES = [(b"a", "k1", {"p": "1"}), (b"", None, {}), (b"ccc", "k3", {})]


def test_a_batch_is_counted_and_its_highest_sequence_id_found() -> None:
    meta = _meta(num_messages_in_batch=3, sequence_id=40)
    assert check_entry(meta, _batch(_MESSAGES), is_chunk=False) == (3, 42)
    single = _meta(sequence_id=9)
    assert check_entry(single, b"payload", is_chunk=False) == (1, 9)


def test_a_compressed_batch_is_checked_decompressed() -> None:
    data = _batch(_MESSAGES)
    meta = _meta(num_messages_in_batch=3, compression=api.LZ4, uncompressed_size=len(data))
    packed = bytes(cramjam.lz4.compress_block(data, store_size=False))
    assert check_entry(meta, packed, is_chunk=False)[0] == 3
    bad = _meta(num_messages_in_batch=3, compression=api.LZ4, uncompressed_size=len(data) + 1)
    with pytest.raises(FrameError):
        check_entry(bad, packed, is_chunk=False)


@pytest.mark.parametrize(
    ("count", "payload"),
    [
        (4, _batch(_MESSAGES)),  # fewer messages than announced
        (2, _batch(_MESSAGES)),  # bytes left after the announced messages
        (3, _batch(_MESSAGES)[:-1]),  # the last payload cut short
        (3, struct.pack(">I", 99) + b"x"),  # a metadata size past the end
        (0, b""),  # no message at all
    ],
    ids=["short", "trailing", "cut", "oversized-metadata", "empty"],
)
def test_a_batch_that_does_not_add_up_is_refused(count: int, payload: bytes) -> None:
    with pytest.raises(FrameError):
        check_entry(_meta(num_messages_in_batch=count), payload, is_chunk=False)


def test_chunk_metadata_is_checked() -> None:
    chunk = _meta(uuid="u-1", chunk_id=0, num_chunks_from_msg=2, total_chunk_msg_size=10)
    assert check_entry(chunk, b"01234", is_chunk=True) == (1, 7)
    broken = _meta(uuid="u-1", chunk_id=2, num_chunks_from_msg=2, total_chunk_msg_size=10)
    with pytest.raises(FrameError):
        check_entry(broken, b"01234", is_chunk=True)


def test_an_entry_goes_out_verbatim_with_its_checksum() -> None:
    meta = _meta(num_messages_in_batch=3, ordering_key=b"o", null_value=False)
    value = _entry_of(meta, _batch(_MESSAGES))
    frame = parse_frame(entry_frame(7, _delivery(value, count=3, redelivered=2))[4:])
    msg = frame.command.message
    assert (msg.consumer_id, msg.message_id.entryId, msg.redelivery_count) == (7, 5, 2)
    assert frame.metadata == meta  # exactly as sent: nothing mapped or dropped
    assert frame.payload == _batch(_MESSAGES)
    assert frame.entry == value


def test_a_redelivered_entry_carries_the_indexes_still_to_deliver() -> None:
    """Pulsar's ``CommandMessage.ack_set``: bit ``i`` set for each index not acknowledged
    (the client skips the others), signed int64 words."""
    value = _entry_of(_meta(num_messages_in_batch=3), _batch(_MESSAGES))
    whole = parse_frame(entry_frame(7, _delivery(value, count=3))[4:])
    assert list(whole.command.message.ack_set) == []
    partial = parse_frame(entry_frame(7, _delivery(value, count=3, acked_bits=0b101))[4:])
    assert list(partial.command.message.ack_set) == [0b010]
    assert partial.entry == value  # still the entry verbatim
    assert ack_set_words(3, 0b101) == [0b010]
    assert ack_set_words(64, 0) == [-1]  # a BitSet's word with bit 63 set is negative
    assert ack_set_words(130, (1 << 64) - 1) == [0, -1, 0b11]


def test_an_ack_s_ack_set_is_read_as_the_indexes_left_unacknowledged() -> None:
    from broker_shim.binary._consumers import _ack_set

    def ids(words: list[int]) -> api.MessageIdData:
        return api.MessageIdData(ledgerId=0, entryId=1, ack_set=words)

    assert _ack_set(ids([])) is None  # the whole entry
    assert _ack_set(ids([0])) is None  # nothing left unacknowledged: the whole entry
    assert _ack_set(ids([0b110])) == 0b110  # index 0 acknowledged
    assert _ack_set(ids([-1, 0b11])) == (1 << 66) - 1
    acked = (1 << 70) | 0b1011
    assert _ack_set(ids(ack_set_words(130, acked))) == ((1 << 130) - 1) & ~acked


def test_unreadable_entries_are_refused_at_dispatch() -> None:
    with pytest.raises(EntryError):
        entry_frame(1, _delivery(b"\x00\x00\x00\xffgarbage"))
    with pytest.raises(EntryError):
        entry_frame(1, _delivery(b"\x00"))
    unknown = _delivery(_entry_of(_meta(), b"x"), version=b"9")  # a future format version
    with pytest.raises(EntryError):
        entry_frame(1, unknown)
    with pytest.raises(EntryError):
        entry_metadata(struct.pack(">I", 3) + b"\xff\xff\xff")


def test_decoding_gives_each_message() -> None:
    meta = _meta(num_messages_in_batch=3)
    got_meta, messages = decode_entry(_entry_of(meta, _batch(_MESSAGES)))
    assert got_meta.num_messages_in_batch == 3
    assert [(m.payload, m.key, dict(m.properties or {})) for m in messages] == [
        (b"a", "k1", {"p": "1"}),
        (b"", None, {}),
        (b"ccc", "k3", {}),
    ]


def test_websocket_acks_are_batch_index_acks_of_the_entry() -> None:
    import json

    acks = EntryAcks()
    value = _entry_of(_meta(num_messages_in_batch=3), _batch(_MESSAGES))
    frames = [json.loads(f) for f in acks.frames(_delivery(value, count=3))]
    ids = [f["messageId"] for f in frames]
    assert len(set(ids)) == 3
    assert [f["key"] for f in frames if "key" in f] == ["k1", "k3"]
    # Each id is the entry's id with a batch index: it still names the entry.
    assert MessageId.from_base64(ids[1]) == MessageId(-1, 5)
    # Each ack is the entry's ack set without that index (the engine keeps the rest).
    assert acks.ack(ids[0]) == (MessageId(-1, 5), 0b110)
    assert acks.ack(ids[2]) == (MessageId(-1, 5), 0b011)
    assert acks.ack(ids[0]) is None  # twice: nothing more
    assert acks.ack(ids[1]) == (MessageId(-1, 5), 0b101)
    # A redelivery leaves out what was acknowledged by index before it.
    again = [json.loads(f) for f in acks.frames(_delivery(value, count=3, acked_bits=0b101))]
    assert [f["payload"] for f in again] == [frames[1]["payload"]]
    assert acks.nack(again[0]["messageId"]) == MessageId(-1, 5)
    assert acks.ack(again[0]["messageId"]) is None


def test_websocket_acks_of_a_compacted_batch_name_their_real_batch_indexes() -> None:
    """A batch rebuilt by the compacted view keeps indexes 1 and 3 of 4: its WebSocket
    frames carry those indexes, and acknowledging index 3 leaves index 1 unacknowledged
    (the entry is not acknowledged whole)."""
    import json

    from broker_shim.binary._entry_compaction import EntryCompaction

    codec = EntryCompaction()
    value = _entry_of(_meta(num_messages_in_batch=4), _batch(_MESSAGES + [(b"d", "k4", {})]))
    rebuilt = codec.rebatch({1: codec.single(value, 1), 3: codec.single(value, 3)}, 4)
    delivery = _delivery(rebuilt, count=4, acked_bits=0b0101)
    delivery.entry.headers = [*(delivery.entry.headers or []), ("__pulsar.compacted.kept", b"a")]
    acks = EntryAcks()
    frames = [json.loads(f) for f in acks.frames(delivery)]
    assert [f.get("key") for f in frames] == [None, "k4"]  # index 1 has no key, 3 is k4
    assert len(frames) == 2
    mid, unacked = acks.ack(frames[1]["messageId"]) or (None, 0)
    assert (mid, unacked) == (MessageId(-1, 5), 0b0111)  # only index 3 acknowledged
    assert (0b0101 | (0b1111 & ~unacked)) != 0b1111  # index 1 is still to come


def test_the_decoder_reads_all_three_kinds_of_record() -> None:
    from broker_shim.binary import decode_record
    from sync.messaging.headers import (
        HEADER_ENTRY,
        HEADER_EVENT_TIME,
        HEADER_NULL_VALUE,
        HEADER_ORDERING_KEY,
        HEADER_PRODUCER,
        HEADER_SEQUENCE,
    )

    # A plain Kafka producer's record: its headers are properties.
    [plain] = decode_record(b"v", [("h", b"1")], b"k", 1_000)
    assert (plain.payload, plain.key, plain.properties, plain.publish_time_ms) == (
        b"v",
        "k",
        {"h": "1"},
        1_000,
    )
    assert plain.producer_name is None
    # A message record of a Pulsar client (--entry-format message).
    headers = [
        ("p", b"q"),
        (HEADER_EVENT_TIME, b"77"),
        (HEADER_PRODUCER, b"alice"),
        (HEADER_SEQUENCE, b"12"),
        (HEADER_NULL_VALUE, b"1"),
        (HEADER_ORDERING_KEY, b"o"),
    ]
    [msg] = decode_record(b"", headers, None, 2_000)
    assert msg.payload is None
    assert (msg.properties, msg.event_time_ms, msg.producer_name, msg.sequence_id) == (
        {"p": "q"},
        77,
        "alice",
        12,
    )
    assert msg.ordering_key == b"o"
    # A stored entry: each message, with its place in the batch.
    value = _entry_of(_meta(num_messages_in_batch=3, publish_time=5), _batch(_MESSAGES))
    got = decode_record(value, [(HEADER_ENTRY, b"1")], None, 9)
    assert [(m.payload, m.key, m.batch_index, m.batch_size) for m in got] == [
        (b"a", "k1", 0, 3),
        (b"", None, 1, 3),
        (b"ccc", "k3", 2, 3),
    ]
    assert {m.publish_time_ms for m in got} == {5}  # the client's, as sent
    assert [m.sequence_id for m in got] == [7, 8, 9]
    with pytest.raises(EntryError):
        decode_record(value, [(HEADER_ENTRY, b"2")])
