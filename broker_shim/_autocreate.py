"""Who creates a topic that auto-creation allows (the engine decides, this writes).

With the cluster registry, an auto-created topic is created exactly as the admin API
creates one (a registry record every sidecar sees, and its Kafka topic); without it, a
topic is its Kafka topic. Another client or sidecar creating the same topic first is
not an error.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from sync import ConflictError, TopicName, kafka_topic_of
from sync.messaging import TopicCreator
from sync.transport import TopicSpec

from ._lookup_http import CLUSTER_KEY
from ._sidecar import Sidecar

__all__ = ["topic_creator"]


def topic_creator(app: web.Application, sidecar: Sidecar) -> TopicCreator:
    """The creator of auto-created topics for ``app``'s sidecar."""

    async def create(topic: TopicName, partitions: int) -> None:
        if CLUSTER_KEY in app:
            cluster = app[CLUSTER_KEY].service
            await cluster.lookups.refresh()  # see the namespace and topics of other sidecars
            if cluster.store.topic(topic) is not None:
                return
            try:
                await asyncio.to_thread(cluster.admin.create_topic, topic, partitions)
            except ConflictError:
                return  # created meanwhile
            return
        spec = TopicSpec(kafka_topic_of(topic), max(1, partitions))
        await asyncio.to_thread(sidecar.transport.admin().ensure_topic, spec)

    return create
