"""The audit of global policies across geo clusters: every write of every global key, which
one won and why (``policy-audit geo``).

Input: each cluster's own ``policy-sync-global-events`` (the *origin* topics; the mirrors
``<origin>.policy-sync-global-events`` are MirrorMaker 2's copies of them and add nothing),
read with Spark's Kafka source (``read_committed``, headers included). Each record is judged
by the readers' own rule, :func:`sync.geo.judge_global` (stamp from the headers
``policy-sync.hlc``/``policy-sync.cluster``/``policy-sync.event-id``, the stamp's cluster
must be the topic's, the value must decode), run in Spark's Python workers as
``policy-audit reconcile`` runs :func:`sync.table.judge`: a refused record is
``quarantined`` and never competes, as in every sidecar. Per key, the competing stamps are
collected and the winner chosen by :func:`sync.geo.wins` (the one merge rule: last writer by
hybrid timestamp, ties by cluster name, then event id), and each write is told why with
:func:`sync.geo.why`: the winner against the runner-up, every loser against the winner
("later hybrid timestamp", "tie, higher cluster id"). Per key the groups are small (one
record per write the compaction kept), so the Python runs over a list per key.

Columns (:data:`GEO_WRITE_COLUMNS`): ``key``, ``origin`` (the cluster whose topic holds the
record), ``partition``, ``offset``, ``timestamp`` (Kafka's), ``hlc`` (packed), ``hlc_ms``,
``hlc_counter``, ``stamp_cluster``, ``event_id``, ``action`` (UPDATE or DELETE; null when
quarantined), ``outcome`` (won, lost, quarantined), ``reason``, ``winner_event_id``,
``winner_cluster``.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from sync._constants import GLOBAL_EVENTS_TOPIC
from sync._errors import ConfigurationError, InvalidInputError
from sync.geo import LOGICAL_BITS, Stamp, judge_global, policy_decoder, unpack_hlc, why, wins
from sync.policy._codec import Codec

from ._decode import KafkaSource, check_source, read_log
from ._errors import spark_errors

logger = logging.getLogger(__name__)

__all__ = [
    "GEO_WRITE_COLUMNS",
    "GeoCluster",
    "GeoWrite",
    "ONLY_WRITE",
    "geo_cluster",
    "geo_lines",
    "geo_writes",
    "global_winners",
    "run_geo_audit",
]

GEO_WRITE_COLUMNS = (
    "key",
    "origin",
    "partition",
    "offset",
    "timestamp",
    "hlc",
    "hlc_ms",
    "hlc_counter",
    "stamp_cluster",
    "event_id",
    "action",
    "outcome",
    "reason",
    "winner_event_id",
    "winner_cluster",
)
#: The reason of a key's winner when nothing competed with it.
ONLY_WRITE = "only write"


@dataclass(frozen=True, slots=True)
class GeoCluster:
    """One cluster of the audit: its name (the stamps' cluster) and its global topic."""

    name: str
    source: KafkaSource


def geo_cluster(text: str, options: Mapping[str, str] | None = None) -> GeoCluster:
    """``NAME=BOOTSTRAP`` (``--cluster east=127.0.0.1:21092``) as a cluster to audit.

    Raises:
        ConfigurationError: no ``=``, an empty name, a bad bootstrap list.
    """
    name, sep, bootstrap = text.partition("=")
    if not sep or not name.strip() or not bootstrap.strip():
        raise ConfigurationError(f"--cluster {text!r}: expected NAME=BOOTSTRAP_SERVERS")
    source = KafkaSource(bootstrap.strip(), GLOBAL_EVENTS_TOPIC, dict(options or {}))
    return GeoCluster(name.strip(), source)


def _check_clusters(clusters: Sequence[GeoCluster]) -> None:
    names = [c.name for c in clusters]
    if not names:
        raise InvalidInputError("name at least one --cluster NAME=BOOTSTRAP_SERVERS")
    if len(set(names)) != len(names):
        raise InvalidInputError(f"--cluster names repeat: {', '.join(names)}")


# ----------------------------------------------------------------------- Python workers

_DECODERS: dict[str, Any] = {}
_JUDGED = StructType(
    [
        StructField("hlc", LongType()),
        StructField("stamp_cluster", StringType()),
        StructField("event_id", StringType()),
        StructField("action", StringType()),
        StructField("refused", StringType()),
    ]
)
_WINNER = StructType(
    [
        StructField("hlc", LongType()),
        StructField("cluster", StringType()),
        StructField("event_id", StringType()),
        StructField("reason", StringType()),
    ]
)


def _judge(
    schema_dir: str,
    origin: str,
    key: bytes | None,
    value: bytes | None,
    headers: Iterable[Row] | None,
) -> tuple[int | None, str | None, str | None, str | None, str | None]:
    """One record, by the readers' rule: (hlc, cluster, event id, action, why refused)."""
    decode = _DECODERS.get(schema_dir)
    if decode is None:
        decode = _DECODERS[schema_dir] = policy_decoder(Codec(Path(schema_dir)))
    pairs = [(h["key"], None if h["value"] is None else bytes(h["value"])) for h in headers or ()]
    record = judge_global(
        origin,
        None if key is None else bytes(key),
        None if value is None else bytes(value),
        pairs,
        decode,
    )
    s = record.stamp
    hlc, cluster, event_id = (None, None, None) if s is None else (s.hlc, s.cluster, s.event_id)
    if record.refused is not None:
        return hlc, cluster, event_id, None, record.refused[1]
    return hlc, cluster, event_id, "DELETE" if record.value is None else "UPDATE", None


def _stamp(row: Row) -> Stamp:
    return Stamp(int(row["hlc"]), str(row["stamp_cluster"]), str(row["event_id"]))


def _winner(stamps: Sequence[Row]) -> tuple[int, str, str, str]:
    """The key's winner by :func:`sync.geo.wins`, and why it beat the runner-up."""
    best: Stamp | None = None
    runner_up: Stamp | None = None
    for stamp in (_stamp(r) for r in stamps):
        if wins(stamp, best):
            best, runner_up = stamp, best
        elif stamp != best and wins(stamp, runner_up):
            runner_up = stamp
    assert best is not None  # noqa: S101 - a group has at least one row
    reason = ONLY_WRITE if runner_up is None else why(best, runner_up)
    return best.hlc, best.cluster, best.event_id, reason


def _lost(
    w_hlc: int | None,
    w_cluster: str | None,
    w_event: str | None,
    hlc: int | None,
    cluster: str | None,
    event_id: str | None,
) -> str | None:
    """Why a record lost to the key's winner (None for the winner itself and for records
    that did not compete: Spark runs a Python function on every row, whatever the CASE)."""
    if None in (w_hlc, w_cluster, w_event, hlc, cluster, event_id):
        return None
    winner = Stamp(int(w_hlc or 0), str(w_cluster), str(w_event))
    loser = Stamp(int(hlc or 0), str(cluster), str(event_id))
    return why(winner, loser) if wins(winner, loser) else None


# ----------------------------------------------------------------------- Spark job


def geo_writes(
    spark: SparkSession, clusters: Sequence[GeoCluster], *, codec: Codec | None = None
) -> DataFrame:
    """Every record of every cluster's global topic, judged, with the key's winner and why
    (columns: :data:`GEO_WRITE_COLUMNS`)."""
    _check_clusters(clusters)
    schema_dir = str((codec or Codec()).current.path.parent)
    judge = F.udf(functools.partial(_judge, schema_dir), _JUDGED, useArrow=False)
    frames = []
    for cluster in clusters:
        raw = read_log(spark, cluster.source)
        frames.append(
            raw.select(
                F.col("key").cast("string").alias("key"),
                F.lit(cluster.name).alias("origin"),
                "partition",
                "offset",
                "timestamp",
                judge(F.lit(cluster.name), F.col("key"), F.col("value"), F.col("headers")).alias(
                    "j"
                ),
            )
        )
    records = functools.reduce(DataFrame.unionByName, frames).select(
        "key", "origin", "partition", "offset", "timestamp", "j.*"
    )
    winner = F.udf(_winner, _WINNER, useArrow=False)
    competing = records.where(F.col("refused").isNull() & F.col("key").isNotNull())
    winners = (
        competing.groupBy("key")
        .agg(F.collect_list(F.struct("hlc", "stamp_cluster", "event_id")).alias("stamps"))
        .select("key", winner("stamps").alias("w"))
    )
    lost = F.udf(_lost, StringType(), useArrow=False)
    joined = records.join(winners, on="key", how="left")
    is_winner = (F.col("event_id") == F.col("w.event_id")) & (
        F.col("stamp_cluster") == F.col("w.cluster")
    )
    outcome = (
        F.when(F.col("refused").isNotNull(), F.lit("quarantined"))
        .when(is_winner, F.lit("won"))
        .otherwise(F.lit("lost"))
    )
    reason = (
        F.when(F.col("refused").isNotNull(), F.col("refused"))
        .when(is_winner, F.col("w.reason"))
        .otherwise(
            lost(
                F.col("w.hlc"),
                F.col("w.cluster"),
                F.col("w.event_id"),
                F.col("hlc"),
                F.col("stamp_cluster"),
                F.col("event_id"),
            )
        )
    )
    logical = (1 << LOGICAL_BITS) - 1  # the clock's counter bits (sync.geo's packing)
    return joined.select(
        "key",
        "origin",
        "partition",
        "offset",
        "timestamp",
        "hlc",
        F.shiftright(F.col("hlc"), LOGICAL_BITS).alias("hlc_ms"),
        (F.col("hlc").bitwiseAND(F.lit(logical))).alias("hlc_counter"),
        "stamp_cluster",
        "event_id",
        "action",
        outcome.alias("outcome"),
        reason.alias("reason"),
        F.col("w.event_id").alias("winner_event_id"),
        F.col("w.cluster").alias("winner_cluster"),
    )


@dataclass(frozen=True, slots=True)
class GeoWrite:
    """One row of :func:`geo_writes`, collected."""

    key: str | None
    origin: str
    partition: int
    offset: int
    hlc: int | None
    stamp_cluster: str | None
    event_id: str | None
    action: str | None
    outcome: str
    reason: str

    @classmethod
    def of(cls, row: Row) -> GeoWrite:
        return cls(
            row["key"],
            row["origin"],
            int(row["partition"]),
            int(row["offset"]),
            row["hlc"],
            row["stamp_cluster"],
            row["event_id"],
            row["action"],
            row["outcome"],
            row["reason"],
        )

    def line(self) -> str:
        where = f"{GLOBAL_EVENTS_TOPIC}[{self.partition}]@{self.offset}"
        if self.hlc is None:
            stamp = "no stamp"
        else:
            ms, counter = unpack_hlc(self.hlc)
            at = datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
            stamp = f"hlc {at}Z+{counter} {self.stamp_cluster} {self.event_id}"
        action = self.action or "-"
        return f"  {self.outcome:<11} {self.origin:<8} {action:<6} {stamp}  ({self.reason}) {where}"


def global_winners(
    spark: SparkSession, clusters: Sequence[GeoCluster], *, codec: Codec | None = None
) -> dict[str, tuple[Stamp, bool]]:
    """What every sidecar's global table must hold once it has read every origin's records:
    per key, the winning stamp and whether it is a delete."""
    for cluster in clusters:
        check_source(cluster.source)
    with spark_errors("the global policies' winners"):
        rows = (
            geo_writes(spark, clusters, codec=codec)
            .where(F.col("outcome") == "won")
            .select("key", "hlc", "stamp_cluster", "event_id", "action")
            .collect()
        )
    return {r["key"]: (_stamp(r), r["action"] == "DELETE") for r in rows}


def run_geo_audit(
    spark: SparkSession,
    clusters: Sequence[GeoCluster],
    *,
    output: Path | None = None,
    codec: Codec | None = None,
) -> list[GeoWrite]:
    """Every write of every global key, judged (and written to ``output/geo`` as Parquet
    when given), ordered by key, winner first, then by stamp."""
    _check_clusters(clusters)
    for cluster in clusters:
        check_source(cluster.source)
    with spark_errors("the audit of global policies across clusters"):
        frame = geo_writes(spark, clusters, codec=codec).cache()
        try:
            if output is not None:
                from ._job import write_parquet  # noqa: PLC0415 - the batch job's writer

                write_parquet(frame, output / "geo")
            rows = frame.orderBy(
                F.col("key").asc_nulls_last(),
                (F.col("outcome") != "won"),
                F.col("hlc").desc_nulls_last(),
            ).collect()
        finally:
            frame.unpersist()
    return [GeoWrite.of(r) for r in rows]


def geo_lines(writes: Sequence[GeoWrite], clusters: Sequence[str], max_keys: int) -> list[str]:
    """The audit as text: per key its writes, winner first; then a summary line."""
    out: list[str] = []
    keys: list[str | None] = []
    for write in writes:
        if not keys or keys[-1] != write.key:
            keys.append(write.key)
            if len(keys) <= max_keys:
                out.append(write.key or "(no key)")
        if len(keys) <= max_keys:
            out.append(write.line())
    if len(keys) > max_keys:
        out.append(f"... and {len(keys) - max_keys:,} more keys")
    quarantined = sum(1 for w in writes if w.outcome == "quarantined")
    contested = len({w.key for w in writes if w.outcome == "lost" and w.key is not None})
    out.append(
        f"{len(keys):,} global keys, {len(writes):,} records in {', '.join(clusters)}'s "
        f"global topics; {contested:,} keys written more than once, {quarantined:,} records "
        "quarantined"
    )
    return out
