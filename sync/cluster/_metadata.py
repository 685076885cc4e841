"""The registry topic as typed, indexed tables, and the one fenced writer of its metadata.

:class:`MetadataStore` keeps every sidecar's local view of ``__policy_sync.registry``:
broker registrations, membership snapshots, namespace bundle layouts, topic metadata, KV
config, wiped write perms, tenants, namespaces' permissions, topics' schema histories and
topic epochs, each indexed for the lookup hot path.

:class:`MetadataWriter` changes namespace layouts, topic metadata, KV config and perms with
read-modify-write cycles serialized by Kafka's producer fencing, through the one fenced
writer of :mod:`sync.table._fenced_writer`: every writer in every sidecar shares one
transactional id, and a writer (re)initialising its transactions fences all others, then
syncs its view before deciding. A writer that loses its fence between deciding and committing gets
:class:`~sync._errors.ProducerFencedError` on commit, and nothing it wrote becomes
visible; it retries from a fresh view. Compaction keeps the last
record per key, so the decision is made before the write, never by a reader.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from sync._constants import (
    COMPACTED_TABLE_CREATE_CONFIG,
    COMPACTED_TABLE_REQUIRED_CONFIG,
    METADATA_TRANSACTIONAL_ID,
    REGISTRY_KEY_AUTH,
    REGISTRY_KEY_BROKER,
    REGISTRY_KEY_CLUSTER,
    REGISTRY_KEY_EPOCH,
    REGISTRY_KEY_KV,
    REGISTRY_KEY_MEMBERS,
    REGISTRY_KEY_NAMESPACE,
    REGISTRY_KEY_PERM,
    REGISTRY_KEY_REPLICATION,
    REGISTRY_KEY_SCHEMA,
    REGISTRY_KEY_TENANT,
    REGISTRY_KEY_TOPIC,
    REGISTRY_TOPIC,
)
from sync._errors import CodecError, InvalidInputError
from sync.naming._bundles import BundleRange, NamespaceBundles
from sync.naming._names import NamespaceName, TopicName
from sync.table._fenced_writer import Draft, FenceConfig, FencedWriter
from sync.transport import TopicSpec, Transport

from ._cluster_record import ClusterRecord
from ._ns_replication_record import ReplicationClusters
from ._permissions import AuthPolicies
from ._records import (
    BrokerRegistration,
    Membership,
    TenantRecord,
    TopicRecord,
    WritePerm,
    decode_layout,
    split_kv_key,
)
from ._schemas import SchemaHistory
from ._table import TableView
from ._topic_epochs import TopicEpoch

logger = logging.getLogger(__name__)

__all__ = ["Layout", "MetadataStore", "MetadataWriter", "registry_spec"]

R = TypeVar("R")


def registry_spec(replication_factor: int = -1, topic: str = REGISTRY_TOPIC) -> TopicSpec:
    """The registry topic: compacted, one partition (one total order for every key)."""
    return TopicSpec(
        topic,
        1,
        config=COMPACTED_TABLE_CREATE_CONFIG,
        required_config=COMPACTED_TABLE_REQUIRED_CONFIG,
        replication_factor=replication_factor,
    )


@dataclass(frozen=True, slots=True)
class Layout:
    """One namespace's bundles, prepared for the lookup hot path."""

    namespace: NamespaceName
    bundles: NamespaceBundles
    version: int
    #: ``<tenant>/<namespace>/<range>`` of each bundle, in hash order.
    names: tuple[str, ...]

    @classmethod
    def of(cls, bundles: NamespaceBundles, version: int) -> Layout:
        """Index ``bundles`` of version ``version``."""
        prefix = f"{bundles.namespace}/"
        return cls(
            bundles.namespace,
            bundles,
            version,
            tuple(prefix + b.name for b in bundles.bundles),
        )

    def index_of(self, hash_value: int) -> int:
        """Index of the bundle holding ``hash_value`` (0xffffffff: the last bundle)."""
        i = bisect.bisect_right(self.bundles.boundaries, hash_value) - 1
        last = len(self.names) - 1
        return i if i < last else last

    def bundle_of(self, hash_value: int) -> BundleRange:
        """The bundle holding ``hash_value``."""
        return self.bundles.bundles[self.index_of(hash_value)]

    def contains(self, bundle_name: str) -> bool:
        """True if ``<tenant>/<namespace>/<range>`` is a current bundle of this layout."""
        return bundle_name in self.names


