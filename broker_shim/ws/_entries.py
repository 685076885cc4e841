"""Stored entries (a Pulsar client's batch kept as one record, docs/entry-design.md) for
WebSocket consumers: each message of an entry goes out as its own JSON frame, with an id
carrying its batch index, and the entry is acknowledged once all its messages are — what
Pulsar's WebSocket proxy does through its Java client (batch-index acknowledgements off).
A negative acknowledgement of any of its messages redelivers the whole entry, marked as
redelivered."""

from __future__ import annotations

import binascii
from typing import Any

from broker_shim.binary import EntryError, decode_entry, entry_count_of
from sync.messaging import Delivery, MessageId

from ._frames import iso, json_dumps

__all__ = ["EntryAcks", "EntryError"]


class EntryAcks:
    """The messages of stored entries out with one WebSocket consumer, by their text id,
    and the indexes of each entry not yet acknowledged."""

    def __init__(self) -> None:
        self._sent: dict[str, tuple[MessageId, int]] = {}
        self._pending: dict[MessageId, set[int]] = {}

    def frames(self, delivery: Delivery) -> list[str]:
        """The JSON frames of an entry's messages (remembered for their acks).

        Raises:
            EntryError: the entry does not parse (the caller quarantines it).
        """
        if entry_count_of(delivery.entry.headers) < 1:
            raise EntryError("stored entry of an unknown format version")
        metadata, messages = decode_entry(delivery.entry.payload)
        mid = delivery.message_id
        size = len(messages)
        publish = iso(metadata.publish_time or max(0, delivery.entry.publish_ms))
        out: list[str] = []
        for index, msg in enumerate(messages):
            text_id = mid.batch_base64(index, size)
            self._sent[text_id] = (mid, index)
            frame: dict[str, Any] = {
                "messageId": text_id,
                "payload": binascii.b2a_base64(msg.payload, newline=False).decode("ascii"),
                "properties": dict(msg.properties or {}),
                "publishTime": publish,
                "redeliveryCount": delivery.redelivery_count,
            }
            if msg.event_time_ms:
                frame["eventTime"] = iso(msg.event_time_ms)
            if msg.key is not None:
                frame["key"] = msg.key
            out.append(json_dumps(frame))
        self._pending[mid] = set(range(size))
        return out

    def ack(self, text_id: str) -> MessageId | None:
        """The entry to acknowledge now that the message ``text_id`` is (None: the entry
        still has messages out, or the id is not one of an entry's)."""
        found = self._sent.pop(text_id, None)
        if found is None:
            return None
        mid, index = found
        left = self._pending.get(mid)
        if left is None:
            return None
        left.discard(index)
        if left:
            return None
        del self._pending[mid]
        return mid

    def nack(self, text_id: str) -> MessageId | None:
        """The entry to redeliver for a negative acknowledgement of ``text_id`` (its other
        messages' ids are forgotten: they come again with the entry)."""
        found = self._sent.pop(text_id, None)
        if found is None:
            return None
        mid = found[0]
        self._pending.pop(mid, None)
        return mid

    def knows(self, text_id: str) -> bool:
        return text_id in self._sent

    def clear(self) -> None:
        self._sent.clear()
        self._pending.clear()

    def __len__(self) -> int:
        return len(self._sent)
