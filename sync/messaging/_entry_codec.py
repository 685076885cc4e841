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

__all__ = ["EntryCodec", "EntryMessage"]


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
