"""The schema registry's history, for the audit: every version of every topic's schema.

Pulsar's schema registry (:mod:`sync.cluster._schemas`) is one compacted record per base
topic in the registry topic (``__policy_sync.registry``): key ``schema/<topic>``, value the
topic's whole history as JSON (``{"topic", "versions": [{"version", "type", "timestamp",
"user", "isDeleted", …}]}``), rewritten by every upload and soft delete; a forced delete
(``DELETE …/schema?force=true``) is a tombstone, after which versions count from 0 again.

:func:`schema_versions` reads every ``schema/`` record of that topic (the other keys —
brokers, layouts, permissions — are skipped) and gives one row per version: ``topic``,
``version``, ``type`` (``NONE`` for a soft delete's marker), ``timestamp`` (when the
registry wrote it), ``deleted`` (a soft delete's marker), ``forced`` (false), ``user`` (the
role that wrote it; empty without authentication) and where it was first seen
(``partition``, ``offset``: a version is in every later record of its topic, and is listed
once). A forced delete is a row of its own: ``version`` null, ``deleted`` and ``forced``
true, ``timestamp`` the tombstone's Kafka timestamp; so is a record whose value is not a
schema history: ``unreadable`` true (a sidecar quarantines it), ``timestamp`` the record's.

A compacted registry keeps each topic's latest record, which holds every version since
the last forced delete; versions a forced delete dropped are listed only while their
records are still in the log. As the rest of the audit, this is SQL expressions only: no
Python runs on executors.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields as dataclass_fields
from typing import Any

from pyspark.sql import Column, DataFrame, Observation, Window
from pyspark.sql import functions as F

from sync._constants import REGISTRY_KEY_SCHEMA

from ._report import SchemaReport, SchemaVersionRow, utc_of_millis

__all__ = [
    "SCHEMA_VERSION_COLUMNS",
    "collect_schema_report",
    "schema_metrics",
    "schema_versions",
]

#: Rows of the schema history listed in the report (all are in ``DIR/schemas``).
_REPORT_ROWS = 500

SCHEMA_VERSION_COLUMNS = (
    "topic",
    "version",
    "type",
    "timestamp",
    "deleted",
    "forced",
    "unreadable",
    "user",
    "partition",
    "offset",
)

#: The part of a history record the audit reads (``data`` and ``properties`` are left out:
#: the schema texts belong to the registry, not to its audit trail).
_HISTORY = (
    "struct<topic: string, versions: array<struct<version: bigint, type: string, "
    "timestamp: bigint, user: string, isDeleted: boolean>>>"
)


def _topic_of_key(key: Column) -> Column:
    return F.substring(key, len(REGISTRY_KEY_SCHEMA) + 1, 1 << 30)


def schema_versions(raw: DataFrame, observation: Observation | None = None) -> DataFrame:
    """One row per schema version, forced delete and unreadable record in the registry
    topic's records ``raw`` (Spark's Kafka source rows), columns
    :data:`SCHEMA_VERSION_COLUMNS`, in one partition ordered by topic and first appearance.
    With ``observation``, the report's counts are gathered while the rows are written
    (:func:`schema_metrics`): no job of their own.

    One scan and one exchange: a registry holds a record per topic (small beside the change
    log), so every row goes to one partition, where the deduplication, the order and the
    count of topics need no further shuffle.
    """
    value = F.col("value")
    records = raw.select(
        _topic_of_key(F.col("key").cast("string")).alias("topic"),
        F.col("key").cast("string").startswith(REGISTRY_KEY_SCHEMA).alias("is_schema"),
        value,
        "partition",
        "offset",
        F.unix_millis("timestamp").alias("record_millis"),
        F.from_json(value.cast("string"), _HISTORY, {"mode": "PERMISSIVE"}).alias("h"),
    ).where(F.col("is_schema"))
    # each record's rows: its versions, or itself (a tombstone, or no schema history)
    versions = F.transform(
        "h.versions",
        lambda v: F.struct(
            v["version"].alias("version"),
            v["type"].alias("type"),
            v["timestamp"].alias("millis"),
            F.coalesce(v["isDeleted"], F.lit(False)).alias("deleted"),
            F.lit(False).alias("forced"),
            F.lit(False).alias("unreadable"),
            F.coalesce(v["user"], F.lit("")).alias("user"),
            F.lit(None).cast("bigint").alias("record"),
        ),
    )
    itself = F.array(
        F.struct(
            F.lit(None).cast("bigint").alias("version"),
            F.lit(None).cast("string").alias("type"),
            F.col("record_millis").alias("millis"),
            value.isNull().alias("deleted"),
            value.isNull().alias("forced"),
            value.isNotNull().alias("unreadable"),
            F.lit(None).cast("string").alias("user"),
            F.col("offset").alias("record"),  # never merged with another record's row
        )
    )
    entries = F.when(value.isNull() | F.col("h.versions").isNull(), itself).otherwise(versions)
    rows = (
        records.select("topic", "partition", "offset", F.explode(entries).alias("e"))
        .repartition(1)
        .groupBy("topic", "e")
        # a version is in every later record of its topic (one key: one partition)
        .agg(F.min(F.struct("offset", "partition")).alias("first"))
        .select(
            "topic",
            F.col("e.version").alias("version"),
            F.col("e.type").alias("type"),
            F.timestamp_millis("e.millis").alias("timestamp"),
            F.col("e.deleted").alias("deleted"),
            F.col("e.forced").alias("forced"),
            F.col("e.unreadable").alias("unreadable"),
            F.col("e.user").alias("user"),
            F.col("first.partition").alias("partition"),
            F.col("first.offset").alias("offset"),
        )
    )
    if observation is None:
        return rows.sortWithinPartitions(*_ORDER)
    # The table's order (a window without partitionBy: the one partition): each topic's
    # first version is counted there, so the observed metrics need no DISTINCT (refused).
    order = Window.orderBy(*_ORDER)
    earlier = F.last(F.when(_is_version(), F.col("topic")), ignorenulls=True).over(
        order.rowsBetween(Window.unboundedPreceding, -1)
    )
    first_of_topic = _is_version() & (earlier.isNull() | (earlier != F.col("topic")))
    counted = rows.withColumn(_FIRST, first_of_topic).observe(observation, *schema_metrics())
    return counted.drop(_FIRST)


#: The table's order: by topic, then as the registry wrote them.
_ORDER = ("topic", "partition", "offset", "version")


def _is_version() -> Column:
    return ~F.col("forced") & ~F.col("unreadable")


#: Set while the metrics are observed: the row is its topic's first version.
_FIRST = "_first_of_topic"


def schema_metrics() -> list[Column]:
    """The counts the report shows, as aggregates over :func:`schema_versions`' rows."""
    return [
        F.count(F.when(F.col(_FIRST), 1)).alias("topics"),
        F.count(F.when(_is_version() & ~F.col("deleted"), 1)).alias("versions"),
        F.count(F.when(_is_version() & F.col("deleted"), 1)).alias("soft"),
        F.count(F.when(F.col("forced"), 1)).alias("forced"),
        F.count(F.when(F.col("unreadable"), 1)).alias("unreadable"),
        F.count(F.lit(1)).alias("rows"),
    ]


def collect_schema_report(
    versions: DataFrame, metrics: Mapping[str, Any], source: str, max_rows: int = _REPORT_ROWS
) -> SchemaReport:
    """What the report shows of the written schema versions: ``metrics`` (observed while
    they were written, see :func:`schema_versions`) and their first ``max_rows`` rows (one
    small job)."""
    columns = [
        F.unix_millis("timestamp").alias(f.name) if f.name == "timestamp" else F.col(f.name)
        for f in dataclass_fields(SchemaVersionRow)
    ]
    rows = [
        SchemaVersionRow(**{**r.asDict(), "timestamp": utc_of_millis(r["timestamp"])})
        for r in versions.select(*columns).orderBy(*_ORDER).limit(max_rows).collect()
    ]
    return SchemaReport(
        source=source,
        topics=int(metrics.get("topics") or 0),
        versions=int(metrics.get("versions") or 0),
        soft_deletes=int(metrics.get("soft") or 0),
        forced_deletes=int(metrics.get("forced") or 0),
        unreadable=int(metrics.get("unreadable") or 0),
        total_rows=int(metrics.get("rows") or 0),
        rows=rows,
    )
