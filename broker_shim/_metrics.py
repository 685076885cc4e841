"""Prometheus metrics of a sidecar: collectors that read the cache's and the cluster
service's counters on scrape, and the lookup path's own request counter and histogram."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sync import CacheState, PolicyCache
from sync.cluster import ClusterService
from sync.errors import (
    AuthenticationError,
    AuthorizationError,
    BundleUnloadingError,
    InvalidInputError,
    NotFoundError,
    PolicySyncError,
    TooManyRequestsError,
    UnavailableError,
)

__all__ = ["LOOKUP_RESULTS", "LookupMetrics", "SidecarMetrics"]


class _CacheCollector(Collector):
    def __init__(self, cache: Callable[[], PolicyCache | None]) -> None:
        self._cache = cache

    def collect(self) -> Iterator[Metric]:
        cache = self._cache()
        if cache is None:
            return
        s = cache.stats()
        state = GaugeMetricFamily(
            "policy_sync_cache_state", "1 for the state the cache is in", labels=["state"]
        )
        for st in CacheState:
            state.add_metric([st.value], 1.0 if st is s.state else 0.0)
        yield state
        yield GaugeMetricFamily("policy_sync_cache_size", "policy records held", value=s.size)
        yield GaugeMetricFamily(
            "policy_sync_cache_lag_records",
            "records committed to the change-events topic but not yet applied",
            value=cache.lag(),
        )
        yield GaugeMetricFamily(
            "policy_sync_cache_bootstrap_seconds",
            "time from start to READY (NaN before READY)",
            value=float("nan") if s.bootstrap_seconds is None else s.bootstrap_seconds,
        )
        yield GaugeMetricFamily(
            "policy_sync_cache_unverified_records",
            "replayed values not yet decoded by the background verifier",
            value=s.unverified,
        )
        yield CounterMetricFamily(
            "policy_sync_applied_records", "records read from the topic", value=s.applied_records
        )
        yield CounterMetricFamily(
            "policy_sync_ignored_records",
            "records with NONE or unknown event/action types",
            value=s.ignored,
        )
        yield CounterMetricFamily(
            "policy_sync_conflicting_inserts",
            "INSERT events for keys already present (ignored, as in Pulsar)",
            value=s.conflicting_inserts,
        )
        yield CounterMetricFamily(
            "policy_sync_listener_errors", "exceptions raised by listeners", value=s.listener_errors
        )
        yield CounterMetricFamily(
            "policy_sync_cache_stalls",
            "consumers recreated because they stopped fetching while records waited",
            value=s.stalls,
        )
        poison = CounterMetricFamily(
            "policy_sync_poison_records",
            "records quarantined to the dead-letter topic",
            labels=["reason"],
        )
        for reason in ("bad_magic", "unknown_fingerprint", "truncated", "undecodable", "no_key"):
            poison.add_metric([reason], s.poison_by_reason.get(reason, 0))
        yield poison


class SidecarMetrics:
    """The registry behind ``GET /metrics``."""

    def __init__(self, cache: Callable[[], PolicyCache | None]) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_CacheCollector(cache))
        self.apply_latency = Histogram(
            "policy_sync_apply_latency_seconds",
            "record timestamp to applied in this cache",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0),
            registry=self.registry,
        )


#: ``result`` label of ``policy_sync_lookup_requests_total``, most specific exception first.
_RESULT_OF: tuple[tuple[type[PolicySyncError], str], ...] = (
    (AuthenticationError, "unauthenticated"),  # 401
    (AuthorizationError, "forbidden"),  # 403
    (TooManyRequestsError, "too_many_pending"),  # 429
    (BundleUnloadingError, "unloading"),  # 503 "… is being unloaded"
    (UnavailableError, "unavailable"),  # 503: not READY, no owner in time
    (NotFoundError, "not_found"),  # 404: no such namespace
    (InvalidInputError, "invalid"),  # 412: not a valid topic name
)
LOOKUP_RESULTS: tuple[str, ...] = ("ok", *(r for _, r in _RESULT_OF), "error")

#: From a cached answer (tens of microseconds) to a claim that waits for Kafka (seconds).
_LOOKUP_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0,
)  # fmt: skip


class _ClusterCollector(Collector):
    """Gauges and counters of the current cluster service, read on scrape.

    The counters belong to one incarnation of the service: they restart from zero when
    the supervisor replaces a failed one (Prometheus' ``rate`` treats that as a reset).
    """

    def __init__(self, service: Callable[[], ClusterService | None]) -> None:
        self._service = service

    def collect(self) -> Iterator[Metric]:
        service = self._service()
        if service is None:
            return
        lookups, member = service.lookups, service.member
        yield GaugeMetricFamily(
            "policy_sync_lookup_pending",
            "lookups waiting for their bundle to be claimed",
            value=lookups.pending,
        )
        yield GaugeMetricFamily(
            "policy_sync_lookup_pending_limit",
            "most lookups allowed to wait at once (more are answered 429)",
            value=lookups.config.max_pending_lookups,
        )
        yield CounterMetricFamily(
            "policy_sync_lookup_acquisitions",
            "claims of unowned bundles started by lookups (concurrent lookups share one)",
            value=lookups.acquisitions,
        )
        owned = service.ownership.owned_by()
        yield GaugeMetricFamily(
            "policy_sync_bundles_owned",
            "bundles this broker owns",
            value=owned.get(service.identity.broker_id, 0),
        )
        by_broker = GaugeMetricFamily(
            "policy_sync_cluster_bundles_owned",
            "bundles each broker owns, as this sidecar sees the ownership topic",
            labels=["broker"],
        )
        for broker, count in sorted(owned.items()):
            by_broker.add_metric([broker], count)
        yield by_broker
        yield CounterMetricFamily(
            "policy_sync_ownership_changes",
            "ownership records applied to this sidecar's view (any bundle, any broker)",
            value=lookups.ownership_changes,
        )
        yield CounterMetricFamily(
            "policy_sync_bundle_claims",
            "bundles this broker claimed (Owned records it committed)",
            value=member.claims,
        )
        yield CounterMetricFamily(
            "policy_sync_bundle_releases",
            "bundles this broker released (Releasing records it committed)",
            value=member.releases,
        )
        yield GaugeMetricFamily(
            "policy_sync_ownership_slots",
            "ownership slots assigned to this broker",
            value=len(member.active),
        )


class LookupMetrics:
    """Metrics of the lookup API (``GET /lookup/v2/topic/…``) and of bundle ownership.

    The lookup handler calls :meth:`observe` once per request; everything else is read
    from the cluster service when ``/metrics`` is scraped (see :meth:`track`).
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.requests = Counter(
            "policy_sync_lookup_requests",
            "HTTP topic lookups answered, by result",
            ["result"],
            registry=registry,
        )
        self.latency = Histogram(
            "policy_sync_lookup_latency_seconds",
            "time to answer an HTTP topic lookup in the handler (claims included)",
            buckets=_LOOKUP_BUCKETS,
            registry=registry,
        )
        # Bound once: a label lookup per request would cost more than the increment.
        self._by_result = {result: self.requests.labels(result) for result in LOOKUP_RESULTS}
        self._tracked = False

    def track(self, service: Callable[[], ClusterService | None]) -> None:
        """Report the ownership and pending-lookup figures of ``service()`` (the current
        service: the supervisor may replace it)."""
        if self._tracked:
            raise RuntimeError("LookupMetrics.track() was already called")
        self._tracked = True
        self.registry.register(_ClusterCollector(service))

    def observe(self, seconds: float, error: BaseException | None = None) -> None:
        """Count one answered lookup and its latency; ``error``: why it failed."""
        self.latency.observe(seconds)
        self._by_result[self.result_of(error)].inc()

    @staticmethod
    def result_of(error: BaseException | None) -> str:
        """The ``result`` label of a lookup that raised ``error`` (None: answered)."""
        if error is None:
            return "ok"
        for kind, result in _RESULT_OF:
            if isinstance(error, kind):
                return result
        return "error"
