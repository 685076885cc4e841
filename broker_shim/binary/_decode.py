"""What a Kafka-native application reads: the Pulsar messages of one Kafka record,
whichever way it was stored (docs/messaging.md, "Kafka layout").

A record is one of three kinds, told apart by its headers:

* a stored entry (``__pulsar.entry``, ``--entry-format entry``): a Pulsar client's SEND as
  sent, one or many messages;
* a message record of a Pulsar client or WebSocket producer (``--entry-format message``):
  one message, its metadata in reserved ``__pulsar.`` headers;
* a plain Kafka producer's record: one message, its headers as properties.

:func:`decode_record` gives each message with the fields a Pulsar consumer would get; an
encrypted payload or a chunk is given as stored (``encrypted`` / ``chunk_id`` say so).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sync.messaging.headers import (
    ENTRY_FORMAT_VERSION,
    HEADER_ENTRY,
    HEADER_NULL_VALUE,
    HEADER_ORDERING_KEY,
)

from . import PulsarApi_pb2 as api
from ._entries import EntryError, decode_entry
from ._metadata_headers import restore

__all__ = ["DecodedMessage", "decode_record"]


@dataclass(frozen=True, slots=True)
class DecodedMessage:
    """One Pulsar message of a Kafka record (``payload`` None: sent with a null value)."""

    payload: bytes | None
    key: str | None = None
    ordering_key: bytes | None = None
    properties: dict[str, str] = field(default_factory=dict)
    event_time_ms: int | None = None
    publish_time_ms: int = 0
    producer_name: str | None = None
    sequence_id: int | None = None
    schema_version: bytes | None = None
    #: Its place in the record: index and count (0 and 1 for a record of one message).
    batch_index: int = 0
    batch_size: int = 1
    #: The payload is still encrypted (end-to-end encryption; the key is the client's).
    encrypted: bool = False
    #: A chunk of a large message: its index (None: a whole message).
    chunk_id: int | None = None


#: Record headers as Kafka clients give them (confluent-kafka: a list of pairs).
Headers = Sequence[tuple[str, str | bytes | None]] | Mapping[str, str | bytes | None]


def _pairs(headers: Headers | None) -> list[tuple[str, bytes]]:
    items = headers.items() if isinstance(headers, Mapping) else headers or ()
    return [
        (name, raw.encode("utf-8") if isinstance(raw, str) else raw or b"") for name, raw in items
    ]


def decode_record(
    value: bytes | None,
    headers: Headers | None = None,
    key: bytes | None = None,
    timestamp_ms: int = 0,
) -> list[DecodedMessage]:
    """The Pulsar messages of one Kafka record (value, headers, key and timestamp as a
    Kafka consumer returns them).

    Raises:
        EntryError: a stored entry of another format version, or one that does not parse.
    """
    pairs = _pairs(headers)
    marker = next((raw for name, raw in pairs if name == HEADER_ENTRY), None)
    if marker is not None:
        if marker != ENTRY_FORMAT_VERSION:
            raise EntryError(f"stored entry of format version {marker!r}")
        return _entry(value or b"")
    meta = api.MessageMetadata()
    restore(meta, pairs)
    names = {name for name, _ in pairs}
    text_key = None if key is None else key.decode("utf-8", "replace")
    null = HEADER_NULL_VALUE in names
    return [
        DecodedMessage(
            payload=None if null else (value or b""),
            key=text_key,
            ordering_key=meta.ordering_key if HEADER_ORDERING_KEY in names else None,
            properties={kv.key: kv.value for kv in meta.properties},
            event_time_ms=meta.event_time or None,
            publish_time_ms=timestamp_ms,
            producer_name=meta.producer_name if meta.HasField("producer_name") else None,
            sequence_id=meta.sequence_id if meta.HasField("sequence_id") else None,
            schema_version=meta.schema_version if meta.HasField("schema_version") else None,
            encrypted=bool(meta.encryption_keys),
            chunk_id=meta.chunk_id if meta.HasField("chunk_id") else None,
        )
    ]


def _entry(value: bytes) -> list[DecodedMessage]:
    metadata, messages = decode_entry(value)
    size = len(messages)
    producer = metadata.producer_name
    schema = metadata.schema_version if metadata.HasField("schema_version") else None
    encrypted = bool(metadata.encryption_keys)
    chunk = metadata.chunk_id if metadata.HasField("chunk_id") else None
    out: list[DecodedMessage] = []
    for index, msg in enumerate(messages):
        reserved = dict(msg.headers or ())
        # A batch's own ordering key is not its messages' (as Pulsar's consumers read it).
        ordering = reserved.get(HEADER_ORDERING_KEY)
        out.append(
            DecodedMessage(
                payload=None if HEADER_NULL_VALUE in reserved else msg.payload,
                key=msg.key,
                ordering_key=ordering,
                properties=dict(msg.properties or {}),
                event_time_ms=msg.event_time_ms,
                publish_time_ms=metadata.publish_time,
                producer_name=producer,
                sequence_id=msg.sequence_id,
                schema_version=schema,
                batch_index=index,
                batch_size=size,
                encrypted=encrypted,
                chunk_id=chunk,
            )
        )
    return out
