"""The audit runs: a batch audit of the log, and the archive that outlives compaction.

Both end the same way (:func:`build_outputs`): ``DIR/history`` and ``DIR/anomalies``
(Parquet, rewritten on every run) and ``DIR/report.html``; given the registry topic, also
``DIR/schemas``, the schema registry's history (:mod:`._schema_versions`), read whole on
every run. The archive run first appends
whatever the log gained since its checkpoint to ``DIR/archive`` (Parquet, append-only,
one row per record, written by Structured Streaming with ``trigger(availableNow)``) and
then derives history, diffs and anomalies from the whole archive, so versions that
compaction removed from the log since are still in the report.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from dataclasses import fields as dataclass_fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, IntegerType, LongType, StructType, TimestampType

from sync._errors import ConfigurationError

from ._decode import (
    ARCHIVE_COLUMNS,
    KAFKA_ROW_SCHEMA,
    KafkaSource,
    check_source,
    cluster_by_key,
    decode_records,
    read_log,
    stream_log,
    with_policies_from_json,
)
from ._errors import AuditError, spark_errors
from ._history import anomalies_frame, history_frame
from ._progress import SparkProgress
from ._report import AnomalyRow, ReportData, SchemaReport, render_report, utc_now
from ._rules import CHANGE_ACTIONS, AnomalyRules, Severity, choose_bucket_seconds
from ._schema_versions import collect_schema_report, schema_versions
from ._schemas import SparkSchemas

logger = logging.getLogger(__name__)

__all__ = [
    "AuditOutputs",
    "AuditSummary",
    "build_outputs",
    "collect_report_data",
    "run_archive",
    "run_audit",
    "write_parquet",
]

_TOP_NAMESPACES = 8
_TOP_FIELDS = 25
_TOP_AUTHORS = 10
_REPORT_ANOMALIES = 500
_OTHER_NAMESPACES = "(other namespaces)"
_NO_AUTHOR = "(no metadata: v1 event or bare tombstone)"


@dataclass(frozen=True, slots=True)
class AuditOutputs:
    """Where a run writes: ``history``, ``anomalies``, ``report.html``, ``archive`` in a dir."""

    root: Path

    @classmethod
    def at(cls, directory: Path | str) -> AuditOutputs:
        root = Path(directory).expanduser().resolve()
        if root.exists() and not root.is_dir():
            raise ConfigurationError(f"--output {root} exists and is not a directory")
        root.mkdir(parents=True, exist_ok=True)
        return cls(root)

    @property
    def history(self) -> Path:
        return self.root / "history"

    @property
    def anomalies(self) -> Path:
        return self.root / "anomalies"

    @property
    def report(self) -> Path:
        return self.root / "report.html"

    @property
    def archive(self) -> Path:
        return self.root / "archive"

    @property
    def schemas(self) -> Path:
        return self.root / "schemas"


@dataclass(frozen=True, slots=True)
class AuditSummary:
    """What a run found, for the console and for callers."""

    source: str
    outputs: AuditOutputs
    records: int
    keys: int
    first: datetime | None
    last: datetime | None
    actions: Mapping[str, int]
    #: (kind, severity) -> count
    anomalies: Mapping[tuple[str, str], int]
    elapsed_s: float
    #: Records the archive run appended (None for a batch audit).
    archived: int | None = None
    extra: Mapping[str, str] = field(default_factory=dict)
    #: The schema registry's history (None: the registry topic was not read).
    schemas: SchemaReport | None = None

    @property
    def anomaly_total(self) -> int:
        return sum(self.anomalies.values())

    @property
    def errors(self) -> int:
        return sum(n for (_, sev), n in self.anomalies.items() if sev == Severity.ERROR.value)

    def lines(self) -> list[str]:
        """The console summary."""
        span = f"{self.first:%Y-%m-%d %H:%M:%S} .. {self.last:%Y-%m-%d %H:%M:%S} UTC"
        out = [
            f"audited {self.source}",
            f"  records   {self.records:>10,}   keys {self.keys:,}"
            + (f"   ({span})" if self.first and self.last else ""),
            "  actions   " + ", ".join(f"{a} {n:,}" for a, n in sorted(self.actions.items()) if n)
            if self.actions
            else "  actions   none",
        ]
        if self.archived is not None:
            out.append(f"  archived  {self.archived:>10,} new records this run")
        if self.anomalies:
            out.append(f"  anomalies {self.anomaly_total:>10,}   ({self.errors:,} errors)")
            for (kind, severity), n in sorted(self.anomalies.items(), key=lambda kv: -kv[1]):
                out.append(f"    {n:>10,}  {kind} ({severity})")
        else:
            out.append("  anomalies          0")
        if self.schemas is not None:
            s = self.schemas
            out.append(
                f"  schemas   {s.versions:>10,} versions of {s.topics:,} topics "
                f"({s.soft_deletes:,} soft and {s.forced_deletes:,} forced deletes, "
                f"{s.unreadable:,} unreadable)"
            )
        out += [
            f"  history   {self.outputs.history}",
            f"  anomalies {self.outputs.anomalies}",
        ]
        if self.schemas is not None:
            out.append(f"  schemas   {self.outputs.schemas}")
        out += [
            f"  report    {self.outputs.report}",
            f"  took {self.elapsed_s:.1f}s",
        ]
        return out


def _utc(epoch_ms: int | None) -> datetime | None:
    """Naive UTC datetime (Spark hands timestamps to Python in the *local* zone)."""
    return None if epoch_ms is None else _utc_required(epoch_ms)


#: Column types whose Parquet min/max statistics are worth their cost (cheap to keep, and
#: what readers prune row groups by: offsets, partitions, times, sizes, flags).
_STATISTICS_TYPES = (IntegerType, LongType, TimestampType, BooleanType)


def _parquet_options(schema: StructType) -> dict[str, str]:
    """Parquet without dictionaries, with min/max statistics for numbers, times and flags only.

    Measured on the history of a million events: the writer's dictionary hash maps and its
    byte-wise min/max of every string cost a quarter of the write, for nothing a reader
    uses (strings are compressed by snappy all the same; nobody prunes by a JSON text).
    """
    options = {
        "parquet.enable.dictionary": "false",
        "parquet.column.statistics.enabled": "false",
        "parquet.size.statistics.enabled": "false",
    }
    for column in schema.fields:
        if isinstance(column.dataType, _STATISTICS_TYPES):
            options[f"parquet.column.statistics.enabled#{column.name}"] = "true"
    return options


def write_parquet(frame: DataFrame, path: Path) -> None:
    """``frame`` to Parquet at ``path`` (replacing it), written as described above."""
    frame.write.mode("overwrite").options(**_parquet_options(frame.schema)).parquet(str(path))


def _utc_required(epoch_ms: int) -> datetime:
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).replace(tzinfo=None)


def _progress(spark: SparkSession, progress: SparkProgress | None) -> SparkProgress:
    return progress or SparkProgress(spark, enabled=False)


def run_audit(
    spark: SparkSession,
    source: KafkaSource,
    output: Path | str,
    *,
    rules: AnomalyRules | None = None,
    schemas: SparkSchemas | None = None,
    progress: SparkProgress | None = None,
    registry: KafkaSource | None = None,
) -> AuditSummary:
    """Batch audit: read the whole log once, write history, anomalies and the report;
    with ``registry`` (the cluster's registry topic), the schema history too."""
    started = time.monotonic()
    schemas = schemas or SparkSchemas.load()
    outputs = AuditOutputs.at(output)
    check_source(source)
    if registry is not None:
        check_source(registry)
    with spark_errors(f"auditing {source.describe()}"):
        records = decode_records(cluster_by_key(read_log(spark, source)), schemas)
        return build_outputs(
            spark,
            records,
            outputs,
            source=f"Kafka topic {source.describe()}",
            rules=rules or AnomalyRules(),
            schemas=schemas,
            progress=_progress(spark, progress),
            started=started,
            registry=registry,
        )


def _archive_schema(spark: SparkSession, schemas: SparkSchemas) -> StructType:
    empty = spark.createDataFrame([], KAFKA_ROW_SCHEMA)
    return decode_records(empty, schemas).select(*ARCHIVE_COLUMNS).schema


def run_archive(
    spark: SparkSession,
    source: KafkaSource,
    checkpoint: Path | str,
    output: Path | str,
    *,
    rules: AnomalyRules | None = None,
    schemas: SparkSchemas | None = None,
    progress: SparkProgress | None = None,
    registry: KafkaSource | None = None,
) -> AuditSummary:
    """Append new records to ``DIR/archive`` (streaming, availableNow), then report on it all
    (with ``registry``, the schema history too: read whole, not archived)."""
    started = time.monotonic()
    schemas = schemas or SparkSchemas.load()
    outputs = AuditOutputs.at(output)
    checkpoint_dir = Path(checkpoint).expanduser().resolve()
    if checkpoint_dir == outputs.archive or outputs.archive in checkpoint_dir.parents:
        raise ConfigurationError("--checkpoint must not be inside the archive directory")
    checkpoint_dir.parent.mkdir(parents=True, exist_ok=True)
    check_source(source)
    if registry is not None:
        check_source(registry)
    progress = _progress(spark, progress)
    with spark_errors(f"archiving {source.describe()}"):
        return _archive(
            spark, source, checkpoint_dir, outputs, rules, schemas, progress, started, registry
        )


def _archive(
    spark: SparkSession,
    source: KafkaSource,
    checkpoint_dir: Path,
    outputs: AuditOutputs,
    rules: AnomalyRules | None,
    schemas: SparkSchemas,
    progress: SparkProgress,
    started: float,
    registry: KafkaSource | None,
) -> AuditSummary:
    stream = decode_records(stream_log(spark, source), schemas).select(*ARCHIVE_COLUMNS)
    with progress.step("archiving new records"):
        query = (
            stream.writeStream.format("parquet")
            .options(**_parquet_options(stream.schema))
            .option("path", str(outputs.archive))
            .option("checkpointLocation", str(checkpoint_dir))
            .outputMode("append")
            .trigger(availableNow=True)
            .start()
        )
        try:
            query.awaitTermination()
        except PySparkException as exc:
            raise AuditError(
                f"archiving {source.describe()} failed: {exc}; the checkpoint at "
                f"{checkpoint_dir} is unchanged past the last complete batch, rerun to resume"
            ) from exc
    appended = sum(int(p.get("numInputRows", 0)) for p in query.recentProgress)
    archived = spark.read.schema(_archive_schema(spark, schemas)).parquet(str(outputs.archive))
    records = with_policies_from_json(cluster_by_key(archived), spark, schemas)
    summary = build_outputs(
        spark,
        records,
        outputs,
        source=f"archive {outputs.archive} of Kafka topic {source.describe()}",
        rules=rules or AnomalyRules(),
        schemas=schemas,
        progress=progress,
        started=started,
        registry=registry,
    )
    return dataclasses.replace(summary, elapsed_s=time.monotonic() - started, archived=appended)


def build_outputs(
    spark: SparkSession,
    records: DataFrame,
    outputs: AuditOutputs,
    *,
    source: str,
    rules: AnomalyRules,
    schemas: SparkSchemas,
    progress: SparkProgress,
    started: float,
    registry: KafkaSource | None = None,
) -> AuditSummary:
    """Decoded records -> DIR/history, DIR/anomalies, DIR/report.html (and the registry's
    schema versions -> DIR/schemas); returns the summary."""
    observation = Observation("policy-audit")
    with progress.step("history and diffs"):
        write_parquet(history_frame(records, schemas, rules, observation), outputs.history)
    metrics = observation.get
    history = spark.read.parquet(str(outputs.history))
    with progress.step("anomalies"):
        write_parquet(anomalies_frame(history, rules), outputs.anomalies)
    anomalies = spark.read.parquet(str(outputs.anomalies))
    schema_report = None
    if registry is not None:
        with progress.step("schema history"):
            counted = Observation("policy-audit-schemas")
            write_parquet(schema_versions(read_log(spark, registry), counted), outputs.schemas)
            written = spark.read.parquet(str(outputs.schemas))
            where = f"Kafka topic {registry.describe()}"
            schema_report = collect_schema_report(written, counted.get, where)
    with progress.step("report"):
        data = collect_report_data(history, anomalies, metrics, source=source, rules=rules)
        data = dataclasses.replace(data, schemas=schema_report)
    outputs.report.write_text(render_report(data), encoding="utf-8")
    counts: dict[tuple[str, str], int] = {(k, s): n for k, s, n in data.anomaly_counts}
    return AuditSummary(
        source,
        outputs,
        data.records,
        data.keys,
        data.first,
        data.last,
        dict(data.actions),
        counts,
        time.monotonic() - started,
        schemas=schema_report,
    )


def collect_report_data(
    history: DataFrame,
    anomalies: DataFrame,
    metrics: Mapping[str, Any],
    *,
    source: str,
    rules: AnomalyRules,
    max_anomalies: int = _REPORT_ANOMALIES,
) -> ReportData:
    """What the report shows: ``metrics`` (observed while the history was written) plus
    the counts of one aggregation over the written history and anomalies, and the first
    anomalies. Two Spark jobs in all: each job costs planning, code generation and task
    start-up, which on a small log is most of the time."""

    def prefixed(prefix: str) -> dict[str, int]:
        return {
            name[len(prefix) :]: int(n)
            for name, n in metrics.items()
            if name.startswith(prefix) and n
        }

    actions, scopes = prefixed("action:"), prefixed("scope:")
    first, last = _utc(metrics.get("first_ms")), _utc(metrics.get("last_ms"))
    span = (last - first).total_seconds() if first and last else 0.0
    bucket = choose_bucket_seconds(span)
    tallies = _tallies(history, anomalies, bucket)
    rows = tallies.limit(_COLLECT_LIMIT + 1).collect()
    counted = [(r["tag"], int(r["count"])) for r in rows]
    if len(counted) > _COLLECT_LIMIT:
        counted = _reduced_tallies(tallies)
    fields, authors, anomaly_counts, timeline = _from_tallies(counted)
    columns = [
        F.unix_millis("timestamp").alias(f.name) if f.name == "timestamp" else F.col(f.name)
        for f in dataclass_fields(AnomalyRow)
    ]
    listed = [
        AnomalyRow(**{**r.asDict(), "timestamp": _utc(r["timestamp"])})
        for r in anomalies.select(*columns)
        .orderBy((F.col("severity") != Severity.ERROR.value), "timestamp", "partition", "offset")
        .limit(max_anomalies)
        .collect()
    ]
    return ReportData(
        source=source,
        generated_at=utc_now(),
        records=int(metrics.get("records", 0)),
        keys=int(metrics.get("keys") or 0),
        first=first,
        last=last,
        actions=actions,
        scopes=scopes,
        bucket_s=bucket,
        changes_over_time=timeline,
        field_changes=fields,
        authors=authors,
        anomaly_counts=anomaly_counts,
        anomalies=listed,
        anomalies_total=sum(n for _, _, n in anomaly_counts),
        rules=rules,
    )


#: Tags of the report's tally (field names have no control characters; the rest are
#: prefixed with one): ``<field>``, ``\x1ft<namespace>\x1f<bucket ms>``, ``\x1fa<author>``,
#: ``\x1fk<kind>\x1f<severity>``.
_SEP = "\x1f"
_TIMELINE, _AUTHOR, _ANOMALY = _SEP + "t", _SEP + "a", _SEP + "k"
#: Tallies up to this many distinct tags are collected whole; beyond (a huge number of
#: namespaces or authors) they are cut down in Spark first.
_COLLECT_LIMIT = 50_000


def _tallies(history: DataFrame, anomalies: DataFrame, bucket_s: int) -> DataFrame:
    """(tag, count) of every field changed, every change per namespace and time bucket,
    every change per author, and every anomaly per kind and severity: one job."""
    is_change = F.col("action").isin(*[a.value for a in CHANGE_ACTIONS])
    namespace = F.coalesce(F.col("namespace"), F.lit("(unparsable key)"))
    start = F.floor(F.unix_seconds("timestamp") / bucket_s) * bucket_s * 1000
    per_change = F.array(
        F.concat(F.lit(_TIMELINE), namespace, F.lit(_SEP), start.cast("string")),
        F.concat(F.lit(_AUTHOR), F.coalesce("author", F.lit(_NO_AUTHOR))),
    )
    tags = F.concat(
        F.when(is_change, per_change).otherwise(F.array().cast("array<string>")),
        F.col("changed_fields"),
    )
    kinds = F.concat(F.lit(_ANOMALY), F.col("kind"), F.lit(_SEP), F.col("severity"))
    return (
        history.select(F.explode(tags).alias("tag"))
        .unionByName(anomalies.select(kinds.alias("tag")))
        .groupBy("tag")
        .count()
    )


def _reduced_tallies(tallies: DataFrame) -> list[tuple[str, int]]:
    """The tallies the report needs when there are too many to collect: the top fields and
    authors, every anomaly count, the top namespaces' buckets and the rest merged."""
    tallies = tallies.persist()
    try:
        tag, n = F.col("tag"), F.col("count")
        timeline = tallies.where(tag.startswith(_TIMELINE)).select(
            F.substring_index(F.substring(tag, len(_TIMELINE) + 1, 1 << 30), _SEP, 1).alias("ns"),
            F.substring_index(tag, _SEP, -1).alias("start"),
            n,
        )
        top = [
            r["ns"]
            for r in timeline.groupBy("ns")
            .agg(F.sum("count").alias("n"))
            .orderBy(F.desc("n"), "ns")
            .limit(_TOP_NAMESPACES)
            .collect()
        ]
        label = F.when(F.col("ns").isin(*top), F.col("ns")).otherwise(F.lit(_OTHER_NAMESPACES))
        merged = timeline.groupBy(label.alias("ns"), "start").agg(F.sum("count").alias("count"))
        parts = [
            tallies.where(~tag.startswith(_SEP)).orderBy(F.desc("count"), "tag").limit(_TOP_FIELDS),
            tallies.where(tag.startswith(_AUTHOR))
            .orderBy(F.desc("count"), "tag")
            .limit(_TOP_AUTHORS),
            tallies.where(tag.startswith(_ANOMALY)),
            merged.select(
                F.concat(F.lit(_TIMELINE), "ns", F.lit(_SEP), "start").alias("tag"), "count"
            ),
        ]
        union = parts[0]
        for part in parts[1:]:
            union = union.unionByName(part)
        return [(r["tag"], int(r["count"])) for r in union.collect()]
    finally:
        tallies.unpersist()


def _top(counts: Mapping[str, int], n: int) -> list[tuple[str, int]]:
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]