RegistryValue = (
    BrokerRegistration
    | Membership
    | Layout
    | TopicRecord
    | TenantRecord
    | WritePerm
    | AuthPolicies
    | SchemaHistory
    | TopicEpoch
    | ClusterRecord
    | ReplicationClusters
    | str
)


def _namespace_in(key: str, prefix: str) -> NamespaceName:
    try:
        return NamespaceName.parse(key[len(prefix) :])
    except InvalidInputError as exc:
        raise CodecError(f"bad namespace key {key!r}: {exc}") from exc


def _decode(key: str, raw: bytes) -> RegistryValue:
    if key.startswith(REGISTRY_KEY_BROKER):
        return BrokerRegistration.from_json(raw)
    if key.startswith(REGISTRY_KEY_MEMBERS):
        return Membership.from_json(raw)
    if key.startswith(REGISTRY_KEY_NAMESPACE):
        namespace = _namespace_in(key, REGISTRY_KEY_NAMESPACE)
        bundles, version = decode_layout(namespace, raw)
        return Layout.of(bundles, version)
    if key.startswith(REGISTRY_KEY_TOPIC):
        return TopicRecord.from_json(raw)
    if key.startswith(REGISTRY_KEY_PERM):
        return WritePerm.from_json(raw)
    if key.startswith(REGISTRY_KEY_TENANT):
        return TenantRecord.from_json(raw)
    if key.startswith(REGISTRY_KEY_AUTH):
        _namespace_in(key, REGISTRY_KEY_AUTH)
        return AuthPolicies.from_json(raw)
    if key.startswith(REGISTRY_KEY_SCHEMA):
        history = SchemaHistory.from_json(raw)
        if history.topic != key[len(REGISTRY_KEY_SCHEMA) :]:
            raise CodecError(f"schema history of {history.topic} under key {key!r}")
        return history
    if key.startswith(REGISTRY_KEY_EPOCH):
        record = TopicEpoch.from_json(raw)
        if record.topic != key[len(REGISTRY_KEY_EPOCH) :]:
            raise CodecError(f"topic epoch of {record.topic} under key {key!r}")
        return record
    if key.startswith(REGISTRY_KEY_CLUSTER):
        cluster = ClusterRecord.from_json(raw)
        if cluster.name != key[len(REGISTRY_KEY_CLUSTER) :]:
            raise CodecError(f"cluster {cluster.name} under key {key!r}")
        return cluster
    if key.startswith(REGISTRY_KEY_REPLICATION):
        _namespace_in(key, REGISTRY_KEY_REPLICATION)
        return ReplicationClusters.from_json(raw)
    if key.startswith(REGISTRY_KEY_KV):
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CodecError(f"KV value of {key!r} is not UTF-8") from exc
    raise CodecError(f"unknown registry key {key!r}")


