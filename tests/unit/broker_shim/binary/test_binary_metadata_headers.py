"""The mapping of Pulsar message metadata to reserved Kafka headers, both ways: what a SEND
is stored as (``unpack_messages``) and what a record is dispatched as (``message_frame``)."""

from __future__ import annotations

import struct

import pytest

from broker_shim.binary import PulsarApi_pb2 as api
from broker_shim.binary import parse_frame
from broker_shim.binary._commands import message_frame
from broker_shim.binary._framing import FrameError, SingleMessage, unpack_messages
from sync.messaging import Delivery, MessageId
from sync.messaging._cursor import Entry
from sync.messaging.headers import (
    HEADER_BATCH_SIZE,
    HEADER_CHUNK_SEQUENCE,
    HEADER_ENCRYPTION_KEY,
    HEADER_NULL_VALUE,
    HEADER_ORDERING_KEY,
    HEADER_PRODUCER,
    HEADER_SEQUENCE,
)

_PUBLISHED = 1_700_000_000_555


def _meta(**fields: object) -> api.MessageMetadata:
    meta = api.MessageMetadata(producer_name="prod-1", sequence_id=7, publish_time=_PUBLISHED)
    for k, v in fields.items():
        setattr(meta, k, v)
    return meta


def _single(payload: bytes, **fields: object) -> bytes:
    single = api.SingleMessageMetadata(payload_size=len(payload))
    for k, v in fields.items():
        setattr(single, k, v)
    data = single.SerializeToString()
    return struct.pack(">I", len(data)) + data + payload


def _stored(msg: SingleMessage) -> list[tuple[str, bytes]]:
    """The headers the record of ``msg`` gets (the producer's send_batch, named producer)."""
    headers = [(k, v.encode()) for k, v in (msg.properties or {}).items()]
    if msg.event_time_ms is not None:
        headers.append(("__pulsar.eventTime", b"%d" % msg.event_time_ms))
    headers += msg.headers or []
    if msg.sequence_id is not None:
        headers += [(HEADER_PRODUCER, b"prod-1"), (HEADER_SEQUENCE, b"%d" % msg.sequence_id)]
    return headers


def _dispatch(
    msg: SingleMessage | None, headers: list[tuple[str, bytes]] | None, offset: int = 9
) -> tuple[api.MessageMetadata, bytes]:
    """The metadata and payload a consumer gets for the record."""
    entry = Entry(
        0,
        offset,
        None if msg is None else msg.key,
        b"x" if msg is None else msg.payload,
        headers,
        1_600_000_000_000,
    )
    delivery = Delivery(MessageId(-1, offset), entry, 0)
    frame = parse_frame(message_frame(5, delivery)[4:])
    assert frame.metadata is not None
    return frame.metadata, frame.payload


def _round_trip(meta: api.MessageMetadata, payload: bytes) -> list[api.MessageMetadata]:
    return [_dispatch(m, _stored(m))[0] for m in unpack_messages(meta, payload)]


def test_a_record_without_reserved_headers_is_dispatched_as_before() -> None:
    meta, payload = _dispatch(None, [("color", b"red")])
    assert meta.producer_name == "policy-sync"
    assert meta.sequence_id == 9
    assert meta.publish_time == 1_600_000_000_000
    assert [(kv.key, kv.value) for kv in meta.properties] == [("color", "red")]
    for field in (
        "null_value",
        "ordering_key",
        "partition_key_b64_encoded",
        "chunk_id",
        "schema_version",
        "encryption_algo",
        "num_messages_in_batch",
    ):
        assert not meta.HasField(field), field
    assert not meta.encryption_keys
    assert payload == b"x"
    meta, _ = _dispatch(None, None)
    assert meta.producer_name == "policy-sync"
    assert not meta.properties


def test_unknown_and_unreadable_reserved_headers_are_skipped() -> None:
    meta, _ = _dispatch(
        None,
        [
            ("__pulsar.somethingNew", b"?"),
            (HEADER_SEQUENCE, b"not a number"),
            (HEADER_ENCRYPTION_KEY, b"\xff\xff"),
            (HEADER_BATCH_SIZE, b"-3"),
        ],
    )
    assert meta.publish_time == 1_600_000_000_000
    assert not meta.encryption_keys
    assert not meta.HasField("num_messages_in_batch")
    assert not meta.properties


def test_reserved_headers_out_of_their_fields_range_are_skipped() -> None:
    """What a plain Kafka producer may write under a reserved name: a sequence id past
    uint64, a negative event time, a chunk id past int32; and a record without a
    timestamp (-1). The message goes out without those fields instead of failing."""
    headers = [
        (HEADER_SEQUENCE, b"%d" % 2**70),
        ("__pulsar.eventTime", b"-5"),
        ("__pulsar.chunk.id", b"%d" % 2**40),
        (HEADER_PRODUCER, b"carol"),
    ]
    entry = Entry(0, 9, None, b"x", headers, -1)
    delivery = Delivery(MessageId(-1, 9), entry, 0)
    frame = parse_frame(message_frame(5, delivery)[4:])
    meta = frame.metadata
    assert meta is not None
    assert (meta.producer_name, meta.sequence_id, meta.publish_time) == ("carol", 9, 0)
    assert not meta.HasField("event_time")
    assert not meta.HasField("chunk_id")


def test_a_plain_message_gets_no_reserved_header_and_its_publish_time_is_kafkas() -> None:
    """The publish time a consumer gets is the record's Kafka timestamp (when the sidecar
    stored it), not a header: a plain message costs no extra bytes."""
    (msg,) = unpack_messages(_meta(partition_key="k"), b"body")
    assert not msg.headers
    (out,) = _round_trip(_meta(partition_key="k"), b"body")
    assert out.publish_time == 1_600_000_000_000
    assert out.partition_key == "k"
    assert (out.producer_name, out.sequence_id) == ("prod-1", 7)


