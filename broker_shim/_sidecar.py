"""The sidecar's composition root: the library objects one sidecar process serves.

:class:`Sidecar` builds them once and hands them to the front ends
(:func:`broker_shim._http.build_app` wires the HTTP, WebSocket and binary-protocol ones
around it): the Kafka transport and whether it answers
(:class:`~broker_shim._kafka_readiness.KafkaReadiness`), the policy service (restarted by
the one supervisor when its cache fails), the vote in the fence-holder election, the cluster service
(registry, bundle ownership, lookups; :class:`~broker_shim._live_cluster.LiveCluster`)
and the messaging engine both messaging front ends share.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path

from sync import (
    CacheConfig,
    CacheState,
    Codec,
    FenceHolder,
    FieldCatalog,
    HolderConfig,
    PolicyCache,
    PolicyService,
    PolicyTarget,
    ServiceConfig,
    TopicName,
    WriterConfig,
)
from sync.cluster import (
    ClusterService,
    ClusterSettings,
    SchemaCompatibilityStrategy,
    SchemaPolicy,
)
from sync.geo import GlobalPolicies
from sync.messaging import AutoTopicCreation, MessagingConfig, MessagingEngine, TopicOwnership
from sync.transport import KafkaConfig, KafkaTransport, ReachabilityConfig, Transport

from ._autocreate import topic_creator
from ._kafka_readiness import KafkaReadiness
from ._live_cluster import LiveCluster, LiveTopicEpochs, LookupOwnership
from ._metrics import SidecarMetrics
from ._process_tuning import release_free_heap
from ._supervisor import Backoff, supervise
from ._tls import TlsSettings
from .binary._entry_compaction import EntryCompaction

logger = logging.getLogger(__name__)

__all__ = ["Sidecar", "SidecarConfig"]


@dataclass(frozen=True, slots=True)
class SidecarConfig:
    """Settings of one sidecar (validated by the CLI)."""

    broker_id: str
    http_port: int
    bootstrap_servers: str
    host: str = "127.0.0.1"
    broker_url: str | None = None
    #: Port of the Pulsar binary protocol (``broker-shim run`` defaults to 6650); None:
    #: no binary listener (the advertised URL then says 6650, as before).
    broker_port: int | None = None
    #: Port of ``pulsar+ssl://`` (Pulsar's ``brokerServicePortTls``; None: no TLS
    #: listener), its certificate and key, and the URL it is advertised as.
    broker_port_tls: int | None = None
    tls: TlsSettings | None = None
    broker_url_tls: str | None = None
    #: Port of ``https://`` (Pulsar's ``webServicePortTls``; None: no HTTPS listener),
    #: served with ``tls`` beside ``http_port``.
    http_port_tls: int | None = None
    cluster: str = "standalone"
    topic: str = "__change_events"
    state_dir: Path | None = None
    bootstrap_timeout_s: float = 120.0
    restart_backoff_s: float = 0.5
    kafka_extra: dict[str, str] = field(default_factory=dict)
    #: Settings of the messaging engine (tests shorten its periodic checks).
    messaging: MessagingConfig = field(default_factory=MessagingConfig)
    #: Registry, bundle ownership and lookup (issue 4); None: this sidecar does not join.
    lookup: ClusterSettings | None = None
    #: Join the election of the policy writer's fence holder and forward REST writes to
    #: it (issue 16); False: every write takes the fence here.
    forward_writes: bool = True
    #: Session timeout of the fence-holder election: the hand-over's liveness bound.
    holder_session_timeout_ms: int = 6_000
    #: Pulsar's broker settings ``allowAutoTopicCreation``, ``allowAutoTopicCreationType``
    #: and ``defaultNumPartitions`` (a namespace's ``autoTopicCreationOverride`` wins).
    auto_topic_creation: AutoTopicCreation = AutoTopicCreation()
    #: How the binary protocol stores a SEND (``--entry-format``): ``message``, one Kafka
    #: record per message; ``entry``, the client's batch as one record, as sent
    #: (docs/entry-design.md).
    entry_format: str = "entry"
    #: Peer clusters whose global policies this cluster merges with its own (``--geo-peers``:
    #: their MirrorMaker 2 mirrors ``<peer>.policy-sync-global-events``); empty: global
    #: policies stay ``__G__`` keys of ``__change_events`` (docs/geo-design.md).
    geo_peers: tuple[str, ...] = ()
    #: How Kafka's reachability is probed (/health says 503 while it is UNREACHABLE).
    reachability: ReachabilityConfig = ReachabilityConfig()

    @property
    def advertised_broker_url(self) -> str:
        if self.broker_url:
            return self.broker_url
        return f"pulsar://{self.host}:{self.broker_port or 6650}"

    @property
    def advertised_broker_url_tls(self) -> str | None:
        """The ``pulsar+ssl://`` URL lookups answer (None: no TLS listener)."""
        if self.broker_url_tls:
            return self.broker_url_tls
        if self.broker_port_tls is None:
            return None
        return f"pulsar+ssl://{self.host}:{self.broker_port_tls}"

    @property
    def http_url(self) -> str:
        return f"http://{self.host}:{self.http_port}"

    @property
    def advertised_http_url_tls(self) -> str | None:
        """The ``https://`` URL lookups answer (``httpUrlTls``, registered as Pulsar's
        ``webServiceUrlTls``): ``--http-url-tls``, else this sidecar's HTTPS listener
        (None: neither)."""
        if self.lookup is not None and self.lookup.http_url_tls:
            return self.lookup.http_url_tls
        if self.http_port_tls is None or self.tls is None:
            return None
        return f"https://{self.host}:{self.http_port_tls}"


