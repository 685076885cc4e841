"""The stored-entry format (docs/entry-design.md): one Kafka record per SEND.

With ``broker-shim run --entry-format entry`` a SEND is stored as Pulsar's broker stores
it, one entry as the client sent it, instead of one record per message:

* **value**: ``[METADATA_SIZE u32][MessageMetadata][PAYLOAD]``, the bytes the SEND's
  checksum covers, payload still compressed (or encrypted) as sent;
* **key**: the metadata's ``partition_key`` (Kafka compaction and plain Kafka readers);
* **headers**: ``__pulsar.entry`` = the format version, ``__pulsar.count`` = its messages;
  the engine adds the producer's name and the batch's highest sequence id (deduplication
  replays them) and ``__pulsar.deliverAt`` for a delayed entry.

Nothing a client set on a message is mapped or dropped: every field of ``MessageMetadata``
and ``SingleMessageMetadata`` goes back to consumers byte for byte (null values, ordering
keys, chunks, encryption keys, compression, publish and event times, schema versions).

Publish (:func:`check_entry`) walks the SEND before anything is written, refusing what a
consumer could not read back: a batch whose count or sizes do not match its payload or
whose messages' metadata does not decode, a payload that does not decompress to its
announced size, chunk or encryption metadata that does not add up. The walk over a batch's
messages, the one per-message loop of the path, is compiled (``policy_sync_native``,
``native/src/lib.rs``). Dispatch (:func:`entry_frame`) writes a MESSAGE command, a checksum and
the stored value verbatim; the client unpacks the batch, as from Pulsar. WebSocket
consumers get the messages one by one (:func:`decode_entry`).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import crc32c
from google.protobuf.message import DecodeError
from policy_sync_native import walk_batch

from sync.errors import InvalidInputError
from sync.messaging import Delivery, OutboundMessage
from sync.messaging.headers import (
    ENTRY_FORMAT_VERSION,
    HEADER_ENTRY,
    HEADER_ENTRY_COUNT,
)

from . import PulsarApi_pb2 as api
from ._framing import CHECKSUM_MAGIC, FrameError, decompress, unpack_messages
from ._metadata_headers import MetadataError, stored_whole, whole_headers

__all__ = [
    "EntryError",
    "ack_set_words",
    "check_entry",
    "check_stored",
    "decode_entry",
    "entry_count_of",
    "entry_frame",
    "entry_metadata",
]

_U32 = struct.Struct(">I")
_MAGIC = struct.Struct(">H").pack(CHECKSUM_MAGIC)
_T = api.BaseCommand


class EntryError(InvalidInputError):
    """A stored entry that cannot be read: quarantined by the consumer that meets it."""


def check_entry(
    metadata: api.MessageMetadata, payload: bytes, *, is_chunk: bool
) -> tuple[int, int]:
    """The number of messages in a SEND stored as one entry and the highest sequence id
    among them, once its structure is checked as :func:`~._framing.unpack_messages` would
    check it (a message of a batch without its own sequence id has the batch's first plus
    its index, as the client numbers them).

    Raises:
        FrameError: the payload does not decompress, its batch does not parse, or its chunk
            or encryption metadata does not add up (nothing is written).
    """
    if stored_whole(metadata, is_chunk=is_chunk):
        try:
            whole_headers(metadata, len(payload))  # the chunk and encryption checks
        except MetadataError as exc:
            raise FrameError(str(exc)) from None
        first = metadata.sequence_id
        if metadata.HasField("num_messages_in_batch"):
            count = int(metadata.num_messages_in_batch)
            return count, max(first + count - 1, metadata.highest_sequence_id)
        return 1, first
    data = decompress(metadata, payload)
    first = metadata.sequence_id
    if not metadata.HasField("num_messages_in_batch"):
        return 1, first
    count = metadata.num_messages_in_batch
    if count < 1:
        raise FrameError(f"num_messages_in_batch is {count}")
    # The one per-message loop of the entry path, compiled: each message's size prefix,
    # SingleMessageMetadata (decoded as protobuf's runtime would, its required fields
    # checked as unpack_messages checks them) and payload size; the last one's sequence id.
    try:
        _, last_id = walk_batch(data, count)
    except ValueError as exc:
        raise FrameError(str(exc)) from None
    # A client numbers a batch's messages upwards: the last one's is the highest.
    last = first + count - 1 if last_id is None else last_id
    highest = max(metadata.highest_sequence_id, last)
    return int(count), highest


def entry_count_of(headers: Sequence[tuple[str, bytes | None]] | None) -> int:
    """The messages of a record's stored entry, from its headers (0: not a readable entry)."""
    if not headers:
        return 0
    found = dict(headers)
    if found.get(HEADER_ENTRY) != ENTRY_FORMAT_VERSION:
        return 0
    try:
        return max(0, int(found.get(HEADER_ENTRY_COUNT) or b"0"))
    except ValueError:
        return 0


