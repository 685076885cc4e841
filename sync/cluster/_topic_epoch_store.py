"""The topics' epochs in the registry (see :mod:`._topic_epochs` for the record and
Pulsar's behaviour): read from the sidecar's view, decided and written by the one fenced
metadata writer, as :class:`sync.messaging.TopicEpochStore` asks."""

from __future__ import annotations

import logging
from collections.abc import Callable

from sync.naming._names import TopicName

from ._metadata import Change, MetadataStore, MetadataWriter
from ._topic_epochs import TopicEpoch, epoch_key

logger = logging.getLogger(__name__)

__all__ = ["RegistryTopicEpochs"]


class RegistryTopicEpochs:
    """The topics' epochs of the registry."""

    def __init__(self, store: MetadataStore, writer: MetadataWriter) -> None:
        self.store = store
        self.writer = writer

    def current(self, topic: TopicName) -> int | None:
        """``topic``'s epoch as this sidecar's view has it (None: no exclusive producer
        ever held it), without I/O: what a Shared producer is told."""
        return self.store.epochs.get(topic.canonical)

    def take(self, topic: TopicName, decide: Callable[[int | None], int]) -> int:
        """Store the epoch ``decide`` gives for ``topic``'s current one (None: none yet),
        decided on a view holding every committed epoch, and return it; a ``decide`` that
        raises (the producer is fenced) writes nothing. Blocks on Kafka.

        Raises:
            whatever ``decide`` raises; WriteConflictError or KafkaUnavailableError when
            the write could not be made in time.
        """
        key = epoch_key(topic)
        name = topic.canonical

        def change(store: MetadataStore) -> Change[tuple[int, int | None]]:
            current = store.epochs.get(name)
            epoch = decide(current)
            if epoch == current:
                return Change({}, (epoch, current))
            return Change({key: TopicEpoch(name, epoch).to_json()}, (epoch, current))

        epoch, before = self.writer.update(change)
        if epoch != before:
            logger.info("topic epoch of %s: %s -> %d", topic, before, epoch)
        return epoch
