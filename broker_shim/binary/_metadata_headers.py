"""Pulsar message metadata and the reserved Kafka headers of a message record, both ways.

Kafka keeps one record per Pulsar message: its key is the partition key, its value the
payload, and each Pulsar property a header of the same name (see
:mod:`sync.messaging.headers`). Whatever else of ``MessageMetadata`` or
``SingleMessageMetadata`` a consumer must get back is carried in reserved ``__pulsar.``
headers, written here when a SEND is unpacked (:func:`send_headers`,
:func:`message_headers`, :func:`whole_headers`) and read back here when a record is
dispatched (:func:`restore`). A record without them (a plain Kafka producer's, or one
written before they existed) is dispatched as it always was.

Two kinds of SEND are stored as sent, never decompressed nor split: a chunk of a large
message (one record per chunk; the client reassembles them) and an encrypted message (the
sidecar cannot read it; an encrypted batch is one record dispatched as one entry of its
``num_messages_in_batch`` messages). Their compression, chunk and encryption fields travel
in headers too.
"""

from __future__ import annotations

from collections.abc import Callable

from google.protobuf.message import DecodeError

from sync.messaging.headers import (
    HEADER_BATCH_SIZE,
    HEADER_CHUNK_COUNT,
    HEADER_CHUNK_ID,
    HEADER_CHUNK_SEQUENCE,
    HEADER_CHUNK_TOTAL_SIZE,
    HEADER_CHUNK_UUID,
    HEADER_COMPRESSION,
    HEADER_ENCRYPTION_ALGO,
    HEADER_ENCRYPTION_KEY,
    HEADER_ENCRYPTION_PARAM,
    HEADER_EVENT_TIME,
    HEADER_KEY_B64,
    HEADER_NULL_VALUE,
    HEADER_ORDERING_KEY,
    HEADER_PRODUCER,
    HEADER_SCHEMA_VERSION,
    HEADER_SEQUENCE,
    HEADER_UNCOMPRESSED_SIZE,
    RESERVED_HEADER_PREFIX,
)

from . import PulsarApi_pb2 as api

__all__ = [
    "MetadataError",
    "chunk_origin",
    "message_headers",
    "restore",
    "send_headers",
    "stored_whole",
    "whole_headers",
]

Header = tuple[str, bytes]

_TRUE = b"1"
_COMPRESSIONS = frozenset(api.CompressionType.values())


class MetadataError(ValueError):
    """Chunk or encryption metadata that does not add up (the framing layer refuses it)."""


# -- send: metadata -> headers ---------------------------------------------------------
def send_headers(metadata: api.MessageMetadata) -> list[Header]:
    """The headers every message of one SEND carries: the producer's schema version (when
    set). A batch's own ordering key (the Java client copies its first message's there) is
    not a message's: Pulsar's consumers give each message of a batch only the ordering key
    of its ``SingleMessageMetadata`` (the C++ client's ``Message.cc`` clears it otherwise,
    the Java client's ``MessageImpl`` reads the single metadata). The publish time is the
    Kafka record's timestamp (the sidecar's clock when it stored the message), not a
    header."""
    out: list[Header] = []
    if metadata.HasField("schema_version"):
        out.append((HEADER_SCHEMA_VERSION, metadata.schema_version))
    return out


def message_headers(
    message: api.MessageMetadata | api.SingleMessageMetadata, shared: list[Header]
) -> list[Header]:
    """``shared`` (:func:`send_headers`) plus one message's null value, key encoding and
    ordering key: ``shared`` itself (not copied) when the message sets none of them."""
    null = message.null_value
    b64 = message.partition_key_b64_encoded
    ordering = message.HasField("ordering_key")
    if not (null or b64 or ordering):
        return shared
    out = shared[:]
    if null:
        out.append((HEADER_NULL_VALUE, _TRUE))
    if b64:
        out.append((HEADER_KEY_B64, _TRUE))
    if ordering:
        out.append((HEADER_ORDERING_KEY, message.ordering_key))
    return out


def stored_whole(metadata: api.MessageMetadata, *, is_chunk: bool) -> bool:
    """True for a SEND stored as sent, in one record: a chunk or an encrypted payload."""
    return is_chunk or bool(metadata.encryption_keys) or metadata.HasField("chunk_id")


def whole_headers(metadata: api.MessageMetadata, payload_size: int) -> list[Header]:
    """The headers of a SEND stored as sent (:func:`stored_whole`), besides those of
    :func:`message_headers`: its compression, chunk and encryption fields, and the batch
    size of an encrypted batch.

    Raises:
        MetadataError: chunk fields missing or out of range, or a batch of chunks.
    """
    out: list[Header] = []
    batched = metadata.HasField("num_messages_in_batch")
    if metadata.HasField("chunk_id"):
        count = metadata.num_chunks_from_msg
        chunk = metadata.chunk_id
        total = metadata.total_chunk_msg_size
        if batched:
            raise MetadataError("a chunk cannot be a batch")
        if not metadata.uuid or count < 1 or not 0 <= chunk < count:
            raise MetadataError(
                f"chunk {chunk} of {count} (uuid {metadata.uuid!r}) is not a valid chunk"
            )
        if total < payload_size:
            raise MetadataError(f"chunk of {payload_size} bytes in a message of {total} bytes")
        out += (
            (HEADER_CHUNK_UUID, metadata.uuid.encode("utf-8")),
            (HEADER_CHUNK_ID, b"%d" % chunk),
            (HEADER_CHUNK_COUNT, b"%d" % count),
            (HEADER_CHUNK_TOTAL_SIZE, b"%d" % total),
        )
    elif not metadata.encryption_keys:
        raise MetadataError("a chunk without chunk metadata")
    codec = metadata.compression  # proto2: an unknown codec number parses as NONE
    if codec != api.NONE:
        out.append((HEADER_COMPRESSION, b"%d" % codec))
        out.append((HEADER_UNCOMPRESSED_SIZE, b"%d" % metadata.uncompressed_size))
    for key in metadata.encryption_keys:
        out.append((HEADER_ENCRYPTION_KEY, key.SerializeToString()))
    if metadata.HasField("encryption_algo"):
        out.append((HEADER_ENCRYPTION_ALGO, metadata.encryption_algo.encode("utf-8")))
    if metadata.HasField("encryption_param"):
        out.append((HEADER_ENCRYPTION_PARAM, metadata.encryption_param))
    if batched:
        size = metadata.num_messages_in_batch
        if size < 1:
            raise MetadataError(f"num_messages_in_batch is {size}")
        out.append((HEADER_BATCH_SIZE, b"%d" % size))
    return out