def test_single_message_fields_round_trip() -> None:
    meta = _meta(
        null_value=True,
        partition_key="a2V5",
        partition_key_b64_encoded=True,
        ordering_key=b"\x00ord",
        schema_version=b"\x00\x01",
        event_time=42,
    )
    meta.properties.add(key="p", value="v")
    (msg,) = unpack_messages(meta, b"")
    assert (HEADER_NULL_VALUE, b"1") in (msg.headers or [])
    (out,) = _round_trip(meta, b"")
    assert out.null_value and out.partition_key_b64_encoded
    assert out.partition_key == "a2V5"
    assert out.ordering_key == b"\x00ord"
    assert out.schema_version == b"\x00\x01"
    assert out.event_time == 42
    assert [(kv.key, kv.value) for kv in out.properties] == [("p", "v")]


def test_batch_message_fields_round_trip_and_plain_ones_share_one_list() -> None:
    batch = (
        _single(b"", null_value=True, partition_key="k1")
        + _single(b"two", ordering_key=b"o2", partition_key="AAE=", partition_key_b64_encoded=True)
        + _single(b"three")
    )
    meta = _meta(num_messages_in_batch=3)
    msgs = unpack_messages(meta, batch)
    assert not msgs[2].headers
    assert (HEADER_ORDERING_KEY, b"o2") in (msgs[1].headers or [])
    first, second, third = _round_trip(meta, batch)
    assert first.null_value and not first.HasField("ordering_key")
    assert second.ordering_key == b"o2" and second.partition_key_b64_encoded
    assert not second.null_value
    assert not (third.null_value or third.HasField("ordering_key"))
    assert not third.partition_key_b64_encoded
    assert [m.sequence_id for m in (first, second, third)] == [7, 8, 9]
    assert {m.publish_time for m in (first, second, third)} == {1_600_000_000_000}


def _chunk(chunk_id: int, count: int = 3, **fields: object) -> api.MessageMetadata:
    base: dict[str, object] = {
        "uuid": "prod-1-7",
        "chunk_id": chunk_id,
        "num_chunks_from_msg": count,
        "total_chunk_msg_size": 30,
        "compression": api.ZSTD,
        "uncompressed_size": 100,
    }
    return _meta(**(base | fields))


def test_chunks_are_stored_as_sent_with_their_fields() -> None:
    # A compressed chunk's bytes are not a compressed stream: never decompressed here.
    for chunk_id in range(3):
        (msg,) = unpack_messages(_chunk(chunk_id), b"0123456789", is_chunk=True)
        assert msg.payload == b"0123456789"
        (out,) = _round_trip(_chunk(chunk_id), b"0123456789")
        assert (out.uuid, out.chunk_id, out.num_chunks_from_msg) == ("prod-1-7", chunk_id, 3)
        assert out.total_chunk_msg_size == 30
        assert (out.compression, out.uncompressed_size) == (api.ZSTD, 100)
        assert (out.producer_name, out.sequence_id) == ("prod-1", 7)
        # Only the last chunk counts for deduplication (the engine's __pulsar.seq).
        names = [k for k, _ in _stored(msg)]
        assert (HEADER_SEQUENCE in names) == (chunk_id == 2)
        assert (HEADER_CHUNK_SEQUENCE in names) == (chunk_id < 2)


@pytest.mark.parametrize(
    ("meta", "is_chunk"),
    [
        (_meta(), True),  # is_chunk without chunk metadata
        (_chunk(3), True),  # chunk id out of range
        (_chunk(0, count=0), True),
        (_chunk(0, uuid=""), True),
        (_chunk(0, total_chunk_msg_size=4), True),  # a chunk larger than its message
        (_chunk(0, num_messages_in_batch=2), True),
    ],
)
def test_inconsistent_chunks_are_refused(meta: api.MessageMetadata, is_chunk: bool) -> None:
    with pytest.raises(FrameError):
        unpack_messages(meta, b"0123456789", is_chunk=is_chunk)


def _encrypted(**fields: object) -> api.MessageMetadata:
    meta = _meta(encryption_algo="RSA", encryption_param=b"\x01iv", **fields)
    key = meta.encryption_keys.add(key="app.key", value=b"\x00secret")
    key.metadata.add(key="k", value="v")
    meta.encryption_keys.add(key="other", value=b"\x02")
    return meta


def test_encrypted_message_is_stored_as_sent_with_its_keys() -> None:
    meta = _encrypted(compression=api.LZ4, uncompressed_size=99, partition_key="k")
    (msg,) = unpack_messages(meta, b"not lz4 at all")
    assert msg.payload == b"not lz4 at all"
    (out,) = _round_trip(meta, b"not lz4 at all")
    assert list(out.encryption_keys) == list(meta.encryption_keys)
    assert out.encryption_algo == "RSA"
    assert out.encryption_param == b"\x01iv"
    assert (out.compression, out.uncompressed_size) == (api.LZ4, 99)
    assert not out.HasField("num_messages_in_batch")
    assert out.partition_key == "k"


def test_encrypted_batch_is_one_record_of_its_messages() -> None:
    meta = _encrypted(num_messages_in_batch=4)
    (msg,) = unpack_messages(meta, b"ciphertext of four messages")
    (out,) = _round_trip(meta, b"ciphertext of four messages")
    assert out.num_messages_in_batch == 4
    assert out.sequence_id == 7
    with pytest.raises(FrameError):
        unpack_messages(_encrypted(num_messages_in_batch=0), b"x")
