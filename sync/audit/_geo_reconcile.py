"""Reconciliation across geo clusters: does every sidecar's merged global table hold the
state the clusters' global topics imply (``policy-audit reconcile --cluster …``)?

The expected state is computed once with Spark from every cluster's own global topic by the
one merge rule (:func:`sync.audit._geo.global_winners`: per key the winning stamp, ghosts of
deletes included). Each sidecar answers ``GET /policy-sync/v1/global-entries`` (its table:
per key the winning stamp and whether it is a delete). A key is ``missing`` (expected, not
held), ``extra`` (held, not expected), ``older`` (the sidecar holds a stamp the expected one
beats: it lags, e.g. MirrorMaker 2 has not copied the winner yet) or ``newer`` (it holds a
stamp beating the expected one: a write that landed after the topics were read). A stamp
names exactly one record (cluster and event id), so equal stamps mean equal values.

Writes keep crossing while we look: a sidecar that answers and diverges is read again until
``settle_s`` has passed; if one holds a newer write, the expected state is computed again
(at most once per round). What still differs then is reported, and the cross-cluster line
says whether all sidecars hold one and the same table.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pyspark.sql import SparkSession

from sync._constants import SIDECAR_GLOBAL_ENTRIES_PATH
from sync._errors import InvalidInputError, SidecarError
from sync.geo import Stamp, wins

from ._geo import GeoCluster, global_winners
from ._reconcile import validate_sidecar_url

logger = logging.getLogger(__name__)

__all__ = [
    "GlobalDivergence",
    "compare_global",
    "cross_cluster_lines",
    "fetch_global_entries",
    "reconcile_geo",
]

Entries = Mapping[str, tuple[Stamp, bool]]


def fetch_global_entries(
    url: str, timeout_s: float = 30.0
) -> tuple[str, dict[str, tuple[Stamp, bool]]]:
    """A sidecar's cluster name and global table (key -> (winning stamp, deleted)).

    Raises:
        SidecarError: unreachable, not ready, not a geo sidecar, or a malformed answer.
    """
    path = SIDECAR_GLOBAL_ENTRIES_PATH
    request = urllib.request.Request(url + path, headers={"Accept": "application/json"})  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310
            payload = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        hint = {503: " (not ready yet)", 404: " (not a geo sidecar: no --geo-peers)"}
        raise SidecarError(
            url, f"GET {path} answered HTTP {exc.code}{hint.get(exc.code, '')}"
        ) from exc
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise SidecarError(url, f"GET {path} failed: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise SidecarError(url, f"GET {path} did not answer JSON: {exc}") from exc
    if not isinstance(payload, dict) or not isinstance(payload.get("entries"), dict):
        raise SidecarError(url, f"{path} answered without an entries object")
    entries: dict[str, tuple[Stamp, bool]] = {}
    try:
        for key, e in payload["entries"].items():
            stamp = Stamp(int(e["hlc"]), str(e["cluster"]), str(e["eventId"]))
            entries[str(key)] = (stamp, bool(e["deleted"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise SidecarError(
            url, f"{path}: an entry is not {{hlc, cluster, eventId, deleted}}"
        ) from exc
    return str(payload.get("cluster", "?")), entries


@dataclass(frozen=True, slots=True)
class GlobalDivergence:
    """How one sidecar's global table compares with the clusters' global topics."""

    url: str
    cluster: str
    expected_keys: int
    sidecar_keys: int
    matching: int
    missing: int
    extra: int
    older: int
    newer: int
    #: (key, kind, expected stamp, sidecar stamp), the first few in key order
    examples: Sequence[tuple[str, str, str | None, str | None]]
    #: sha256 over the sidecar's table (equal tables, equal digests)
    digest: str = ""
    error: str | None = None

    @classmethod
    def failed(cls, url: str, error: str) -> GlobalDivergence:
        return cls(url, "?", 0, 0, 0, 0, 0, 0, 0, (), "", error)

    @property
    def diverged(self) -> bool:
        return bool(self.error or self.missing or self.extra or self.older or self.newer)

    def lines(self) -> list[str]:
        if self.error is not None:
            return [f"{self.url}: UNREACHABLE: {self.error}"]
        verdict = "DIVERGED" if self.diverged else "in sync"
        out = [
            f"{self.url} ({self.cluster}): {verdict}",
            f"  global keys: expected {self.expected_keys:,}, sidecar {self.sidecar_keys:,}; "
            f"matching {self.matching:,}, missing {self.missing:,}, extra {self.extra:,}, "
            f"older {self.older:,}, newer {self.newer:,}",
        ]
        for key, kind, want, have in self.examples:
            out.append(f"    {kind:<7} {key}  expected={want or '-'} sidecar={have or '-'}")
        total = self.missing + self.extra + self.older + self.newer
        if total > len(self.examples):
            out.append(f"    ... and {total - len(self.examples):,} more")
        return out


def _text(entry: tuple[Stamp, bool] | None) -> str | None:
    if entry is None:
        return None
    stamp, deleted = entry
    return f"{stamp.hlc}/{stamp.cluster}/{stamp.event_id}{' (deleted)' if deleted else ''}"


def _digest(entries: Entries) -> str:
    h = hashlib.sha256()
    for key in sorted(entries):
        stamp, deleted = entries[key]
        h.update(f"{key}\0{stamp.hlc}\0{stamp.cluster}\0{stamp.event_id}\0{deleted}\n".encode())
    return h.hexdigest()


def compare_global(
    url: str, cluster: str, expected: Entries, held: Entries, max_examples: int = 20
) -> GlobalDivergence:
    """Key by key, ``held`` (a sidecar's table) against ``expected``."""
    counts = {"match": 0, "missing": 0, "extra": 0, "older": 0, "newer": 0}
    examples: list[tuple[str, str, str | None, str | None]] = []
    for key in sorted(set(expected) | set(held)):
        want, have = expected.get(key), held.get(key)
        if want is None:
            kind = "extra"
        elif have is None:
            kind = "missing"
        elif have[0] == want[0]:
            kind = "match"
        else:
            kind = "newer" if wins(have[0], want[0]) else "older"
        counts[kind] += 1
        if kind != "match" and len(examples) < max_examples:
            examples.append((key, kind, _text(want), _text(have)))
    return GlobalDivergence(
        url,
        cluster,
        len(expected),
        len(held),
        counts["match"],
        counts["missing"],
        counts["extra"],
        counts["older"],
        counts["newer"],
        examples,
        _digest(held),
    )


def cross_cluster_lines(results: Sequence[GlobalDivergence]) -> list[str]:
    """Whether every reachable sidecar, of every cluster, holds one and the same table."""
    reached = [r for r in results if r.error is None]
    tables: dict[str, list[GlobalDivergence]] = {}
    for r in reached:
        tables.setdefault(r.digest, []).append(r)
    clusters = sorted({r.cluster for r in reached})
    if len(tables) <= 1:
        return [
            f"{len(reached)} sidecars of {', '.join(clusters) or 'no cluster'} hold the same "
            "global table"
        ]
    out = [f"{len(reached)} sidecars of {', '.join(clusters)} hold {len(tables)} different tables:"]
    for digest, group in sorted(tables.items(), key=lambda kv: -len(kv[1])):
        urls = ", ".join(f"{r.url} ({r.cluster})" for r in group)
        out.append(f"  {digest[:12]}: {urls}")
    return out


def reconcile_geo(
    spark: SparkSession,
    clusters: Sequence[GeoCluster],
    sidecars: Sequence[str],
    *,
    max_examples: int = 20,
    timeout_s: float = 30.0,
    settle_s: float = 10.0,
    fetch: Callable[[str, float], tuple[str, dict[str, tuple[Stamp, bool]]]] = fetch_global_entries,
) -> list[GlobalDivergence]:
    """Compare every sidecar's global table with the state the clusters' global topics
    imply; an unreachable sidecar is reported (``error``) and counts as diverged."""
    if not sidecars:
        raise InvalidInputError("name at least one --sidecar URL")
    urls = [validate_sidecar_url(u) for u in sidecars]
    expected = global_winners(spark, clusters)
    deadline = time.monotonic() + settle_s
    while True:
        results = []
        for url in urls:
            try:
                cluster, held = fetch(url, timeout_s)
            except SidecarError as exc:
                logger.warning("%s", exc)
                results.append(GlobalDivergence.failed(url, exc.reason))
                continue
            results.append(compare_global(url, cluster, expected, held, max_examples))
        # Only a sidecar that answered and differs may still converge; one that cannot be
        # read is reported as it is.
        waiting = [r for r in results if r.diverged and r.error is None]
        if not waiting or time.monotonic() > deadline:
            return results
        if any(r.newer for r in results):
            logger.info("a sidecar holds writes newer than the topics read: reading them again")
            expected = global_winners(spark, clusters)
        else:
            time.sleep(0.5)
