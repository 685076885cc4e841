"""Prometheus metrics of a sidecar: a collector that reads the cache's counters on scrape."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sync import CacheState, PolicyCache

__all__ = ["SidecarMetrics"]


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
