"""One sidecar's share of the cluster: registry view, ownership membership, lookups, admin.

Start-up runs in a background thread so the HTTP server can answer (503 while STARTING):
replay the registry and ownership topics, register the broker, create the default
namespaces, join the ownership group, and become READY once the first assignment was
handled. Close leaves the group gracefully (owned bundles are released), then unregisters.

Lifecycle (checked in one place, :class:`sync._lifecycle.Lifecycle`)::

    NEW ──start()──▶ STARTING ──joined──▶ READY ──close()──▶ CLOSED
                        └── error ──▶ FAILED ──close()──▶ CLOSED
"""

from __future__ import annotations

import enum
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sync._constants import REGISTRY_TOPIC
from sync._errors import PolicySyncError, StateTransitionError, UnavailableError
from sync._lifecycle import Lifecycle
from sync.naming._names import NamespaceName, TopicName
from sync.transport import Transport

from ._admin import ClusterAdmin
from ._auth import AuthConfig, Authorizer
from ._clusters_admin import ClustersAdmin
from ._freshness import PauseWatch, ViewState
from ._lookup import LookupConfig, LookupService
from ._metadata import MetadataStore, MetadataWriter, registry_spec
from ._ns_replication import ReplicationAdmin
from ._ownership_housekeeping import describe_members
from ._ownership_member import OwnershipMember
from ._ownership_model import MemberState, OwnershipConfig
from ._ownership_table import OwnershipTable
from ._permission_admin import PermissionAdmin
from ._records import ListenerUrls
from ._registry import BrokerIdentity, BrokerRegistry, Registrar
from ._schema_admin import SchemaAdmin, SchemaPolicyOf, default_schema_policy
from ._topic_epoch_store import RegistryTopicEpochs

logger = logging.getLogger(__name__)

__all__ = ["ClusterConfig", "ClusterService", "ClusterSettings", "ServiceState"]


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """Everything one sidecar needs to take part in its cluster."""

    identity: BrokerIdentity
    ownership: OwnershipConfig = field(default_factory=OwnershipConfig)
    lookup: LookupConfig = field(default_factory=LookupConfig)
    #: Re-registration interval (RocketMQ brokers re-register every 30 s).
    registry_heartbeat_s: float = 10.0
    registry_topic: str = REGISTRY_TOPIC
    replication_factor: int = -1
    bootstrap_timeout_s: float = 120.0
    auth: AuthConfig | None = None
    #: A process that did not run for longer than this (SIGSTOP, a frozen VM) answers 503
    #: until its registry and ownership views have caught up (issue 11).
    pause_s: float = 1.0
    #: A topic's schema policies (``schemaCompatibilityStrategy``,
    #: ``schemaValidationEnforced``, ``isAllowAutoUpdateSchema``, read by the sidecar's
    #: policy service); the default: Pulsar's broker defaults everywhere.
    schema_policy: SchemaPolicyOf = default_schema_policy


@dataclass(frozen=True, slots=True)
class ClusterSettings:
    """The cluster part of a sidecar's settings; the sidecar supplies the broker id,
    cluster, service URL and HTTP URL (see :meth:`to_config`)."""

    ownership: OwnershipConfig = field(default_factory=OwnershipConfig)
    lookup: LookupConfig = field(default_factory=LookupConfig)
    broker_name: str | None = None
    replica_id: int = 0
    service_url_tls: str | None = None
    http_url_tls: str | None = None
    advertised_listeners: Mapping[str, ListenerUrls] = field(default_factory=dict)
    registry_heartbeat_s: float = 10.0
    replication_factor: int = -1
    auth: AuthConfig | None = None

    def to_config(
        self,
        *,
        broker_id: str,
        cluster: str,
        service_url: str,
        http_url: str,
        bootstrap_timeout_s: float = 120.0,
        schema_policy: SchemaPolicyOf = default_schema_policy,
    ) -> ClusterConfig:
        """The full :class:`ClusterConfig` of one sidecar."""
        return ClusterConfig(
            identity=BrokerIdentity(
                broker_id=broker_id,
                cluster=cluster,
                service_url=service_url,
                http_url=http_url,
                service_url_tls=self.service_url_tls,
                http_url_tls=self.http_url_tls,
                broker_name=self.broker_name,
                replica_id=self.replica_id,
                advertised_listeners=self.advertised_listeners,
            ),
            ownership=self.ownership,
            lookup=self.lookup,
            registry_heartbeat_s=self.registry_heartbeat_s,
            replication_factor=self.replication_factor,
            bootstrap_timeout_s=bootstrap_timeout_s,
            auth=self.auth,
            schema_policy=schema_policy,
        )


class ServiceState(enum.Enum):
    """Where the cluster service is in its life."""

    NEW = "NEW"
    STARTING = "STARTING"
    READY = "READY"
    FAILED = "FAILED"
    CLOSED = "CLOSED"


