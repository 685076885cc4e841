"""Where topic epochs are kept: the seam to a durable store (implemented elsewhere).

Pulsar's topic epoch (``PRODUCER_SUCCESS.topic_epoch``) is the epoch a topic's exclusive
producer holds it under; the next exclusive producer takes the next one, and a producer
that comes back presenting an older epoch is fenced (``_admission.admit_topic_epoch``).
Pulsar keeps it in the topic's managed-ledger properties, so it outlives the broker that
served the topic. The engine asks a :class:`TopicEpochStore`: the sidecar's is the
registry (:class:`sync.cluster.ClusterService`'s ``epochs``: a compacted Kafka topic,
written by the one fenced metadata writer), which survives restarts and bundle moves;
:class:`MemoryTopicEpochs`, the default, keeps them in this process only (unit tests, and
a sidecar that runs without the cluster service, ``--no-lookup``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from sync.naming._names import TopicName

__all__ = ["MemoryTopicEpochs", "TopicEpochStore"]


@runtime_checkable
class TopicEpochStore(Protocol):
    """Keeps each topic name's epoch (a partition's, or the name a producer used)."""

    def current(self, topic: TopicName) -> int | None:
        """The epoch ``topic`` is at (None: no exclusive producer ever held it), from what
        is already known here: no I/O."""
        ...

    def take(self, topic: TopicName, decide: Callable[[int | None], int]) -> int:
        """Store and return the epoch ``decide`` gives for the current one (read where
        every epoch stored before, by any sidecar, is seen); when ``decide`` raises,
        nothing changes and the error propagates. May block (call it off the loop)."""
        ...


class MemoryTopicEpochs:
    """Topic epochs in this process only (lost with it)."""

    def __init__(self) -> None:
        self._epochs: dict[str, int] = {}
        self._lock = threading.Lock()

    def current(self, topic: TopicName) -> int | None:
        """The epoch ``topic`` is at here."""
        return self._epochs.get(topic.canonical)

    def take(self, topic: TopicName, decide: Callable[[int | None], int]) -> int:
        """Decide and keep ``topic``'s epoch."""
        with self._lock:
            epoch = decide(self._epochs.get(topic.canonical))
            self._epochs[topic.canonical] = epoch
            return epoch
