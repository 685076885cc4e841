"""Who creates a topic that auto-creation allows (the engine decides, this writes).

With the cluster registry, an auto-created topic is created exactly as the admin API
creates one (a registry record every sidecar sees, and its Kafka topic); without it, a
topic is its Kafka topic. Another client or sidecar creating the same topic first is
not an error.
"""

from __future__ import annotations

import asyncio

from sync import ConflictError, TopicName, kafka_topic_of
from sync.messaging import TopicCreator
from sync.transport import TopicSpec, Transport

from ._live_cluster import LiveCluster

__all__ = ["topic_creator"]


def topic_creator(cluster: LiveCluster | None, transport: Transport) -> TopicCreator:
    """The creator of auto-created topics: in ``cluster``'s registry, or (without one)
    directly in Kafka through ``transport``."""

    async def create(topic: TopicName, partitions: int) -> None:
        if cluster is not None:
            service = cluster.service
            await service.lookups.refresh()  # see the namespace and topics of other sidecars
            if service.store.topic(topic) is not None:
                return
            try:
                await asyncio.to_thread(service.admin.create_topic, topic, partitions)
            except ConflictError:
                return  # created meanwhile
            return
        spec = TopicSpec(kafka_topic_of(topic), max(1, partitions))
        await asyncio.to_thread(transport.admin().ensure_topic, spec)

    return create
