"""Stored entries (a Pulsar client's batch kept as one record, docs/entry-design.md) for
WebSocket consumers: each message of an entry goes out as its own JSON frame, with an id
carrying its batch index, and each acknowledgement is a batch-index acknowledgement of its
entry in the engine, which keeps the acknowledged indexes (and commits them) and
acknowledges the entry once all its messages are: one mechanism for binary and WebSocket
consumers. A redelivered entry leaves out the messages acknowledged already (as Pulsar's
dispatcher does with ``acknowledgmentAtBatchIndexLevelEnabled``). A negative
acknowledgement of any of its messages redelivers the entry's unacknowledged messages,
marked as redelivered."""

from __future__ import annotations

import binascii
from typing import Any

from broker_shim.binary import EntryError, decode_entry, entry_count_of
from sync.messaging import Delivery, MessageId
from sync.messaging.headers import HEADER_COMPACTED_KEPT

from ._frames import iso, json_dumps

__all__ = ["EntryAcks", "EntryError"]


class EntryAcks:
    """The messages of stored entries out with one WebSocket consumer, by their text id:
    the entry, the message's batch index and the entry's size."""

    def __init__(self) -> None:
        self._sent: dict[str, tuple[MessageId, int, int]] = {}

    def frames(self, delivery: Delivery) -> list[str]:
        """The JSON frames of an entry's messages not acknowledged yet (remembered for
        their acks).

        Raises:
            EntryError: the entry does not parse (the caller quarantines it).
        """
        if entry_count_of(delivery.entry.headers) < 1:
            raise EntryError("stored entry of an unknown format version")
        metadata, messages = decode_entry(delivery.entry.payload)
        mid = delivery.message_id
        count = delivery.entry.count
        kept = _kept_of(delivery.entry.headers)
        if kept is not None and kept.bit_count() == len(messages):
            # A batch rebuilt by the compacted view: the messages left are those of the
            # kept batch indexes (compacted_out ones are not unpacked).
            indexes = [i for i in range(count) if kept >> i & 1]
            size, acked = count, delivery.acked_bits
        elif len(messages) == count:
            indexes, size, acked = list(range(count)), count, delivery.acked_bits
        else:
            # An encrypted batch or a chunk is one message here: nothing of it is left out.
            indexes, size, acked = list(range(len(messages))), len(messages), 0
        publish = iso(metadata.publish_time or max(0, delivery.entry.publish_ms))
        out: list[str] = []
        for index, msg in zip(indexes, messages, strict=True):
            if acked >> index & 1:
                continue  # acknowledged by batch index before this delivery
            text_id = mid.batch_base64(index, size)
            self._sent[text_id] = (mid, index, size)
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
        return out

    def ack(self, text_id: str) -> tuple[MessageId, int] | None:
        """The batch-index acknowledgement for the message ``text_id``: its entry and the
        entry's ack set (every index but this one, see :meth:`Consumer.ack`); None if the
        id is not one of an entry's messages out with the client."""
        found = self._sent.pop(text_id, None)
        if found is None:
            return None
        mid, index, size = found
        return mid, ((1 << size) - 1) & ~(1 << index)

    def nack(self, text_id: str) -> MessageId | None:
        """The entry to redeliver for a negative acknowledgement of ``text_id`` (its
        unacknowledged messages come again, with new frames)."""
        found = self._sent.pop(text_id, None)
        return None if found is None else found[0]

    def knows(self, text_id: str) -> bool:
        return text_id in self._sent

    def clear(self) -> None:
        self._sent.clear()

    def __len__(self) -> int:
        return len(self._sent)


def _kept_of(headers: list[tuple[str, bytes]] | None) -> int | None:
    """The kept batch indexes (a bit mask) of a batch the compacted view rebuilt."""
    for name, raw in headers or ():
        if name == HEADER_COMPACTED_KEPT:
            try:
                return int(raw, 16)
            except ValueError:
                return None
    return None