def _from_tallies(
    counted: list[tuple[str, int]],
) -> tuple[
    list[tuple[str, int]],
    list[tuple[str, int]],
    list[tuple[str, str, int]],
    list[tuple[datetime, str, int]],
]:
    """Fields, authors, anomaly counts and the timeline (top namespaces, the rest merged)."""
    fields: dict[str, int] = {}
    authors: dict[str, int] = {}
    anomaly_counts: list[tuple[str, str, int]] = []
    buckets: dict[tuple[str, int], int] = {}
    for tag, n in counted:
        if not tag.startswith(_SEP):
            fields[tag] = n
        elif tag.startswith(_AUTHOR):
            authors[tag[len(_AUTHOR) :]] = n
        elif tag.startswith(_ANOMALY):
            kind, _, severity = tag[len(_ANOMALY) :].rpartition(_SEP)
            anomaly_counts.append((kind, severity, n))
        elif tag.startswith(_TIMELINE):
            namespace, _, at = tag[len(_TIMELINE) :].rpartition(_SEP)
            buckets[(namespace, int(at))] = buckets.get((namespace, int(at)), 0) + n
    per_namespace: dict[str, int] = {}
    for (namespace, _), n in buckets.items():
        if namespace != _OTHER_NAMESPACES:
            per_namespace[namespace] = per_namespace.get(namespace, 0) + n
    top = {ns for ns, _ in _top(per_namespace, _TOP_NAMESPACES)}
    timeline: dict[tuple[int, str], int] = {}
    for (namespace, start), n in buckets.items():
        label = namespace if namespace in top else _OTHER_NAMESPACES
        timeline[(start, label)] = timeline.get((start, label), 0) + n
    anomaly_counts.sort(key=lambda t: (-t[2], t[0], t[1]))
    return (
        _top(fields, _TOP_FIELDS),
        _top(authors, _TOP_AUTHORS),
        anomaly_counts,
        [(_utc_required(start), label, n) for (start, label), n in sorted(timeline.items())],
    )
