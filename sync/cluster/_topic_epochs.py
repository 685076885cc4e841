"""Pulsar's topic epochs, durable: the epoch exclusive producers hold a topic under, as one
registry record per topic name (the record; its reads and writes are
:mod:`._topic_epoch_store`).

Pulsar 4.0.7 keeps a topic's epoch (``AbstractTopic.topicEpoch``) in its managed ledger's
properties: ``PersistentTopic.setTopicEpoch`` writes the property ``pulsar.topic.epoch``
before the exclusive producer is answered (``incrementTopicEpoch`` is the current epoch
plus one, -1 when there is none), and the topic reads it back when it is loaded again, on
the same broker after a restart or on the next owner of its bundle. So an exclusive
producer that comes back presenting an epoch another exclusive producer has moved past
since is fenced ("Topic epoch has already moved…"), wherever the topic is served then.

Here that property is the registry record ``epoch/<canonical topic>`` (:func:`epoch_key`;
a partition's name, or the name a producer used)::

    {"topic": "persistent://t/ns/orders-partition-0", "epoch": 3}

written by the one fenced metadata writer (:class:`~._metadata.MetadataWriter`) and read
by every sidecar's :class:`~._metadata.MetadataStore`. The decision (fence the producer, or
the epoch it holds the topic under) runs inside the write, on a view that holds every
committed epoch: the next epoch is above every one given before, by any sidecar. A
producer that takes the epoch it presents back (the one the topic is at) writes nothing.
Deleting a topic deletes its epochs, as Pulsar deletes the ledger with its properties
(:meth:`~._admin.ClusterAdmin.delete_topic`).
"""

from __future__ import annotations

from dataclasses import dataclass

from sync._constants import REGISTRY_KEY_EPOCH
from sync._errors import CodecError
from sync.naming._names import TopicName

from ._records import decode_json, encode_json

__all__ = ["TopicEpoch", "epoch_key"]


def epoch_key(topic: TopicName) -> str:
    """Registry key of the epoch of ``topic`` (the name itself: each partition has its own,
    as each is a topic with its own ledger in Pulsar)."""
    return f"{REGISTRY_KEY_EPOCH}{topic.canonical}"


@dataclass(frozen=True, slots=True)
class TopicEpoch:
    """One topic name's epoch, as the registry holds it."""

    #: The canonical topic name.
    topic: str
    epoch: int

    def to_json(self) -> bytes:
        """The record's value in the registry topic."""
        return encode_json({"topic": self.topic, "epoch": self.epoch})

    @classmethod
    def from_json(cls, raw: bytes) -> TopicEpoch:
        """Decode a value written by :meth:`to_json`.

        Raises:
            CodecError: not a topic epoch (a topic name and an epoch >= 0).
        """
        d = decode_json(raw, "topic epoch")
        topic, epoch = d.get("topic"), d.get("epoch")
        if not isinstance(topic, str) or isinstance(epoch, bool) or not isinstance(epoch, int):
            raise CodecError(f"topic epoch: needs a topic and an integer epoch, got {d!r}")
        if epoch < 0:
            raise CodecError(f"topic epoch of {topic}: {epoch} is negative")
        return cls(topic, epoch)
