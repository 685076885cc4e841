"""Geo-replication of global policies between Kafka clusters (docs/geo-design.md).

MirrorMaker 2 copies each cluster's ``policy-sync-global-events`` into the others as
``<origin>.policy-sync-global-events``; this package renders its configuration.
"""

from ._mm2 import Mm2Cluster, Mm2Settings, render_mm2_properties

__all__ = ["Mm2Cluster", "Mm2Settings", "render_mm2_properties"]
