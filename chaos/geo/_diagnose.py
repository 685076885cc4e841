"""What a run that did not converge prints about each sidecar: its /health status and, per
global topic it reads, its positions next to that topic's end offsets in its cluster.

Why: a sidecar's digest alone does not say whether it is down, not ready, or READY but
behind in one topic (a reader whose consumer stopped fetching), nor which partition."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from sync.constants import GLOBAL_EVENTS_TOPIC, SIDECAR_DIGEST_PATH
from sync.errors import PolicySyncError
from sync.geo import mirror_topic
from sync.transport import KafkaConfig, KafkaTransport

from ._check import PARTITIONS
from ._cluster import CLUSTERS, GeoCluster


def _get(url: str) -> tuple[int, Any]:
    """(HTTP status, JSON body or None); status 0: no answer."""
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310 - a sidecar URL
            return int(resp.status), json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        try:
            return int(exc.code), json.loads(exc.read())
        except ValueError:
            return int(exc.code), None
    except (urllib.error.URLError, OSError, ValueError):
        return 0, None


def _end_offsets(bootstrap: str, topics: list[str]) -> dict[str, str]:
    """Each topic's end offsets (read_committed, as the sidecars read), as text."""
    out: dict[str, str] = {}
    consumer = KafkaTransport(KafkaConfig(bootstrap)).consumer(read_committed=True)
    try:
        for topic in topics:
            try:
                ends = consumer.end_offsets(topic, list(range(PARTITIONS)))
                out[topic] = json.dumps({str(p): o for p, o in ends.items()})
            except PolicySyncError as exc:
                out[topic] = f"(unknown: {exc})"
    finally:
        consumer.close()
    return out


def sidecar_positions(geo: GeoCluster) -> str:
    """Per sidecar: its /health status and body's ``global`` states, then per global topic
    its positions (from the digest endpoint; none while it answers 503), the topic's end
    offsets in the sidecar's cluster and the reader's stall count. Never raises."""
    lines: list[str] = []
    for cluster in CLUSTERS:
        peers = [c for c in CLUSTERS if c != cluster]
        topics = [GLOBAL_EVENTS_TOPIC, *(mirror_topic(p) for p in peers)]
        try:
            ends = _end_offsets(geo.endpoints[cluster].bootstrap, topics)
        except Exception as exc:  # noqa: BLE001 - a report of a failure must not fail
            ends = {t: f"(unknown: {exc})" for t in topics}
        for url in geo.endpoints[cluster].sidecars:
            status, health = _get(url + "/health")
            states = health.get("global") if isinstance(health, dict) else None
            lines.append(f"{cluster} {url}: /health {status}, global readers {states}")
            digest_status, digest = _get(url + SIDECAR_DIGEST_PATH)
            summary = digest.get("global") if isinstance(digest, dict) else None
            positions = summary.get("positions", {}) if isinstance(summary, dict) else {}
            stalls = summary.get("stalls", {}) if isinstance(summary, dict) else {}
            for topic in topics:
                at = json.dumps(positions[topic]) if topic in positions else f"({digest_status})"
                lines.append(
                    f"  {topic}: positions {at} ends {ends[topic]} stalls {stalls.get(topic)}"
                )
    return "\n".join(lines)