_ALLOWED: dict[ServiceState, frozenset[ServiceState]] = {
    ServiceState.NEW: frozenset({ServiceState.STARTING, ServiceState.CLOSED}),
    ServiceState.STARTING: frozenset(
        {ServiceState.READY, ServiceState.FAILED, ServiceState.CLOSED}
    ),
    ServiceState.READY: frozenset({ServiceState.FAILED, ServiceState.CLOSED}),
    ServiceState.FAILED: frozenset({ServiceState.CLOSED}),
    ServiceState.CLOSED: frozenset(),
}


class ClusterService:
    """Registry, ownership and lookup of one sidecar."""

    def __init__(self, transport: Transport, config: ClusterConfig) -> None:
        self.config = config
        self.identity = config.identity
        self.incarnation = uuid.uuid4().hex
        self._transport = transport
        rf = config.replication_factor
        self.store = MetadataStore(
            transport,
            registry_spec(rf, config.registry_topic),
            bootstrap_timeout_s=config.bootstrap_timeout_s,
        )
        self.writer = MetadataWriter(transport, self.store)
        self.registry = BrokerRegistry(self.store, self.identity.cluster)
        self.ownership = OwnershipTable(
            transport,
            self.identity.cluster,
            config.ownership.slots,
            replication_factor=rf,
            bootstrap_timeout_s=config.bootstrap_timeout_s,
        )
        self.member = OwnershipMember(
            transport,
            config.ownership,
            cluster=self.identity.cluster,
            broker_id=self.identity.broker_id,
            incarnation=self.incarnation,
            table=self.ownership,
            store=self.store,
        )
        self.registrar = Registrar(
            transport,
            self.store,
            self.identity,
            self.incarnation,
            heartbeat_interval_s=config.registry_heartbeat_s,
        )
        self.lookups = LookupService(
            self.store, self.registry, self.ownership, self.member.request, config.lookup
        )
        self.admin = ClusterAdmin(
            transport,
            self.store,
            self.writer,
            self.ownership,
            self.lookups,
            self.member.request,
            cluster=self.identity.cluster,
            default_bundles=config.lookup.default_bundles,
            replication_factor=rf,
        )
        self.permissions = PermissionAdmin(self.store, self.writer)
        #: Registered clusters (``/admin/v2/clusters``): tenants' and namespaces' clusters
        #: must be among them.
        self.clusters = ClustersAdmin(self.store, self.writer, local=self.identity.cluster)
        self.replication = ReplicationAdmin(self.store, self.writer, self.clusters)
        # Pulsar's schema registry; its compatibility strategy is the broker default (FULL)
        # until the topic and namespace policies can set one
        self.schemas = SchemaAdmin(self.store, self.writer, config.schema_policy)
        #: Pulsar's topic epochs of exclusive producers (the messaging engine's store).
        self.epochs = RegistryTopicEpochs(self.store, self.writer)
        self.auth = None if config.auth is None else Authorizer(config.auth, self.store)
        self.pause_watch = PauseWatch(
            self._catch_up,
            name=f"cluster view of {self.identity.broker_id}",
            pause_s=config.pause_s,
        )
        self._life = Lifecycle(
            f"cluster service {self.identity.broker_id}",
            ServiceState.NEW,
            _ALLOWED,
            terminal=ServiceState.CLOSED,
            error=StateTransitionError,
            log=logger,
        )
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._thread: threading.Thread | None = None
        self.started_at = time.monotonic()
        self.ready_after_s: float | None = None

    # -- lifecycle -------------------------------------------------------------------
    @property
    def state(self) -> ServiceState:
        """The lifecycle state."""
        return self._life.state

    @property
    def failure(self) -> BaseException | None:
        """Why start-up failed, if it did."""
        return self._failure

    def _transition(self, new: ServiceState) -> bool:
        return self._life.move(new)

    def start(self) -> ClusterService:
        """Start in the background (returns at once; see :meth:`wait_ready`)."""
        self._transition(ServiceState.STARTING)
        self.started_at = time.monotonic()
        self._thread = threading.Thread(target=self._boot, name="cluster-boot", daemon=True)
        self._thread.start()
        return self

    def _boot(self) -> None:
        try:
            timeout = self.config.bootstrap_timeout_s
            self.store.start()
            self.ownership.table.start()
            self.store.wait_ready(timeout)
            self.ownership.table.wait_ready(timeout)
            self.registry.refresh()
            self.registrar.start()
            for text in self.config.lookup.default_namespaces:
                namespace = NamespaceName.parse(text)
                self.admin.ensure_tenant(namespace.tenant)
                self.admin.ensure_namespace(namespace)
            self.member.start()
            while not self.member.wait_joined(0.5):
                if self._life.state is not ServiceState.STARTING:
                    return
                if time.monotonic() - self.started_at > timeout:
                    raise UnavailableError(
                        f"did not join ownership group of cluster {self.identity.cluster} "
                        f"within {timeout:.0f}s"
                    )
            if self.member.failure is not None:
                raise self.member.failure
            self.ready_after_s = time.monotonic() - self.started_at
            self.pause_watch.start()
            if self._transition(ServiceState.READY):
                self._ready.set()
        except BaseException as exc:
            self._failure = exc
            if self._life.state is not ServiceState.CLOSED:
                logger.error("cluster service %s failed to start: %s", self.identity.broker_id, exc)
                self._transition(ServiceState.FAILED)
            self._ready.set()

    def on_release(self, hook: Callable[[Callable[[TopicName], bool]], None]) -> None:
        """Have ``hook`` told which topics stop being served here when bundles move away
        (called on the ownership member's thread before the move completes; it should
        close those topics, bounded in time)."""

        def released(bundles: Callable[[str], bool]) -> None:
            def moving(topic: TopicName) -> bool:
                try:
                    return bundles(self.lookups.bundle_of(topic))
                except PolicySyncError:
                    return True  # its namespace is gone: nothing of it is served here

            hook(moving)

        self.member.on_release = released

    def restarted(self) -> ClusterService:
        """A fresh, unstarted service with the same configuration (a new incarnation)."""
        return ClusterService(self._transport, self.config)

    def wait_ready(self, timeout_s: float | None = None) -> None:
        """Block until READY.

        Raises:
            UnavailableError: not ready in time, or start-up failed.
        """
        limit = self.config.bootstrap_timeout_s + 10 if timeout_s is None else timeout_s
        if not self._ready.wait(limit) or self._life.state is not ServiceState.READY:
            raise UnavailableError(
                f"cluster service of {self.identity.broker_id} is {self._life.state.value}"
                + (f": {self._failure}" if self._failure else "")
            ) from self._failure

    def require_ready(self) -> None:
        """Raises:
        UnavailableError: the service is not READY (503)."""
        if self._life.state is not ServiceState.READY:
            raise UnavailableError(
                f"lookup service of broker {self.identity.broker_id} is {self._life.state.value}, "
                "not READY" + (f": {self._failure}" if self._failure else "")
            )
        if self.member.state is MemberState.FAILED:
            # Its ownership member is gone: it cannot decide anything until the supervisor
            # has started a new incarnation.
            raise UnavailableError(
                f"ownership member of broker {self.identity.broker_id} FAILED "
                f"({self.member.failure}); restarting"
            )
        if self.pause_watch.state is ViewState.STALE:
            raise UnavailableError(
                f"broker {self.identity.broker_id} was paused; its view of the cluster is "
                "catching up"
            )

    @property
    def view(self) -> ViewState:
        """Whether lookups may be answered from this sidecar's view (STALE after a pause)."""
        return self.pause_watch.state

    def _catch_up(self) -> None:
        timeout = min(5.0, self.config.bootstrap_timeout_s)
        self.store.table.sync(timeout)
        self.ownership.table.sync(timeout)

    def close(self, *, graceful: bool = True) -> None:
        """Leave the cluster: release bundles (graceful), unregister, stop readers."""
        if not self._transition(ServiceState.CLOSED):
            return
        self._ready.set()
        self.pause_watch.stop()
        if self._thread is not None:
            self._thread.join(timeout=self.config.bootstrap_timeout_s)
        steps: list[Callable[[], None]] = [
            lambda: self.member.close(graceful=graceful),
            self.registrar.close,
        ]
        if graceful:
            steps.append(self._unregister)
        steps += [self.writer.close, self.ownership.table.close, self.store.close]
        for step in steps:
            try:
                step()
            except PolicySyncError as exc:
                logger.warning("closing cluster service: %s", exc)

    def _unregister(self) -> None:
        # RocketMQ UNREGISTER_BROKER: a clean stop forgets the broker at once.
        current = self.store.registrations.get((self.identity.cluster, self.identity.broker_id))
        if current is None or current.incarnation != self.incarnation:
            return
        producer = self._transport.producer()
        try:
            producer.produce(self.store.table.spec.name, self.registrar.key.encode("utf-8"), None)
            producer.flush(5.0)
        finally:
            producer.close()

    # -- status --------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """What this sidecar sees of its cluster (for ``/policy-sync/v1/cluster``)."""
        cluster = self.identity.cluster
        membership = self.registry.membership(cluster)
        return {
            "state": self._life.state.value,
            "view": self.view.value,
            "pauses": self.pause_watch.pauses,
            "brokerId": self.identity.broker_id,
            "cluster": cluster,
            "incarnation": self.incarnation,
            "memberState": self.member.state.value,
            "slots": sorted(self.member.active),
            "generation": self.member.generation,
            "liveBrokers": sorted(self.registry.live),
            "members": describe_members(self.store, cluster),
            "membershipLeader": None if membership is None else membership.leader,
            "ownedBundles": self.ownership.owned_by(),
            "claims": self.member.claims,
            "releases": self.member.releases,
            "fencedCommits": self.member.fenced,
            "pendingLookups": self.lookups.pending,
            "acquisitions": self.lookups.acquisitions,
            "readyAfterSeconds": self.ready_after_s,
            "failure": None if self._failure is None else str(self._failure),
        }
