"""Geo-replication faults under a global write load (docs/geo-design.md §5): MirrorMaker 2
stopped or killed, one cluster's Kafka down; after the heal every sidecar of both clusters
must hold the last writer of every key, no acknowledged write may be lost, and the time to
get there (the convergence bound) is measured. ``python -m chaos.geo`` (``make geo-chaos``)
runs them with long outages; ``tests/integration/sync/geo`` with short ones."""

from ._cluster import GeoCluster, GeoError
from ._faults import FAULTS, FaultConfig, FaultResult, all_clusters_healthy, run_fault
from ._load import GlobalLoad, LoadConfig

__all__ = [
    "FAULTS",
    "FaultConfig",
    "FaultResult",
    "GeoCluster",
    "GeoError",
    "GlobalLoad",
    "LoadConfig",
    "all_clusters_healthy",
    "run_fault",
]
