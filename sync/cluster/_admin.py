"""Admin operations on namespaces, bundles, topics, KV config and write perms.

Every metadata change is a fenced read-modify-write through
:class:`~sync.cluster._metadata.MetadataWriter` ("decide before you write"):
validation and conflict checks run on a view that holds every committed write, so a
refused request writes nothing. Ownership changes (unload, post-split cleanup) are
*requests* to the bundle's slot owner, the only one allowed to write its record.

Why this file is past 600 lines: it is one role, the cluster's admin surface (tenants,
namespaces and bundles, topics, KV config, write perms), each operation a short decision
on the same fenced view of the metadata; split by resource, the parts would share every
import, the writer and the request seam while the record shapes and the writer are already
:mod:`._records`' and :mod:`._metadata`'s.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import time
from collections.abc import Callable, Sequence

from sync._errors import (
    ConflictError,
    InvalidInputError,
    NotAcceptableError,
    NotFoundError,
    TopicConfigurationMismatch,
    UnavailableError,
    UnprocessableError,
)
from sync.naming._bundles import NamespaceBundles, SplitAlgorithm, topic_hash
from sync.naming._kafka_names import compacted_topic_of, kafka_topic_of
from sync.naming._names import PARTITION_SUFFIX, NamespaceName, TopicName, parse_topic_cached
from sync.transport import TopicSpec, Transport

from ._lookup import LookupService, namespace_missing
from ._metadata import Change, MetadataStore, MetadataWriter
from ._ns_replication_record import replication_key
from ._ownership_model import RequestOp
from ._ownership_table import OwnershipTable
from ._permissions import auth_key
from ._records import (
    PERM_READ,
    BundleState,
    TenantRecord,
    TopicRecord,
    WritePerm,
    encode_layout,
    kv_key,
    namespace_key,
    perm_key,
    tenant_key,
    topic_key,
)
from ._schemas import schema_key
from ._topic_epochs import epoch_key

logger = logging.getLogger(__name__)

__all__ = ["ClusterAdmin"]

#: How the admin asks a bundle's slot owner to act (``OwnershipMember.request``).
RequestFn = Callable[[RequestOp, str], None]

#: Pulsar's maximum number of bundles a namespace may be created with.
_MAX_BUNDLES = 2**31 - 1
#: Kafka's partition count is a 32-bit int (and Pulsar's a Java int).
_MAX_PARTITIONS = 2**31 - 1
#: Pulsar's NamedEntity rule for tenant names.
_TENANT_NAME = re.compile(r"^[-=:.\w]+$")


def _supported_algorithms() -> str:
    return "[" + ", ".join(a.value for a in SplitAlgorithm) + "]"


def _check_partitions_max(partitions: int) -> None:
    if partitions > _MAX_PARTITIONS:
        raise InvalidInputError(
            f"Number of partitions {partitions} is over the maximum {_MAX_PARTITIONS}"
        )


class ClusterAdmin:
    """Namespace, bundle, topic and NameServer administration for one cluster."""

    def __init__(
        self,
        transport: Transport,
        store: MetadataStore,
        writer: MetadataWriter,
        ownership: OwnershipTable,
        lookups: LookupService,
        request: RequestFn,
        *,
        cluster: str,
        default_bundles: int = 4,
        replication_factor: int = -1,
        timeout_s: float = 30.0,
    ) -> None:
        self._transport = transport
        self.store = store
        self.writer = writer
        self.ownership = ownership
        self.lookups = lookups
        self._request = request
        self.cluster = cluster
        self.default_bundles = default_bundles
        self.replication_factor = replication_factor
        self.timeout_s = timeout_s

    # -- tenants -------------------------------------------------------------------------
    def create_tenant(
        self, tenant: str, admin_roles: Sequence[str], allowed_clusters: Sequence[str]
    ) -> TenantRecord:
        """Create a tenant (Pulsar ``PUT /admin/v2/tenants/{tenant}``).

        Raises:
            InvalidInputError: "Tenant name is not valid" / "Clusters do not exist".
            ConflictError: "Tenant already exist".
        """
        record = self._tenant_record(tenant, admin_roles, allowed_clusters)

        def decide(store: MetadataStore) -> Change[TenantRecord]:
            if tenant in store.tenants:
                raise ConflictError("Tenant already exist")
            return Change({tenant_key(tenant): record.to_json()}, record)

        created = self.writer.update(decide)
        logger.info("created tenant %s", tenant)
        return created

    def update_tenant(
        self, tenant: str, admin_roles: Sequence[str], allowed_clusters: Sequence[str]
    ) -> TenantRecord:
        """Replace a tenant's roles and clusters (Pulsar ``POST /admin/v2/tenants/{tenant}``).

        Raises:
            InvalidInputError: bad name or unknown clusters.
            NotFoundError: "Tenant does not exist".
        """
        record = self._tenant_record(tenant, admin_roles, allowed_clusters)

        def decide(store: MetadataStore) -> Change[TenantRecord]:
            if tenant not in store.tenants:
                raise NotFoundError("Tenant does not exist")
            return Change({tenant_key(tenant): record.to_json()}, record)

        return self.writer.update(decide)

    def _tenant_record(
        self, tenant: str, admin_roles: Sequence[str], allowed_clusters: Sequence[str]
    ) -> TenantRecord:
        if not _TENANT_NAME.match(tenant):
            raise InvalidInputError("Tenant name is not valid")
        known = {self.cluster, *self.lookups.registry.clusters(), *self.store.clusters}
        if any(c not in known for c in allowed_clusters):
            raise InvalidInputError("Clusters do not exist")
        return TenantRecord(tenant, tuple(admin_roles), tuple(allowed_clusters))

    def ensure_tenant(self, tenant: str) -> None:
        """Create ``tenant`` (allowed in this cluster) unless it exists."""
        if tenant in self.store.tenants:
            return
        try:
            self.create_tenant(tenant, (), (self.cluster,))
        except ConflictError:
            pass

    def tenant(self, tenant: str) -> TenantRecord:
        """Raises NotFoundError "Tenant does not exist"."""
        record = self.store.tenants.get(tenant)
        if record is None:
            raise NotFoundError("Tenant does not exist")
        return record

    def tenants(self) -> list[str]:
        """Every tenant's name."""
        return sorted(self.store.tenants)

    def delete_tenant(self, tenant: str) -> None:
        """Delete an empty tenant.

        Raises:
            NotFoundError: "Tenant doesn't exist".
            ConflictError: "The tenant still has active namespaces".
        """

        def decide(store: MetadataStore) -> Change[None]:
            if tenant not in store.tenants:
                raise NotFoundError("Tenant doesn't exist")
            if any(ns.tenant == tenant for ns in list(store.layouts)):
                raise ConflictError("The tenant still has active namespaces")
            return Change({tenant_key(tenant): None}, None)

        self.writer.update(decide)
        logger.info("deleted tenant %s", tenant)

    # -- namespaces ----------------------------------------------------------------------
    def create_namespace(
        self,
        namespace: NamespaceName,
        *,
        num_bundles: int | None = None,
        boundaries: Sequence[str] | None = None,
        require_tenant: bool = False,
    ) -> NamespaceBundles:
        """Create a namespace with ``num_bundles`` equal bundles (or explicit boundaries).

        ``require_tenant``: refuse unless the tenant exists (Pulsar's REST API does;
        programmatic callers of earlier releases create namespaces without tenants).

        Raises:
            InvalidInputError: bad bundle count or boundaries.
            NotFoundError: "Tenant does not exist" (with ``require_tenant``).
            ConflictError: "Namespace already exists".
        """
        if boundaries is not None:
            try:
                values = [int(str(b), 16) for b in boundaries]
            except ValueError as exc:
                raise InvalidInputError(
                    f"Invalid bundle boundaries {list(boundaries)!r}: each must be a hex "
                    "string such as '0x40000000'"
                ) from exc
            bundles = NamespaceBundles.from_boundaries(namespace, values)
            if num_bundles is not None and num_bundles != len(bundles.bundles):
                raise InvalidInputError(
                    f"numBundles {num_bundles} does not match the {len(bundles.bundles)} "
                    "bundles the boundaries define"
                )
        else:
            count = self.default_bundles if num_bundles is None else num_bundles
            if (
                isinstance(count, bool)
                or not isinstance(count, int)
                or not 0 < count <= _MAX_BUNDLES
            ):
                raise InvalidInputError(
                    f"Invalid number of bundles {count!r}: it must be an int from 1 to "
                    f"{_MAX_BUNDLES}"
                )
            bundles = NamespaceBundles.default(namespace, count)

        def decide(store: MetadataStore) -> Change[NamespaceBundles]:
            if require_tenant and namespace.tenant not in store.tenants:
                raise NotFoundError("Tenant does not exist")
            if store.layout(namespace) is not None:
                raise ConflictError("Namespace already exists")
            return Change({namespace_key(namespace): encode_layout(bundles, 1)}, bundles)

        created = self.writer.update(decide)
        logger.info("created namespace %s with %d bundles", namespace, len(created.bundles))
        return created

    def ensure_namespace(self, namespace: NamespaceName) -> None:
        """Create ``namespace`` with the default bundles unless it exists."""
        if self.store.layout(namespace) is not None:
            return
        try:
            self.create_namespace(namespace)
        except ConflictError:
            pass

    def namespaces(self, tenant: str) -> list[str]:
        """Namespaces of ``tenant`` (``tenant/ns`` strings)."""
        return sorted(str(ns) for ns in list(self.store.layouts) if ns.tenant == tenant)

    def delete_namespace(self, namespace: NamespaceName) -> None:
        """Delete a namespace without topics (Pulsar ``DELETE /admin/v2/namespaces/…``).

        Raises:
            NotFoundError: "Namespace … does not exist.".
            ConflictError: "Cannot delete non empty namespace".
        """

        def decide(store: MetadataStore) -> Change[None]:
            if store.layout(namespace) is None:
                raise NotFoundError(f"Namespace {namespace} does not exist.")
            if any(parse_topic_cached(t).namespace_name == namespace for t in list(store.topics)):
                raise ConflictError("Cannot delete non empty namespace")
            writes: dict[str, bytes | None] = {namespace_key(namespace): None}
            if namespace in store.auth:  # its permissions go with it, as Pulsar's policies
                writes[auth_key(namespace)] = None
            if namespace in store.replication:  # and its replication clusters
                writes[replication_key(namespace)] = None
            return Change(writes, None)

        self.writer.update(decide)
        logger.info("deleted namespace %s", namespace)

    def split_bundle(
        self,
        namespace: NamespaceName,
        bundle: str,
        *,
        algorithm: str | None = None,
        unload: bool = False,
    ) -> tuple[str, str]:
        """Split one bundle (Pulsar ``splitNamespaceBundle``); returns the two new ranges.

        ``unload=False`` asks the new bundles' slot owners to claim them at once (Pulsar
        keeps them loaded); ``unload=True`` leaves them unowned until the next lookup.

        Raises:
            NotFoundError: no such namespace or bundle.
            InvalidInputError: unknown algorithm, or the bundle cannot be split.
        """
        name = (algorithm or "").strip() or SplitAlgorithm.RANGE_EQUALLY_DIVIDE.value
        try:
            chosen = SplitAlgorithm(name)
        except ValueError:
            raise InvalidInputError(
                "Unsupported namespace bundle split algorithm, supported algorithms are "
                + _supported_algorithms()
            ) from None

        # Whether the parent is owned decides what happens to the children: read it from
        # a view that holds every committed claim.
        self.ownership.table.sync(self.timeout_s)

        def decide(store: MetadataStore) -> Change[tuple[str, str, bool]]:
            layout = store.layout(namespace)
            if layout is None:
                raise namespace_missing(namespace)
            hashes = (
                self._topic_hashes(namespace)
                if chosen is SplitAlgorithm.TOPIC_COUNT_EQUALLY_DIVIDE
                else ()
            )
            new = layout.bundles.split(bundle, chosen, hashes)
            fresh = [
                b.name
                for b in new.bundles
                if b.name not in {x.name for x in layout.bundles.bundles}
            ]
            parent = self.ownership.get(f"{namespace}/{bundle}")
            owned = parent is not None and parent.state is BundleState.OWNED
            return Change(
                {namespace_key(namespace): encode_layout(new, layout.version + 1)},
                (fresh[0], fresh[1], owned),
            )

        low, high, was_owned = self.writer.update(decide)
        self._request(RequestOp.CLEANUP, f"{namespace}/{bundle}")
        if was_owned and not unload:
            for child in (low, high):
                self._request(RequestOp.ACQUIRE, f"{namespace}/{child}")
        logger.info("split bundle %s/%s into %s and %s (%s)", namespace, bundle, low, high, chosen)
        return low, high

    def _topic_hashes(self, namespace: NamespaceName) -> list[int]:
        hashes: list[int] = []
        for canonical, record in list(self.store.topics.items()):
            topic = parse_topic_cached(canonical)
            if topic.namespace_name != namespace:
                continue
            if record.partitions > 0:
                hashes.extend(topic_hash(topic.partition(i)) for i in range(record.partitions))
            else:
                hashes.append(topic_hash(topic))
        return hashes

    async def unload_bundle(self, namespace: NamespaceName, bundle: str) -> bool:
        """Ask the bundle's owner to unload it and wait until it did (or was unowned).

        Returns False if the bundle had no owner (Pulsar: nothing to do).

        Raises:
            NotFoundError: no such namespace or bundle.
        """
        layout = self.lookups.layout(namespace)
        full = f"{namespace}/{bundle}"
        if not layout.contains(full):
            raise NotFoundError(
                f"Namespace bundle {full} not found; current bundles: "
                f"{[n.rpartition('/')[2] for n in layout.names]}"
            )
        # Decide on a view holding every committed claim, not a lagging one.
        await asyncio.to_thread(self.ownership.table.sync, self.timeout_s)
        before = self.ownership.get(full)
        if before is None or before.state is not BundleState.OWNED:
            return False
        self._request(RequestOp.UNLOAD, full)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        while loop.time() < deadline:
            now = self.ownership.get(full)
            if now is None or now.version > before.version:
                return True
            await asyncio.sleep(0.02)
        raise UnavailableError(
            f"bundle {full} was not unloaded within {self.timeout_s:.0f}s; is its slot owner alive?"
        )

    async def unload_namespace(self, namespace: NamespaceName) -> int:
        """Unload every owned bundle of ``namespace``; returns how many were owned."""
        layout = self.lookups.layout(namespace)
        results = await asyncio.gather(
            *(self.unload_bundle(namespace, name.rpartition("/")[2]) for name in layout.names)
        )
        return sum(results)

    # -- topics -------------------------------------------------------------------------
    def create_topic(
        self,
        topic: TopicName,
        partitions: int,
        properties: dict[str, str] | None = None,
    ) -> TopicRecord:
        """Create a partitioned (``partitions`` > 0) or non-partitioned (0) topic and the
        Kafka topic backing it (:func:`sync.naming._kafka_names.kafka_topic_of`).

        Raises:
            NotAcceptableError: "Number of partitions should be more than 0".
            InvalidInputError: bad name, or more partitions than an int32 counts.
            NotFoundError: the namespace does not exist.
            ConflictError: "This topic already exists".
        """
        if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 0:
            raise NotAcceptableError("Number of partitions should be more than 0")
        _check_partitions_max(partitions)
        if topic.is_partition or PARTITION_SUFFIX in topic.local_name:
            raise InvalidInputError(
                f"Invalid topic name {topic}: a partitioned topic name should not contain "
                f"'{PARTITION_SUFFIX}'"
            )
        if self.store.layout(topic.namespace_name) is None:
            raise namespace_missing(topic.namespace_name)
        if self.store.topic(topic) is not None:
            raise ConflictError("This topic already exists")
        kafka_name = kafka_topic_of(topic)
        spec = TopicSpec(kafka_name, max(1, partitions), replication_factor=self.replication_factor)
        try:
            self._transport.admin().ensure_topic(spec, self.timeout_s)
        except TopicConfigurationMismatch as exc:
            raise ConflictError(
                f"This topic already exists: Kafka topic {kafka_name} has a different "
                f"partition count ({exc})"
            ) from exc
        record = TopicRecord(
            topic.canonical,
            partitions,
            kafka_name,
            int(time.time() * 1000),
            tuple(sorted((properties or {}).items())),
        )

        def decide(store: MetadataStore) -> Change[TopicRecord]:
            if store.layout(topic.namespace_name) is None:
                raise namespace_missing(topic.namespace_name)
            if store.topic(topic) is not None:
                raise ConflictError("This topic already exists")
            return Change({topic_key(topic): record.to_json()}, record)

        return self.writer.update(decide)

    def topics(self) -> list[str]:
        """Every topic created through the admin API."""
        return sorted(self.store.topics)

    def topics_of(self, namespace: NamespaceName) -> list[TopicRecord]:
        """The topics of ``namespace`` (Pulsar: 404 "Namespace does not exist")."""
        if self.store.layout(namespace) is None:
            raise NotFoundError("Namespace does not exist")
        return [
            record
            for name, record in sorted(list(self.store.topics.items()))
            if parse_topic_cached(name).namespace_name == namespace
        ]

    def update_partitions(self, topic: TopicName, partitions: int) -> TopicRecord:
        """Raise a partitioned topic's partition count (Pulsar ``POST …/partitions``).

        Raises:
            NotAcceptableError: fewer than 1.
            InvalidInputError: more partitions than an int32 counts.
            ConflictError: "Topic … is not the partitioned topic." (missing or not partitioned).
            UnprocessableError: "Desired partitions N can't be less than the current …".
        """
        if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
            raise NotAcceptableError("Number of partitions should be more than 0")
        _check_partitions_max(partitions)
        current = self.store.topic(topic)
        if current is None or current.partitions == 0:
            raise ConflictError(f"Topic {topic.base.canonical} is not the partitioned topic.")
        if partitions < current.partitions:
            raise UnprocessableError(
                f"Desired partitions {partitions} can't be less than the current partitions "
                f"{current.partitions}."
            )
        if partitions == current.partitions:
            return current
        self._transport.admin().grow_topic(current.kafka_topic, partitions, self.timeout_s)

        def decide(store: MetadataStore) -> Change[TopicRecord]:
            now = store.topic(topic)
            if now is None or now.partitions == 0:
                raise ConflictError(f"Topic {topic.base.canonical} is not the partitioned topic.")
            record = TopicRecord(
                now.topic, partitions, now.kafka_topic, now.created_ms, now.properties
            )
            return Change({topic_key(topic): record.to_json()}, record)

        return self.writer.update(decide)

    def delete_topic(self, topic: TopicName, *, partitioned: bool) -> None:
        """Delete a topic's record, then its Kafka topic (Pulsar ``DELETE`` of a topic, or
        of ``…/partitions`` with ``partitioned``). Its schema history, the grants on it
        and its partitions and their topic epochs go with it, as Pulsar 4.0.7 deletes them
        (a topic created again under the name starts without any).

        Raises:
            NotFoundError: "Topic … not found" (or the wrong kind of topic).
        """

        def decide(store: MetadataStore) -> Change[TopicRecord]:
            record = store.topic(topic)
            if record is None or (record.partitions > 0) != partitioned:
                raise NotFoundError(f"Topic {topic.base.canonical} not found")
            writes: dict[str, bytes | None] = {topic_key(topic): None}
            base = topic.base.canonical
            if base in store.schemas:
                writes[schema_key(topic)] = None
            for name in store.epochs:
                named = parse_topic_cached(name)
                if named.base.canonical == base:
                    writes[epoch_key(named)] = None
            grants = store.auth.get(topic.namespace_name)
            if grants is not None:
                kept = {
                    name: g
                    for name, g in grants.destination_auth.items()
                    if parse_topic_cached(name).base.canonical != base
                }
                if len(kept) != len(grants.destination_auth):
                    updated = dataclasses.replace(grants, destination_auth=kept)
                    writes[auth_key(topic.namespace_name)] = updated.to_json()
            return Change(writes, record)

        record = self.writer.update(decide)
        admin = self._transport.admin()
        admin.delete_topic(record.kafka_topic, self.timeout_s)
        companion = compacted_topic_of(record.kafka_topic)  # topic compaction's companion
        if admin.describe_topic(companion, self.timeout_s) is not None:
            admin.delete_topic(companion, self.timeout_s)
        logger.info("deleted topic %s (Kafka topic %s)", topic.base, record.kafka_topic)

    # -- KV config (RocketMQ NameServer) ------------------------------------------------
    def put_kv(self, namespace: str, key: str, value: str) -> None:
        """Set ``key`` in KV ``namespace``."""
        _check_kv(namespace, key)
        self.writer.update(lambda _s: Change({kv_key(namespace, key): value.encode("utf-8")}, None))

    def get_kv(self, namespace: str, key: str) -> str:
        """The value of ``key`` in KV ``namespace``.

        Raises:
            NotFoundError: no such key.
        """
        value = self.store.kv.get(namespace, {}).get(key)
        if value is None:
            raise NotFoundError(f"No config item, Namespace: {namespace} Key: {key}")
        return value

    def delete_kv(self, namespace: str, key: str) -> None:
        """Remove ``key`` from KV ``namespace`` (no error if absent)."""
        _check_kv(namespace, key)

        def decide(store: MetadataStore) -> Change[None]:
            if key not in store.kv.get(namespace, {}):
                return Change({}, None)
            return Change({kv_key(namespace, key): None}, None)

        self.writer.update(decide)

    def list_kv(self, namespace: str) -> dict[str, str]:
        """Every key and value of KV ``namespace``.

        Raises:
            NotFoundError: the KV namespace is empty.
        """
        table = self.store.kv.get(namespace)
        if not table:
            raise NotFoundError(f"No config item, Namespace: {namespace}")
        return dict(sorted(table.items()))

    # -- write permission (RocketMQ WIPE_WRITE_PERM_OF_BROKER) ----------------------------
    def wipe_write_perm(self, broker_name: str) -> int:
        """Make ``broker_name``'s queues read-only in route info; returns how many topics
        have queues there (RocketMQ's ``wipeTopicCount``).

        Raises:
            NotFoundError: no live broker has that name in this cluster.
        """
        self._require_live_name(broker_name)
        record = WritePerm(self.cluster, broker_name, PERM_READ, int(time.time() * 1000))
        self.writer.update(
            lambda _s: Change({perm_key(self.cluster, broker_name): record.to_json()}, None)
        )
        return len(self.lookups.topics_on(broker_name))

    def add_write_perm(self, broker_name: str) -> int:
        """Undo :meth:`wipe_write_perm`; returns the same topic count."""
        self._require_live_name(broker_name)

        def decide(store: MetadataStore) -> Change[None]:
            if (self.cluster, broker_name) not in store.perms:
                return Change({}, None)
            return Change({perm_key(self.cluster, broker_name): None}, None)

        self.writer.update(decide)
        return len(self.lookups.topics_on(broker_name))

    def _require_live_name(self, broker_name: str) -> None:
        names = {reg.broker_name for reg in self.lookups.registry.live_brokers(self.cluster)}
        if broker_name not in names:
            raise NotFoundError(
                f"broker name {broker_name!r} has no live broker in cluster {self.cluster}; "
                f"live: {sorted(names)}"
            )


def _check_kv(namespace: str, key: str) -> None:
    if not namespace or not key:
        raise InvalidInputError("KV config needs a non-empty namespace and key")
