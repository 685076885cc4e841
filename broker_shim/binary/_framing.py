"""Frames of Pulsar's binary protocol: parsing and encoding, nothing else.

Wire format (Pulsar's protocol documentation, ``Commands.java``)::

    simple command   [TOTAL_SIZE u32][CMD_SIZE u32][CMD: BaseCommand]
    payload command  [TOTAL_SIZE u32][CMD_SIZE u32][CMD: BaseCommand]
                     [MAGIC 0x0e01 u16][CHECKSUM u32]
                     [METADATA_SIZE u32][METADATA: MessageMetadata][PAYLOAD]

All integers are big-endian. ``TOTAL_SIZE`` counts every byte after itself; the
checksum is CRC32C over everything after it (metadata size, metadata and payload). A
payload command without the magic number (clients older than protocol v6) is accepted
without a checksum, as Pulsar's ``Commands.hasChecksum`` does.

A frame larger than :data:`MAX_FRAME_SIZE` (Pulsar's ``maxMessageSize``, 5 MiB, plus its
``MESSAGE_SIZE_FRAME_PADDING``, 10 KiB) is refused before it is read.

The payload of a SEND is decompressed and unpacked by :func:`unpack_messages` into one
:class:`SingleMessage` per message of the batch: Kafka stores one record per Pulsar
message (see :mod:`broker_shim.binary`), with the metadata fields it has no place for in
reserved headers (:mod:`._metadata_headers`). A chunk or an encrypted payload is kept as
sent, in one record.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

import cramjam
import crc32c
from google.protobuf.message import DecodeError

from sync.errors import InvalidInputError
from sync.messaging import OutboundMessage

from . import PulsarApi_pb2 as api
from ._metadata_headers import (
    MetadataError,
    chunk_origin,
    message_headers,
    send_headers,
    stored_whole,
    whole_headers,
)

__all__ = [
    "CHECKSUM_MAGIC",
    "DEFAULT_MAX_MESSAGE_SIZE",
    "FRAME_PADDING",
    "MAX_FRAME_SIZE",
    "ChecksumError",
    "Frame",
    "FrameError",
    "SingleMessage",
    "encode_command",
    "encode_payload_command",
    "parse_frame",
    "unpack_messages",
]

#: Pulsar's default ``maxMessageSize`` (5 MiB) and ``Commands.MESSAGE_SIZE_FRAME_PADDING``.
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024
FRAME_PADDING = 10 * 1024
MAX_FRAME_SIZE = DEFAULT_MAX_MESSAGE_SIZE + FRAME_PADDING
CHECKSUM_MAGIC = 0x0E01

_U32 = struct.Struct(">I")
_U16 = struct.Struct(">H")
#: Decompressed batches may not exceed this either (a "zip bomb" is refused).
_MAX_UNCOMPRESSED = MAX_FRAME_SIZE


class FrameError(InvalidInputError):
    """A frame that cannot be parsed: the connection is closed (nothing was written)."""


class ChecksumError(FrameError):
    """A payload command whose CRC32C does not match (Pulsar's ``ChecksumError``): its
    command parsed, so a SEND is answered with SEND_ERROR rather than a closed connection."""

    def __init__(self, message: str, command: api.BaseCommand) -> None:
        super().__init__(message)
        self.command = command


@dataclass(frozen=True, slots=True)
class Frame:
    """One parsed frame: the command and, for payload commands, metadata and payload."""

    command: api.BaseCommand
    metadata: api.MessageMetadata | None = None
    payload: bytes = b""
    #: The frame's bytes after ``TOTAL_SIZE`` and where its entry starts in them (the
    #: metadata size): :attr:`entry` slices it only when asked.
    body: bytes = b""
    entry_at: int = 0

    @property
    def entry(self) -> bytes:
        """The payload command's entry as Pulsar stores it: ``[METADATA_SIZE][METADATA]
        [PAYLOAD]``, exactly as sent (what the checksum covers)."""
        return self.body[self.entry_at :] if self.metadata is not None else b""


#: One message of a SEND (a batch is unpacked into several): the engine's own
#: :class:`~sync.messaging.OutboundMessage` tuple, handed to it as is.
SingleMessage = OutboundMessage


def _parse(
    message: api.BaseCommand | api.MessageMetadata,
    data: bytes,
    what: str,
) -> None:
    try:
        message.ParseFromString(data)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise FrameError(f"undecodable {what}: {exc}") from None
    # protobuf's Python runtime parses messages that lack required fields (a BaseCommand
    # without its type would read as CONNECT): refuse them, as Pulsar's decoder does.
    if not message.IsInitialized():
        raise FrameError(f"{what} lacks required fields")


def parse_frame(body: bytes) -> Frame:
    """Parse one frame (the bytes after ``TOTAL_SIZE``).

    Raises:
        FrameError: truncated, a size that does not add up, an undecodable protobuf, or a
            command type without its command (e.g. a PING frame saying SEND).
        ChecksumError: the payload's CRC32C is wrong.
    """
    if len(body) < 4:
        raise FrameError(f"frame of {len(body)} bytes has no command size")
    (cmd_size,) = _U32.unpack_from(body, 0)
    if cmd_size == 0 or 4 + cmd_size > len(body):
        raise FrameError(f"command size {cmd_size} does not fit a frame of {len(body)} bytes")
    command = api.BaseCommand()
    _parse(command, body[4 : 4 + cmd_size], "command")
    rest = 4 + cmd_size
    if rest == len(body):
        return Frame(command)
    pos = rest
    checksum: int | None = None
    if len(body) - pos >= 2 and _U16.unpack_from(body, pos)[0] == CHECKSUM_MAGIC:
        if len(body) - pos < 6:
            raise FrameError("payload command truncated inside its checksum")
        (checksum,) = _U32.unpack_from(body, pos + 2)
        pos += 6
    if len(body) - pos < 4:
        raise FrameError("payload command truncated before its metadata size")
    if checksum is not None and crc32c.crc32c(body[pos:]) != checksum:
        raise ChecksumError("Checksum failed on the broker", command)
    (meta_size,) = _U32.unpack_from(body, pos)
    pos += 4
    if meta_size == 0 or pos + meta_size > len(body):
        raise FrameError(f"metadata size {meta_size} does not fit the frame")
    metadata = api.MessageMetadata()
    _parse(metadata, body[pos : pos + meta_size], "message metadata")
    return Frame(command, metadata, body[pos + meta_size :], body, pos - 4)


def encode_command(command: api.BaseCommand) -> bytes:
    """A simple command frame."""
    cmd = command.SerializeToString()
    return _U32.pack(len(cmd) + 4) + _U32.pack(len(cmd)) + cmd


def encode_payload_command(
    command: api.BaseCommand, metadata: api.MessageMetadata | bytes, payload: bytes
) -> bytes:
    """A payload command frame with magic number and CRC32C (``metadata`` may be
    pre-serialized)."""
    cmd = command.SerializeToString()
    meta = metadata if isinstance(metadata, bytes) else metadata.SerializeToString()
    checked = _U32.pack(len(meta)) + meta + payload
    total = 4 + len(cmd) + 2 + 4 + len(checked)
    return b"".join(
        (
            _U32.pack(total),
            _U32.pack(len(cmd)),
            cmd,
            _U16.pack(CHECKSUM_MAGIC),
            _U32.pack(crc32c.crc32c(checked)),
            checked,
        )
    )


def decompress(metadata: api.MessageMetadata, payload: bytes) -> bytes:
    """The payload as the producer wrote it before compression.

    Raises:
        FrameError: unknown codec, corrupt data, or a size other than announced.
    """
    codec = metadata.compression
    if codec == api.NONE:
        return payload
    size = metadata.uncompressed_size
    if size > _MAX_UNCOMPRESSED:
        raise FrameError(f"uncompressed size {size} exceeds {_MAX_UNCOMPRESSED} bytes")
    try:
        if codec == api.LZ4:
            out = bytes(cramjam.lz4.decompress_block(payload, output_len=size))
        elif codec == api.ZLIB:
            inflater = zlib.decompressobj()
            out = inflater.decompress(payload, size + 1)
        elif codec == api.ZSTD:
            out = bytes(cramjam.zstd.decompress(payload, output_len=size))
        elif codec == api.SNAPPY:
            out = bytes(cramjam.snappy.decompress_raw(payload))
        else:
            raise FrameError(f"unknown compression type {codec}")
    except FrameError:
        raise
    except Exception as exc:  # the codecs raise their own error types
        raise FrameError(f"cannot decompress {api.CompressionType.Name(codec)}: {exc}") from None
    if len(out) != size:
        raise FrameError(
            f"decompressed {len(out)} bytes, but the metadata announced {size} "
            f"({api.CompressionType.Name(codec)})"
        )
    return out


def _props(pairs: object) -> dict[str, str]:
    return {kv.key: kv.value for kv in pairs}  # type: ignore[attr-defined]


def unpack_messages(
    metadata: api.MessageMetadata, payload: bytes, *, is_chunk: bool = False
) -> list[SingleMessage]:
    """The messages of one SEND: one, or each message of a batch; a chunk (``is_chunk``,
    or chunk metadata) or an encrypted payload is one message, its payload as sent.

    Raises:
        FrameError: the payload does not decompress, its batch does not parse, or its chunk
            or encryption metadata does not add up.
    """
    event = metadata.event_time or None
    shared = send_headers(metadata)
    if stored_whole(metadata, is_chunk=is_chunk):
        try:
            whole = whole_headers(metadata, len(payload))
        except MetadataError as exc:
            raise FrameError(str(exc)) from None
        headers = message_headers(metadata, shared) + whole
        origin = chunk_origin(metadata)
        if origin is not None:
            headers += origin
        key = metadata.partition_key if metadata.HasField("partition_key") else None
        sequence = None if origin is not None else metadata.sequence_id
        properties = _props(metadata.properties)
        return [SingleMessage(payload, key, properties, event, sequence, headers)]
    data = decompress(metadata, payload)
    if not metadata.HasField("num_messages_in_batch"):
        key = metadata.partition_key if metadata.HasField("partition_key") else None
        return [
            SingleMessage(
                data,
                key,
                _props(metadata.properties),
                event,
                metadata.sequence_id,
                message_headers(metadata, shared),
            )
        ]
    count = metadata.num_messages_in_batch
    if count < 1:
        raise FrameError(f"num_messages_in_batch is {count}")
    # The hot path of a busy producer: names bound locally, no per-message f-strings.
    out: list[SingleMessage] = []
    append = out.append
    parse = api.SingleMessageMetadata.FromString
    unpack = _U32.unpack_from
    new = tuple.__new__
    total = len(data)
    first_seq = metadata.sequence_id
    pos = 0
    for index in range(count):
        if total - pos < 4:
            raise FrameError(f"batch truncated at message {index} of {count}")
        (size,) = unpack(data, pos)
        pos += 4
        end = pos + size
        if size == 0 or end > total:
            raise FrameError(f"batch message {index}: metadata size {size} does not fit")
        try:
            single = parse(data[pos:end])
        except (DecodeError, ValueError, RuntimeError) as exc:
            raise FrameError(f"batch message {index}: undecodable metadata: {exc}") from None
        if not single.IsInitialized():
            raise FrameError(f"batch message {index}: metadata lacks required fields")
        pos = end
        length = single.payload_size
        end = pos + length
        if length < 0 or end > total:
            raise FrameError(f"batch message {index}: payload size {length} does not fit")
        body = data[pos:end]
        pos = end
        if single.compacted_out:
            continue
        props = single.properties
        # A non-default value is a present field: HasField only for the default values.
        key = single.partition_key or ("" if single.HasField("partition_key") else None)
        sequence = single.sequence_id or (
            0 if single.HasField("sequence_id") else first_seq + index
        )
        # Most messages set none of these: the SEND's shared list, not a copy.
        headers = (
            message_headers(single, shared)
            if single.null_value or single.partition_key_b64_encoded or single.ordering_key
            else shared
        )
        # tuple.__new__: the NamedTuple's own __new__ is a Python frame per message.
        append(
            new(
                SingleMessage,
                (
                    body,
                    key,
                    {kv.key: kv.value for kv in props} if props else {},
                    single.event_time or event,
                    sequence,
                    headers,
                ),
            )
        )
    if pos != len(data):
        raise FrameError(f"batch has {len(data) - pos} bytes after its {count} messages")
    return out