def check_stored(headers: Sequence[tuple[str, bytes | None]] | None, value: bytes) -> None:
    """Refuse a record no client could read: a stored entry of a format version this code
    does not know, or whose metadata does not parse.

    Raises:
        EntryError: it is quarantined by the consumer that meets it; nothing is sent.
    """
    if entry_count_of(headers) < 1:
        raise EntryError("stored entry of an unknown format version")
    entry_metadata(value)


def entry_metadata(value: bytes) -> tuple[api.MessageMetadata, int]:
    """The metadata of a stored entry and where its payload starts in ``value``.

    Raises:
        EntryError: the value is not an entry (sizes that do not add up, undecodable
            metadata).
    """
    if len(value) < 4:
        raise EntryError(f"stored entry of {len(value)} bytes has no metadata size")
    (size,) = _U32.unpack_from(value, 0)
    if size == 0 or 4 + size > len(value):
        raise EntryError(f"metadata size {size} does not fit a stored entry of {len(value)} bytes")
    metadata = api.MessageMetadata()
    try:
        metadata.ParseFromString(value[4 : 4 + size])
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise EntryError(f"undecodable metadata in a stored entry: {exc}") from None
    if not metadata.IsInitialized():
        raise EntryError("the metadata of a stored entry lacks required fields")
    return metadata, 4 + size


def entry_frame(consumer_id: int, delivery: Delivery) -> bytes:
    """A MESSAGE carrying one stored entry verbatim (a batch: the client unpacks it).

    Raises:
        EntryError: the record is an entry of an unknown format version, or its metadata
            does not parse (it is quarantined; nothing is sent).
    """
    entry = delivery.entry
    value = entry.payload
    check_stored(entry.headers, value)
    cmd = _T(type=_T.MESSAGE)
    msg = cmd.message
    msg.consumer_id = consumer_id
    mid = msg.message_id
    mid.ledgerId = 0
    mid.entryId = delivery.message_id.offset
    mid.partition = delivery.message_id.partition
    if delivery.redelivery_count:
        msg.redelivery_count = delivery.redelivery_count
    if delivery.acked_bits:
        msg.ack_set.extend(ack_set_words(entry.count, delivery.acked_bits))
    command = cmd.SerializeToString()
    total = 4 + len(command) + 6 + len(value)
    return b"".join(
        (
            _U32.pack(total),
            _U32.pack(len(command)),
            command,
            _MAGIC,
            _U32.pack(crc32c.crc32c(value)),
            value,
        )
    )


def ack_set_words(count: int, acked_bits: int) -> list[int]:
    """``CommandMessage.ack_set`` of an entry of ``count`` messages whose indexes
    ``acked_bits`` are acknowledged: the indexes still to deliver, as Pulsar's dispatcher
    sends them (``getDeletedBatchIndexesAsLongArray``: a ``BitSet``'s signed int64 words,
    bit ``i`` in word ``i // 64``); the client skips the others."""
    bits = ((1 << count) - 1) & ~acked_bits
    words = []
    for _ in range((count + 63) // 64):
        word = bits & 0xFFFFFFFFFFFFFFFF
        words.append(word - (1 << 64) if word >= 1 << 63 else word)
        bits >>= 64
    return words


def decode_entry(value: bytes) -> tuple[api.MessageMetadata, list[OutboundMessage]]:
    """The messages of a stored entry, one by one (WebSocket consumers): an encrypted
    payload or a chunk stays one message, its payload as stored.

    Raises:
        EntryError: the entry does not parse.
    """
    metadata, start = entry_metadata(value)
    try:
        messages = unpack_messages(metadata, value[start:])
    except InvalidInputError as exc:
        raise EntryError(f"stored entry does not unpack: {exc}") from None
    return metadata, messages