class Sidecar:
    """Owns the policy service; restarts it (with backoff) if its cache fails.

    A failed bootstrap (e.g. the time limit passed because Kafka is unreachable) must
    not wedge the sidecar forever, as a stuck reader did in Pulsar: /health says 503
    with the reason, metrics show FAILED, and a fresh cache is tried again.
    """

    def __init__(
        self,
        config: SidecarConfig,
        transport: Transport | None = None,
        *,
        ownership: TopicOwnership | None = None,
    ) -> None:
        """``ownership``: who serves a topic (default: the cluster's bundle ownership, or
        every topic here without a cluster)."""
        self.config = config
        self.transport = transport or KafkaTransport(
            KafkaConfig(
                config.bootstrap_servers,
                client_id=f"broker-shim-{config.broker_id}",
                extra=config.kafka_extra,
            )
        )
        self._lock = threading.Lock()
        self._service: PolicyService | None = None
        #: Whether Kafka answers, and the cache's catch-up after an outage (started by the app).
        self.kafka = KafkaReadiness(
            self.transport.reachability(config.reachability), lambda: self._service
        )
        self.metrics = SidecarMetrics(
            lambda: None if self._service is None else self._service.cache
        )
        self.restarts = 0
        self.last_failure: str | None = None
        #: The policy fields and their checks (the front ends check input with it before
        #: any Kafka I/O, whatever state the service is in).
        self.catalog = FieldCatalog.from_change_event_schema(Codec().current.parsed)
        #: This sidecar's vote in the election of the policy fence holder (started by the app).
        self.holder: FenceHolder | None = None
        if config.forward_writes:
            self.holder = FenceHolder(
                self.transport,
                HolderConfig(
                    table=config.topic,
                    address=config.http_url,
                    session_timeout_ms=config.holder_session_timeout_ms,
                ),
            )
        #: Registry, ownership and lookup of this sidecar's cluster (started by the app).
        self.cluster: LiveCluster | None = None
        if config.lookup is not None:
            # Registered with the TLS URLs of its listeners: lookups answer them
            # (brokerUrlTls, httpUrlTls), so TLS clients are sent to TLS listeners.
            settings = dataclasses.replace(
                config.lookup,
                service_url_tls=config.lookup.service_url_tls or config.advertised_broker_url_tls,
                http_url_tls=config.advertised_http_url_tls,
            )
            self.cluster = LiveCluster(
                ClusterService(
                    self.transport,
                    settings.to_config(
                        broker_id=config.broker_id,
                        cluster=config.cluster,
                        service_url=config.advertised_broker_url,
                        http_url=config.http_url,
                        bootstrap_timeout_s=config.bootstrap_timeout_s,
                        schema_policy=self._schema_policy,
                    ),
                )
            )
        if ownership is None and self.cluster is not None:
            # With the cluster on, a topic is served by the owner of its bundle; other
            # sidecars redirect to it (issue 5).
            ownership = LookupOwnership(self.cluster)
        #: Pulsar's producers, consumers and readers of both messaging front ends
        #: (WebSocket and binary protocol), started and closed by the app.
        self.engine = MessagingEngine(
            self.transport,
            lambda: self._service,
            ownership=ownership,
            config=config.messaging,
            auto_creation=config.auto_topic_creation,
            create_topic=topic_creator(self.cluster, self.transport),
            # Pulsar keeps topic epochs with the topic's ledger; here in the registry, so a
            # restart or a bundle move does not forget them (without the cluster: in memory).
            epochs=None if self.cluster is None else LiveTopicEpochs(self.cluster),
            # Whatever --entry-format writes now: a topic may hold entries from before.
            entry_codec=EntryCompaction(),
        )
        if self.cluster is not None:
            # A bundle moving away closes its topics here before another sidecar claims it.
            self.cluster.on_release(self.engine.release_blocking)

    @property
    def service(self) -> PolicyService | None:
        return self._service

    def _schema_policy(self, topic: TopicName) -> SchemaPolicy:
        """A topic's schema policies, as Pulsar's broker resolves them: its
        ``schemaCompatibilityStrategy`` and ``schemaValidationEnforced`` (topic, else
        namespace, as the policy cache applies them), its namespace's
        ``isAllowAutoUpdateSchema`` (a namespace policy only, in Pulsar too), else Pulsar's
        broker defaults (FULL, not enforced, auto updates allowed)."""
        svc = self._service
        if svc is None:
            return SchemaPolicy()
        applied = svc.applied(topic)
        strategy = applied.get("schemaCompatibilityStrategy")
        namespace = svc.get(PolicyTarget.namespace_of(topic.tenant, topic.namespace))
        auto_update = None if namespace is None else namespace.get("isAllowAutoUpdateSchema")
        return SchemaPolicy(
            strategy=(
                SchemaCompatibilityStrategy(strategy).resolved()
                if strategy
                else SchemaCompatibilityStrategy.FULL
            ),
            validation_enforced=applied.get("schemaValidationEnforced") is True,
            allow_auto_update=auto_update is not False,
        )

    def cluster_service(self) -> ClusterService | None:
        """The live incarnation of the cluster service (None without the cluster)."""
        return None if self.cluster is None else self.cluster.service

    def _service_config(self) -> ServiceConfig:
        snapshot = None
        if self.config.state_dir is not None:
            snapshot = self.config.state_dir / f"{self.config.topic}.snapshot"
        return ServiceConfig(
            cache=CacheConfig(
                topic=self.config.topic,
                bootstrap_timeout_s=self.config.bootstrap_timeout_s,
                snapshot_path=snapshot,
            ),
            writer=WriterConfig(
                author=f"broker-shim-{self.config.broker_id}",
                origin=f"broker-shim@{self.config.host}:{self.config.http_port}",
                cluster=self.config.cluster,
            ),
        )

    def start_service(self) -> None:
        """Create and start (without waiting) a fresh policy service."""
        with self._lock:
            config = self._service_config()
            codec = Codec()
            cache = PolicyCache(
                self.transport,
                config=config.cache,
                codec=codec,
                on_apply=self.metrics.apply_latency.observe,
                on_ready=release_free_heap,
            )
            geo = None
            if self.config.geo_peers:
                geo = GlobalPolicies(
                    self.transport,
                    codec,
                    cluster=self.config.cluster,
                    peers=self.config.geo_peers,
                    bootstrap_timeout_s=self.config.bootstrap_timeout_s,
                )
            svc = PolicyService(
                self.transport, config, codec=codec, cache=cache, global_policies=geo
            )
            svc.start(wait=False)
            self._service = svc

    async def supervise(self) -> None:
        """Restart the policy service whenever its cache, or (geo-replicated) a reader of
        its global table, ends up FAILED (the one supervisor).

        A global topic's reader that failed stops for good: without a restart the merged
        table would miss that topic's records from then on (its digest and global reads
        answer 503 for ever) while the policy cache stays READY.
        """

        def failure() -> str | None:
            svc = self._service
            if svc is None:
                return None
            if svc.cache.state is CacheState.FAILED:
                self.last_failure = str(svc.cache.failure)
                return f"policy cache: {self.last_failure}"
            geo = svc.global_policies
            reason = None if geo is None else geo.failure()
            if reason is None:
                return None
            self.last_failure = reason
            return f"global policies: {reason}"

        def close_failed() -> None:
            svc = self._service
            if svc is not None:
                svc.close()

        def start_fresh() -> None:
            self.restarts += 1
            self.start_service()

        await supervise(
            "policy service",
            failure=failure,
            healthy=lambda: self._service is not None and self._service.ready(),
            close_failed=close_failed,
            start_fresh=start_fresh,
            backoff=Backoff(initial_s=self.config.restart_backoff_s, max_s=4.0),
        )

    def close(self) -> None:
        self.kafka.close()
        if self.holder is not None:
            self.holder.close()
        with self._lock:
            if self._service is not None:
                self._service.close()
                self._service = None