class MetadataStore:
    """Every sidecar's view of the registry topic, with indexes kept by the reader thread."""

    def __init__(
        self,
        transport: Transport,
        spec: TopicSpec | None = None,
        *,
        bootstrap_timeout_s: float = 120.0,
    ) -> None:
        self.table: TableView[RegistryValue] = TableView(
            transport, spec or registry_spec(), _decode, bootstrap_timeout_s=bootstrap_timeout_s
        )
        self.layouts: dict[NamespaceName, Layout] = {}
        self.registrations: dict[tuple[str, str], BrokerRegistration] = {}
        self.memberships: dict[str, Membership] = {}
        self.topics: dict[str, TopicRecord] = {}
        self.kv: dict[str, dict[str, str]] = {}
        self.perms: dict[tuple[str, str], WritePerm] = {}
        self.tenants: dict[str, TenantRecord] = {}
        #: Each namespace's permissions (absent: none granted).
        self.auth: dict[NamespaceName, AuthPolicies] = {}
        #: Each base topic's schema history (canonical name; absent: no schema ever).
        self.schemas: dict[str, SchemaHistory] = {}
        #: Each topic name's epoch (canonical name; absent: no exclusive producer ever).
        self.epochs: dict[str, int] = {}
        #: Registered clusters by name (``PUT /admin/v2/clusters/{cluster}``).
        self.clusters: dict[str, ClusterRecord] = {}
        #: Namespaces' replication clusters (absent: the local cluster only).
        self.replication: dict[NamespaceName, ReplicationClusters] = {}
        #: Bumped after every change; views derived from the store compare it.
        self.version = 0
        self._watchers: list[Callable[[str], None]] = []
        self.table.add_listener(self._on_change)

    def watch(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(key)`` (on the reader thread) after every change."""
        self._watchers.append(callback)

    def start(self) -> MetadataStore:
        """Begin replay (returns at once; see :meth:`wait_ready`)."""
        self.table.start()
        return self

    def wait_ready(self, timeout_s: float | None = None) -> None:
        """Block until the registry has been replayed."""
        self.table.wait_ready(timeout_s)

    def close(self) -> None:
        """Stop reading."""
        self.table.close()

    def _on_change(self, key: str, old: RegistryValue | None, new: RegistryValue | None) -> None:
        if key.startswith(REGISTRY_KEY_BROKER):
            cluster, _, broker_id = key[len(REGISTRY_KEY_BROKER) :].partition("/")
            if isinstance(new, BrokerRegistration):
                self.registrations[(cluster, broker_id)] = new
            else:
                self.registrations.pop((cluster, broker_id), None)
        elif key.startswith(REGISTRY_KEY_MEMBERS):
            cluster = key[len(REGISTRY_KEY_MEMBERS) :]
            if isinstance(new, Membership):
                self.memberships[cluster] = new
            else:
                self.memberships.pop(cluster, None)
        elif key.startswith(REGISTRY_KEY_NAMESPACE):
            if isinstance(new, Layout):
                self.layouts[new.namespace] = new
            elif isinstance(old, Layout):
                self.layouts.pop(old.namespace, None)
        elif key.startswith(REGISTRY_KEY_TOPIC):
            name = key[len(REGISTRY_KEY_TOPIC) :]
            if isinstance(new, TopicRecord):
                self.topics[name] = new
            else:
                self.topics.pop(name, None)
        elif key.startswith(REGISTRY_KEY_KV):
            namespace, entry = split_kv_key(key)
            if isinstance(new, str):
                self.kv.setdefault(namespace, {})[entry] = new
            else:
                table = self.kv.get(namespace)
                if table is not None:
                    table.pop(entry, None)
                    if not table:
                        del self.kv[namespace]
        elif key.startswith(REGISTRY_KEY_PERM):
            cluster, _, name = key[len(REGISTRY_KEY_PERM) :].partition("/")
            if isinstance(new, WritePerm):
                self.perms[(cluster, name)] = new
            else:
                self.perms.pop((cluster, name), None)
        elif key.startswith(REGISTRY_KEY_TENANT):
            tenant = key[len(REGISTRY_KEY_TENANT) :]
            if isinstance(new, TenantRecord):
                self.tenants[tenant] = new
            else:
                self.tenants.pop(tenant, None)
        elif key.startswith(REGISTRY_KEY_AUTH):
            if isinstance(new, AuthPolicies):
                self.auth[_namespace_in(key, REGISTRY_KEY_AUTH)] = new
            elif isinstance(old, AuthPolicies):  # its key was checked when it was stored
                self.auth.pop(_namespace_in(key, REGISTRY_KEY_AUTH), None)
        elif key.startswith(REGISTRY_KEY_SCHEMA):
            topic = key[len(REGISTRY_KEY_SCHEMA) :]
            if isinstance(new, SchemaHistory):
                self.schemas[topic] = new
            else:
                self.schemas.pop(topic, None)
        elif key.startswith(REGISTRY_KEY_EPOCH):
            topic = key[len(REGISTRY_KEY_EPOCH) :]
            if isinstance(new, TopicEpoch):
                self.epochs[topic] = new.epoch
            else:
                self.epochs.pop(topic, None)
        elif key.startswith(REGISTRY_KEY_REPLICATION):
            if isinstance(new, ReplicationClusters):
                self.replication[_namespace_in(key, REGISTRY_KEY_REPLICATION)] = new
            elif isinstance(old, ReplicationClusters):
                self.replication.pop(_namespace_in(key, REGISTRY_KEY_REPLICATION), None)
        elif key.startswith(REGISTRY_KEY_CLUSTER):
            name = key[len(REGISTRY_KEY_CLUSTER) :]
            if isinstance(new, ClusterRecord):
                self.clusters[name] = new
            else:
                self.clusters.pop(name, None)
        self.version += 1
        for watcher in self._watchers:
            try:
                watcher(key)
            except Exception:
                logger.exception("registry watcher failed for %r", key)

    # -- typed reads -------------------------------------------------------------------
    def layout(self, namespace: NamespaceName) -> Layout | None:
        """The namespace's bundle layout, or None if the namespace does not exist."""
        return self.layouts.get(namespace)

    def topic(self, topic: TopicName) -> TopicRecord | None:
        """Metadata of ``topic``'s base topic, if it was created through the admin API."""
        return self.topics.get(topic.base.canonical)


@dataclass(frozen=True, slots=True)
class Change(Generic[R]):
    """What an update function decided: records to write (key -> value, None deletes)
    and the result to hand back to the caller."""

    writes: dict[str, bytes | None]
    result: R


class MetadataWriter:
    """Fenced read-modify-write of registry keys (shared transactional id).

    The fence, deadline, back-off, abort, re-sync per producer epoch and
    commit-and-confirm are :class:`~sync.table._fenced_writer.FencedWriter`'s (the policy writer's
    too). Decisions read the store's indexes, so each goes in a transaction of its own,
    decided once the store has applied every earlier commit (``settle``).
    """

    def __init__(
        self,
        transport: Transport,
        store: MetadataStore,
        *,
        transactional_id: str = METADATA_TRANSACTIONAL_ID,
        timeout_s: float = 30.0,
        max_attempts: int = 50,
    ) -> None:
        self._store = store
        self._fence: FencedWriter[bytes] = FencedWriter(
            transport,
            store.table,
            FenceConfig(
                transactional_id=transactional_id,
                topic=store.table.spec.name,
                name="metadata",
                timeout_s=timeout_s,
                max_attempts=max_attempts,
                settle=True,
            ),
            lambda _key: None,
        )

    @property
    def fenced_retries(self) -> int:
        return self._fence.fenced_retries

    def update(self, decide: Callable[[MetadataStore], Change[R]]) -> R:
        """Run ``decide`` on a view that holds every committed write, then write its
        records in one transaction; repeat from a fresh view if another writer fenced us.

        ``decide`` may raise (e.g. :class:`~sync._errors.ConflictError`) to refuse the
        change: then nothing is written.
        """
        store = self._store

        def decided(draft: Draft[bytes]) -> R:
            change = decide(store)
            for key, value in change.writes.items():
                draft.put(key, value, value)
            return change.result

        return self._fence.write(decided)

    def close(self) -> None:
        """Release the producer."""
        self._fence.close()
