"""Pulsar's message ids for messages stored in Kafka: base64 of a serialized
``MessageIdData`` protobuf (``ledgerId = 0``, ``entryId = Kafka offset``, ``partition =``
Pulsar partition index or -1), written and read without the protobuf runtime."""

from __future__ import annotations

import binascii
import functools
import logging
from dataclasses import dataclass

from sync._errors import InvalidMessageIdError

from ._varint import get_varint, put_varint

logger = logging.getLogger(__name__)

__all__ = ["MAX_BATCH_SIZE", "MessageId"]


_INT64_MAX = (1 << 63) - 1

#: The largest ``batch_size`` a batch message id may carry (an entry of a 5 MB frame holds
#: fewer messages: each takes at least a few bytes of metadata).
MAX_BATCH_SIZE = 1 << 20


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    try:
        return get_varint(data, pos)
    except ValueError:
        raise InvalidMessageIdError("truncated or overlong varint in message id") from None


@functools.lru_cache(maxsize=1024)
def _partition_field(partition: int) -> bytes:
    out = bytearray(b"\x18")  # field 3, partition (int32)
    put_varint(partition, out)
    return bytes(out)


@dataclass(frozen=True, slots=True, order=True)
class MessageId:
    """Where a message is: Pulsar partition index (-1: non-partitioned) and Kafka offset.

    Serialized as Pulsar's ``MessageIdData`` protobuf with ``ledgerId = 0`` and
    ``entryId = offset`` (fields 1-3; ``batch_index`` is never written), and carried as
    standard base64 in JSON frames, as Pulsar's WebSocket API does.
    """

    partition: int
    offset: int

    def __post_init__(self) -> None:
        if self.partition < -1 or self.partition > 0x7FFFFFFF:
            raise InvalidMessageIdError(f"partition {self.partition} out of range")
        if not 0 <= self.offset <= _INT64_MAX:
            raise InvalidMessageIdError(f"offset {self.offset} out of range")

    @property
    def kafka_partition(self) -> int:
        """The Kafka partition holding the message (0 for a non-partitioned topic)."""
        return self.partition if self.partition >= 0 else 0

    def to_bytes(self) -> bytes:
        """The serialized ``MessageIdData``."""
        out = bytearray(b"\x08\x00\x10")  # ledgerId = 0, then the entryId tag
        put_varint(self.offset, out)  # never negative (checked on construction)
        out += _partition_field(self.partition)
        return bytes(out)

    @classmethod
    def from_bytes(cls, data: bytes) -> MessageId:
        """Parse a serialized ``MessageIdData`` written by :meth:`to_bytes` (or by
        :meth:`batch_base64`: the entry's id).

        Raises:
            InvalidMessageIdError: not a protobuf ``MessageIdData``, or a ledger id other
                than 0 (the id does not come from policy-sync).
        """
        return cls._parse(data)[0]

    @classmethod
    def _parse(cls, data: bytes) -> tuple[MessageId, int | None, int | None]:
        """The id, and its ``batch_index`` and ``batch_size`` (fields 4 and 6) if set."""
        ledger: int | None = None
        entry: int | None = None
        partition = -1
        batch: dict[int, int] = {}
        pos = 0
        while pos < len(data):
            tag, pos = _read_varint(data, pos)
            field, wire = tag >> 3, tag & 7
            if wire == 0:
                value, pos = _read_varint(data, pos)
                if field == 1:
                    ledger = value
                elif field == 2:
                    entry = value
                elif field == 3:
                    partition = value - (1 << 64) if value >= 1 << 63 else value
                    partition = ((partition + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)
                elif field in (4, 6):
                    batch[field] = value
            elif wire == 2:
                length, pos = _read_varint(data, pos)
                pos += length
            elif wire == 1:
                pos += 8
            elif wire == 5:
                pos += 4
            else:
                raise InvalidMessageIdError(f"unsupported protobuf wire type {wire}")
        if pos != len(data):
            raise InvalidMessageIdError("message id is truncated")
        if ledger is None or entry is None:
            raise InvalidMessageIdError("message id lacks ledgerId or entryId")
        if ledger != 0:
            raise InvalidMessageIdError(
                f"message id has ledgerId {ledger}; ids from policy-sync always have 0"
            )
        return cls(partition, entry), batch.get(4), batch.get(6)

    def to_base64(self) -> str:
        """Standard base64 of :meth:`to_bytes` (the ``messageId`` of JSON frames)."""
        return binascii.b2a_base64(self.to_bytes(), newline=False).decode("ascii")

    def batch_base64(self, index: int, size: int) -> str:
        """The base64 id of message ``index`` of the ``size`` messages stored at this id
        (a stored entry): ``MessageIdData`` with ``batch_index`` and ``batch_size``
        (fields 4 and 6), as Pulsar's ``BatchMessageIdImpl``. :meth:`from_base64` reads it
        back as this id (the entry)."""
        out = bytearray(self.to_bytes())
        out += b"\x20"  # field 4, batch_index
        put_varint(index, out)
        out += b"\x30"  # field 6, batch_size
        put_varint(size, out)
        return binascii.b2a_base64(bytes(out), newline=False).decode("ascii")

    @classmethod
    def from_base64(cls, text: str) -> MessageId:
        """Inverse of :meth:`to_base64`.

        Raises:
            InvalidMessageIdError: not base64, or not a policy-sync message id.
        """
        try:
            raw = binascii.a2b_base64(text, strict_mode=True)
        except (binascii.Error, ValueError, TypeError) as exc:
            raise InvalidMessageIdError(f"message id {text!r} is not base64") from exc
        return cls.from_bytes(raw)

    @classmethod
    def batch_from_base64(cls, text: str) -> tuple[MessageId, int, int] | None:
        """The entry, batch index and batch size of a :meth:`batch_base64` id; None for an
        id without a batch index (a whole record).

        Raises:
            InvalidMessageIdError: not base64, not a policy-sync message id, or a batch
                index outside its batch size (at most :data:`MAX_BATCH_SIZE`).
        """
        try:
            raw = binascii.a2b_base64(text, strict_mode=True)
        except (binascii.Error, ValueError, TypeError) as exc:
            raise InvalidMessageIdError(f"message id {text!r} is not base64") from exc
        mid, index, size = cls._parse(raw)
        if index is None:
            return None
        if size is None or not 0 <= index < size <= MAX_BATCH_SIZE:
            raise InvalidMessageIdError(
                f"message id {text!r}: batch index {index} of a batch of {size} messages"
            )
        return mid, index, size

    def __str__(self) -> str:
        return f"0:{self.offset}:{self.partition}"
