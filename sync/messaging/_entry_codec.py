"""How topic compaction looks inside stored entries (docs/entry-design.md): a seam.

A stored entry (``--entry-format entry``) is one Kafka record holding a client's whole
batch; its messages may have different keys. Pulsar's two-phase compactor keeps the
latest message per key *inside* batches (``RawBatchConverter.extractIdsAndKeysAndSize``
and ``rebatchMessage``), so the compactor here must read an entry's messages and rebuild a
batch from some of them. The bytes are Pulsar's ``MessageMetadata`` and
``SingleMessageMetadata`` protobufs, compressed as the client sent them: a front end's
knowledge (the binary protocol's), handed to the engine as an :class:`EntryCodec`. Without
one, an entry is compacted as one message by its Kafka key (the batch's key).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

__all__ = ["EntryCodec", "EntryMessage", "ack_set_words", "kept_of_words"]


@dataclass(frozen=True, slots=True)
class EntryMessage:
    """One message of a stored entry, as compaction sees it.

    ``index`` is its batch index (-1: the entry is compacted as one message: not a batch,
    or a batch Pulsar cannot read, i.e. encrypted); ``key`` its partition key as UTF-8
    bytes (None: keyless, never in the compacted view); ``size`` its payload size (0: an
    empty or null value, which deletes the key, as Pulsar's compactor decides by size).
    """

    index: int
    key: bytes | None
    size: int


class EntryCodec(Protocol):
    """Reads and rebuilds stored entries for compaction (blocking, pure functions)."""

    def messages(self, value: bytes) -> list[EntryMessage]:
        """The messages of a stored entry (one with index -1 if it is compacted whole).

        Raises:
            ValueError: the entry does not parse (it is left out of the compacted view).
        """
        ...

    def single(self, value: bytes, index: int) -> bytes:
        """Message ``index`` of a stored batch alone, as a stored entry of one message
        (the batch's metadata, uncompressed)."""
        ...

    def rebatch(self, singles: Mapping[int, bytes], size: int) -> bytes:
        """A stored batch of ``size`` messages from one-message entries made by
        :meth:`single` (by batch index): every other index is marked ``compacted_out``
        with an empty payload, as Pulsar's ``RawBatchConverter.rebatchMessage`` does, so
        the messages keep their batch indexes."""
        ...


def ack_set_words(kept: set[int] | frozenset[int], size: int) -> list[int]:
    """Pulsar's ``ack_set`` (``BitSet.toLongArray``: signed 64-bit words, bit i of word
    i//64) with the bits of ``kept`` set: the indexes a consumer is still to get."""
    words = [0] * ((size + 63) // 64)
    for index in kept:
        words[index // 64] |= 1 << (index % 64)
    return [w - (1 << 64) if w >= 1 << 63 else w for w in words]


def kept_of_words(words: list[int]) -> set[int]:
    """The inverse of :func:`ack_set_words`."""
    out: set[int] = set()
    for n, word in enumerate(words):
        bits = word & ((1 << 64) - 1)
        while bits:
            low = bits & -bits
            out.add(n * 64 + low.bit_length() - 1)
            bits ^= low
    return out
