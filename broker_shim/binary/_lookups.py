"""Lookups of one connection: PARTITIONED_METADATA, LOOKUP, GET_TOPICS_OF_NAMESPACE
(Pulsar's ``ServerCnx.handleLookup`` and friends, over the cluster service). GET_SCHEMA
and GET_OR_CREATE_SCHEMA are :mod:`._schemas`'."""

from __future__ import annotations

from sync import NamespaceName, TopicName
from sync.cluster import TopicOperation
from sync.errors import AuthorizationError, PolicySyncError, UnavailableError

from . import PulsarApi_pb2 as api
from . import _commands as commands
from ._context import Session, parse_topic

__all__ = ["Lookups"]

#: Pulsar's refusal of PARTITIONED_METADATA to a role that may not look the topic up
#: (``ServerCnx.handlePartitionMetadataRequest``; a LOOKUP says "… to Lookup").
PARTITION_METADATA_REFUSED = "Client is not authorized to Get Partition Metadata"


class Lookups:
    """Answers the lookup commands of one connection."""

    def __init__(self, session: Session) -> None:
        self.session = session

    async def on_partitioned_metadata(self, cmd: api.BaseCommand) -> None:
        session = self.session
        ctx = session.ctx
        m = cmd.partitionMetadata
        try:
            topic = parse_topic(m.topic)
            try:
                session.authorize(topic, TopicOperation.LOOKUP)
            except AuthorizationError:  # Pulsar's handlePartitionMetadataRequest's words
                raise AuthorizationError(PARTITION_METADATA_REFUSED) from None
            svc = ctx.cluster()
            if svc is not None:
                svc.require_ready()
                partitions = await svc.lookups.partitions_fresh(topic)
                if partitions == 0 and not topic.is_partition and svc.store.topic(topic) is None:
                    # Never created? Pulsar creates it here when the partitioned type is
                    # allowed, refuses it when auto-creation is off (TopicNotFound).
                    await ctx.engine.prepare_metadata(topic)
                    partitions = await svc.lookups.partitions_fresh(topic)
            else:
                partitions = await self._kafka_partitions(topic)
            out = commands.partitioned_metadata_response(m.request_id, partitions)
        except PolicySyncError as exc:
            out = commands.partitioned_metadata_failed(m.request_id, exc)
        session.write_command(out)

    async def _kafka_partitions(self, topic: TopicName) -> int:
        """Without a cluster registry: Kafka's partition count (1 means not partitioned)."""
        if topic.is_partition:
            return 0
        ctx = self.session.ctx
        await ctx.engine.prepare_metadata(topic)
        count = await ctx.last_ids.partitions(topic)
        return count if count is not None and count > 1 else 0

    async def on_lookup(self, cmd: api.BaseCommand) -> None:
        session = self.session
        ctx = session.ctx
        m = cmd.lookupTopic
        try:
            topic = parse_topic(m.topic)
            session.authorize(topic, TopicOperation.LOOKUP)
            svc = ctx.cluster()
            # Pulsar (TopicLookupBase.shouldRedirectThroughServiceUrl): a Redirect never
            # proxies; a Connect does when the broker runs standalone and advertises a
            # loopback address, so the client keeps using the address it reached us by.
            proxy = False
            listener = m.advertised_listener_name
            if svc is None:
                if listener:  # a standalone sidecar advertises no named listener
                    raise UnavailableError(f"the broker do not have {listener} listener")
                url, url_tls, local = ctx.advertised_url, ctx.advertised_url_tls, True
                proxy = ctx.advertises_loopback
            else:
                svc.require_ready()
                await svc.lookups.layout_fresh(topic.namespace_name)
                live = await svc.lookups.owner_of(topic)
                local = (
                    live.broker_id == svc.identity.broker_id and live.incarnation == svc.incarnation
                )
                reg = live.registration
                url, url_tls = reg.service_url, reg.service_url_tls
                if listener:
                    # Pulsar (NamespaceService.createLookupResult): a name the owner does
                    # not advertise fails the lookup with ServiceNotReady.
                    named = reg.advertised_listeners.get(listener)
                    if named is None:
                        raise UnavailableError(f"the broker do not have {listener} listener")
                    url = named.service_url or url
                    url_tls = named.service_url_tls or url_tls
            out = commands.lookup_response(
                m.request_id, url, local=local, proxy=proxy, url_tls=url_tls
            )
        except PolicySyncError as exc:
            out = commands.lookup_failed(m.request_id, exc)
        session.write_command(out)

    async def on_topics_of_namespace(self, cmd: api.BaseCommand) -> None:
        session = self.session
        m = cmd.getTopicsOfNamespace
        try:
            namespace = NamespaceName.parse(m.namespace)
            svc = session.ctx.cluster()
            if svc is None:
                raise UnavailableError(
                    "GET_TOPICS_OF_NAMESPACE needs the cluster registry: run the sidecar "
                    "with lookups enabled"
                )
            svc.require_ready()
            await svc.lookups.refresh()
            prefix = f"/{namespace.tenant}/{namespace.namespace}/"
            names = [t for t in svc.admin.topics() if prefix in t]
            if m.mode == api.CommandGetTopicsOfNamespace.PERSISTENT:
                names = [t for t in names if t.startswith("persistent://")]
            elif m.mode == api.CommandGetTopicsOfNamespace.NON_PERSISTENT:
                names = [t for t in names if t.startswith("non-persistent://")]
        except PolicySyncError as exc:
            session.error(m.request_id, exc)
            return
        session.write_command(commands.topics_of_namespace(m.request_id, names))
