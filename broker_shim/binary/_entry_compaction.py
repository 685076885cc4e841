"""What topic compaction needs to read inside stored entries (the engine's
:class:`sync.messaging.EntryCodec`), as Pulsar's ``RawBatchConverter`` reads batches.

* :meth:`EntryCompaction.messages`: a readable batch (``num_messages_in_batch`` set, no
  encryption keys: ``isReadableBatch``) gives each message's key and payload size
  (``extractIdsAndKeysAndSize``; messages already ``compacted_out`` are skipped); anything
  else (an unbatched message, an encrypted batch, a chunk) is one message under the
  entry's ``partition_key``, its size the uncompressed size (``extractKeyAndSize``).
* :meth:`EntryCompaction.single` and :meth:`EntryCompaction.rebatch`: the compactor
  stores each kept message of a batch on its own, and the compacted view rebuilds the
  batch with every other index replaced by ``SingleMessageMetadata(compacted_out=true)``
  and an empty payload (``rebatchMessage``), so the messages keep their batch indexes.
  Unlike Pulsar, the rebuilt batch is stored uncompressed (Pulsar compresses it again with
  the batch's codec); its messages are the same.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

from google.protobuf.message import DecodeError

from sync.messaging import EntryMessage

from . import PulsarApi_pb2 as api
from ._entries import EntryError, entry_metadata
from ._framing import FrameError, decompress

__all__ = ["EntryCompaction"]

_U32 = struct.Struct(">I")
_COMPACTED_OUT = api.SingleMessageMetadata(compacted_out=True, payload_size=0).SerializeToString()


def _batch(value: bytes) -> tuple[api.MessageMetadata, bytes]:
    """The metadata and the uncompressed batch payload of a stored entry.

    Raises:
        ValueError: the entry or its payload does not parse.
    """
    try:
        metadata, start = entry_metadata(value)
        return metadata, decompress(metadata, value[start:])
    except (EntryError, FrameError) as exc:
        raise ValueError(str(exc)) from None


def _walk(data: bytes, count: int) -> list[tuple[api.SingleMessageMetadata, int, int]]:
    """Each message of a batch payload: its metadata, and where its record starts and
    ends (``[u32 size][SingleMessageMetadata][payload]``).

    Raises:
        ValueError: the batch does not parse.
    """
    out: list[tuple[api.SingleMessageMetadata, int, int]] = []
    pos, total = 0, len(data)
    for index in range(count):
        if total - pos < 4:
            raise ValueError(f"batch truncated at message {index} of {count}")
        (size,) = _U32.unpack_from(data, pos)
        end = pos + 4 + size
        if size == 0 or end > total:
            raise ValueError(f"batch message {index}: metadata size {size} does not fit")
        single = api.SingleMessageMetadata()
        try:
            single.ParseFromString(data[pos + 4 : end])
        except (DecodeError, ValueError, RuntimeError) as exc:
            raise ValueError(f"batch message {index}: undecodable metadata: {exc}") from None
        stop = end + single.payload_size
        if single.payload_size < 0 or stop > total:
            raise ValueError(f"batch message {index}: payload size does not fit")
        out.append((single, pos, stop))
        pos = stop
    return out


def _entry(metadata: api.MessageMetadata, payload: bytes) -> bytes:
    raw = metadata.SerializeToString()
    return b"".join((_U32.pack(len(raw)), raw, payload))


class EntryCompaction:
    """Pulsar's batch reading and rebatching for the compactor (stateless)."""

    def messages(self, value: bytes) -> list[EntryMessage]:
        """See :meth:`sync.messaging.EntryCodec.messages`."""
        try:
            metadata, start = entry_metadata(value)
        except EntryError as exc:
            raise ValueError(str(exc)) from None
        if not metadata.HasField("num_messages_in_batch") or len(metadata.encryption_keys):
            key = metadata.partition_key.encode() if metadata.HasField("partition_key") else None
            size = len(value) - start
            if metadata.HasField("uncompressed_size"):
                size = metadata.uncompressed_size
            return [EntryMessage(-1, key, size)]
        _, data = _batch(value)
        out: list[EntryMessage] = []
        for index, (single, _, _) in enumerate(_walk(data, metadata.num_messages_in_batch)):
            if single.compacted_out:
                continue
            key = single.partition_key.encode() if single.HasField("partition_key") else None
            out.append(EntryMessage(index, key, single.payload_size))
        return out

    def single(self, value: bytes, index: int) -> bytes:
        """See :meth:`sync.messaging.EntryCodec.single`."""
        metadata, data = _batch(value)
        walked = _walk(data, metadata.num_messages_in_batch)
        if not 0 <= index < len(walked):
            raise ValueError(f"no message {index} in a batch of {len(walked)}")
        _, begin, end = walked[index]
        record = data[begin:end]
        metadata.num_messages_in_batch = 1
        metadata.compression = api.NONE
        metadata.uncompressed_size = len(record)
        return _entry(metadata, record)

    def rebatch(self, singles: Mapping[int, bytes], size: int) -> bytes:
        """See :meth:`sync.messaging.EntryCodec.rebatch`."""
        metadata: api.MessageMetadata | None = None
        records: dict[int, bytes] = {}
        for index, value in singles.items():
            meta, data = _batch(value)
            if meta.num_messages_in_batch != 1 or not 0 <= index < size:
                raise ValueError(f"message {index} is not one message of a batch of {size}")
            _, begin, end = _walk(data, 1)[0]
            records[index] = data[begin:end]
            metadata = metadata or meta
        if metadata is None:
            raise ValueError("nothing to rebatch")
        placeholder = _U32.pack(len(_COMPACTED_OUT)) + _COMPACTED_OUT
        payload = b"".join(records.get(i, placeholder) for i in range(size))
        metadata.num_messages_in_batch = size
        metadata.compression = api.NONE
        metadata.uncompressed_size = len(payload)
        return _entry(metadata, payload)