def chunk_origin(metadata: api.MessageMetadata) -> list[Header] | None:
    """The producer and sequence id of a chunk before the last one, in headers that
    deduplication does not count (None for any other message: the engine writes them)."""
    if not metadata.HasField("chunk_id") or metadata.chunk_id >= metadata.num_chunks_from_msg - 1:
        return None
    return [
        (HEADER_PRODUCER, metadata.producer_name.encode("utf-8")),
        (HEADER_CHUNK_SEQUENCE, b"%d" % metadata.sequence_id),
    ]


# -- dispatch: headers -> metadata -----------------------------------------------------
def _int(value: bytes) -> int | None:
    try:
        return int(value)
    except ValueError:
        return None


def _producer(meta: api.MessageMetadata, value: bytes) -> None:
    if value:
        meta.producer_name = value.decode("utf-8", "replace")


def _sequence(meta: api.MessageMetadata, value: bytes) -> None:
    number = _int(value)
    if number is not None and number >= 0:
        meta.sequence_id = number


def _event_time(meta: api.MessageMetadata, value: bytes) -> None:
    number = _int(value)
    if number:
        meta.event_time = number


def _null_value(meta: api.MessageMetadata, value: bytes) -> None:
    meta.null_value = True


def _key_b64(meta: api.MessageMetadata, value: bytes) -> None:
    meta.partition_key_b64_encoded = True


def _ordering_key(meta: api.MessageMetadata, value: bytes) -> None:
    meta.ordering_key = value


def _schema_version(meta: api.MessageMetadata, value: bytes) -> None:
    meta.schema_version = value


def _chunk_uuid(meta: api.MessageMetadata, value: bytes) -> None:
    meta.uuid = value.decode("utf-8", "replace")


def _number(field: str) -> Callable[[api.MessageMetadata, bytes], None]:
    def setter(meta: api.MessageMetadata, value: bytes) -> None:
        number = _int(value)
        if number is not None and number >= 0:
            setattr(meta, field, number)

    return setter


def _encryption_key(meta: api.MessageMetadata, value: bytes) -> None:
    key = api.EncryptionKeys()
    try:
        key.ParseFromString(value)
    except (DecodeError, ValueError, RuntimeError):
        return
    if key.IsInitialized():
        meta.encryption_keys.append(key)


def _encryption_algo(meta: api.MessageMetadata, value: bytes) -> None:
    meta.encryption_algo = value.decode("utf-8", "replace")


def _encryption_param(meta: api.MessageMetadata, value: bytes) -> None:
    meta.encryption_param = value


def _compression(meta: api.MessageMetadata, value: bytes) -> None:
    number = _int(value)
    if number in _COMPRESSIONS:
        meta.compression = number  # type: ignore[assignment]


_RESTORE: dict[str, Callable[[api.MessageMetadata, bytes], None]] = {
    HEADER_PRODUCER: _producer,
    HEADER_SEQUENCE: _sequence,
    HEADER_CHUNK_SEQUENCE: _sequence,
    HEADER_EVENT_TIME: _event_time,
    HEADER_NULL_VALUE: _null_value,
    HEADER_KEY_B64: _key_b64,
    HEADER_ORDERING_KEY: _ordering_key,
    HEADER_SCHEMA_VERSION: _schema_version,
    HEADER_CHUNK_UUID: _chunk_uuid,
    HEADER_CHUNK_ID: _number("chunk_id"),
    HEADER_CHUNK_COUNT: _number("num_chunks_from_msg"),
    HEADER_CHUNK_TOTAL_SIZE: _number("total_chunk_msg_size"),
    HEADER_ENCRYPTION_KEY: _encryption_key,
    HEADER_ENCRYPTION_ALGO: _encryption_algo,
    HEADER_ENCRYPTION_PARAM: _encryption_param,
    HEADER_COMPRESSION: _compression,
    HEADER_UNCOMPRESSED_SIZE: _number("uncompressed_size"),
    HEADER_BATCH_SIZE: _number("num_messages_in_batch"),
}


def restore(meta: api.MessageMetadata, headers: list[tuple[str, bytes]]) -> None:
    """Fill ``meta`` from a record's headers: each property (a header without the
    reserved prefix, in order), then every reserved field the record carries; an
    unknown or unreadable reserved header (not a number, or out of its field's range) is
    skipped."""
    setters = _RESTORE
    properties = meta.properties
    for name, value in headers:
        if name.startswith(RESERVED_HEADER_PREFIX):
            setter = setters.get(name)
            if setter is not None and value is not None:
                try:
                    setter(meta, value)
                except (ValueError, TypeError):
                    pass  # out of the field's range (a plain Kafka producer wrote it)
        else:
            kv = properties.add()
            kv.key = name
            kv.value = "" if value is None else value.decode("utf-8", "replace")
