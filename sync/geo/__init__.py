"""Geo-replication of global policies between Kafka clusters (docs/geo-design.md).

MirrorMaker 2 copies each cluster's ``policy-sync-global-events`` into the others as
``<origin>.policy-sync-global-events`` (this package renders its configuration); every
reader merges its own global topic and the mirrors by one rule, last writer wins by hybrid
logical clock, ties by cluster then event id.
"""

from ._global_policies import GlobalPolicies, policies_bytes, policies_digest
from ._global_table import (
    GlobalRecord,
    GlobalTable,
    judge_global,
    mirror_topic,
    stamp_from_headers,
    stamp_of,
)
from ._global_writer import GlobalPolicyWriter, policy_decoder
from ._hlc import LOGICAL_BITS, HybridClock, next_hlc, pack_hlc, unpack_hlc
from ._lww import LATER_HLC, TIE_CLUSTER, TIE_EVENT_ID, LwwTable, Stamp, Version, why, wins
from ._mm2 import Mm2Cluster, Mm2Settings, render_mm2_properties

__all__ = [
    "LATER_HLC",
    "LOGICAL_BITS",
    "TIE_CLUSTER",
    "TIE_EVENT_ID",
    "GlobalRecord",
    "GlobalPolicies",
    "GlobalPolicyWriter",
    "GlobalTable",
    "HybridClock",
    "LwwTable",
    "Mm2Cluster",
    "Mm2Settings",
    "Stamp",
    "Version",
    "judge_global",
    "mirror_topic",
    "next_hlc",
    "pack_hlc",
    "policies_bytes",
    "policies_digest",
    "policy_decoder",
    "render_mm2_properties",
    "stamp_from_headers",
    "stamp_of",
    "unpack_hlc",
    "why",
    "wins",
]
