"""Protobuf base-128 varints, the one codec of the message ids and the ack-set metadata."""

from __future__ import annotations

__all__ = ["get_varint", "put_varint"]

_UINT64 = (1 << 64) - 1


def put_varint(value: int, out: bytearray) -> None:
    """Append ``value`` (a negative one as protobuf's 10-byte two's complement)."""
    value &= _UINT64
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def get_varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it.

    Raises:
        ValueError: truncated, or longer than 64 bits.
    """
    result = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("truncated or overlong varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
