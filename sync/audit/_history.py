"""History (field-level diffs) and anomalies, as Spark column expressions.

Per key, records are ordered by (partition, offset), the order every cache applies them
in. One window pass gives each record the previous *change* record of its key (INSERT,
UPDATE or DELETE; poison and NONE records change nothing and are skipped) and the
previous event time; diffs, transition anomalies and ordering anomalies are then plain
column expressions. Duplicate event ids and bursts need other groupings and are computed
from the written history.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Observation, Window
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, MapType, StructType

from sync.policy._policies import PolicyScope

from ._rules import (
    CHANGE_ACTIONS,
    TRANSITION_RULES,
    Action,
    AnomalyKind,
    AnomalyRules,
    Severity,
    Transition,
)
from ._schemas import SparkSchemas
from ._sql import ident, string

__all__ = [
    "ANOMALY_COLUMNS",
    "HISTORY_COLUMNS",
    "anomalies_frame",
    "history_frame",
    "summary_metrics",
]

HISTORY_COLUMNS = (
    "key",
    "scope",
    "topic",
    "tenant",
    "namespace",
    "action",
    "tombstone",
    "changed_fields",
    "before",
    "after",
    "author",
    "origin",
    "event_time",
    "event_id",
    "kafka_topic",
    "partition",
    "offset",
    "timestamp",
    "event_type",
    "schema_version",
    "replicate_to",
    "value_size",
    "poison_reason",
    "anomalies",
)

ANOMALY_COLUMNS = (
    "kind",
    "severity",
    "detail",
    "key",
    "namespace",
    "kafka_topic",
    "partition",
    "offset",
    "timestamp",
    "event_id",
    "author",
)


def _comparable(field: str, data_type: DataType) -> str:
    """SQL for a policy field in a form that compares by content: maps as sorted entries."""
    value = f"policies.{ident(field)}"
    if isinstance(data_type, MapType):
        return f"array_sort(map_entries({value}))"
    return value


_ANOMALY_TYPE = "array<struct<kind: string, severity: string, detail: string>>"


def _anomaly(condition: Column, kind: AnomalyKind, severity: Severity, detail: Column) -> Column:
    """A one-anomaly array when ``condition`` holds, else an empty one (concat-able)."""
    found = F.struct(
        F.lit(kind.value).alias("kind"),
        F.lit(severity.value).alias("severity"),
        detail.alias("detail"),
    )
    return F.when(condition, F.array(found)).otherwise(F.array().cast(_ANOMALY_TYPE))


#: Small integer codes for actions: the per-row rules compare ints, not strings.
_CODES: dict[Action, int] = {
    Action.NONE: 0,
    Action.INSERT: 1,
    Action.UPDATE: 2,
    Action.DELETE: 3,
    Action.POISON: 4,
}


def _transition_conditions() -> list[tuple[Column, Transition]]:
    code, previous = F.col("_code"), F.col("_prev.a")
    out = []
    for (before, now), rule in TRANSITION_RULES.items():
        after_prev = previous.isNull() if before is None else previous == _CODES[before]
        out.append(((code == _CODES[now]) & after_prev, rule))
    return out


def history_frame(
    records: DataFrame,
    schemas: SparkSchemas,
    rules: AnomalyRules,
    observation: Observation | None = None,
) -> DataFrame:
    """Decoded records -> history rows with ``changed_fields``, ``before`` and ``anomalies``.

    With an ``observation``, the job that consumes the frame also fills it with the run's
    totals (see :func:`summary_metrics`): the report needs no second pass for them.

    Fields are compared by value with null-safe equality (maps as sorted entries, so key
    order does not count). The window carries the previous change's comparable fields (a
    struct of mostly nulls, a few hundred bytes in Spark's row format) rather than the
    whole decoded event.
    """
    policies_type = records.schema["policies"].dataType
    if not isinstance(policies_type, StructType):
        raise TypeError(f"policies must be a struct column, not {policies_type}")
    types = {f.name: f.dataType for f in policies_type.fields}
    fields = schemas.policy_fields
    # The per-field expressions are SQL text, one JVM call each: built from Column objects
    # they took about half of the ~9,000 Py4J round trips of planning a run.
    codes = " ".join(f"WHEN {string(a.value)} THEN {n}" for a, n in _CODES.items())
    action_code = F.expr(f"CASE action {codes} ELSE {_CODES[Action.NONE]} END")
    # A missing policy (first record, delete) compares exactly like "every field unset".
    comparable = F.expr(
        "struct(" + ", ".join(f"{_comparable(f, types[f])} AS {ident(f)}" for f in fields) + ")"
    )
    # The window copies every row it buffers: leave the wide policy struct behind.
    narrow = records.select(
        *[c for c in records.columns if c != "policies"],
        comparable.alias("_fields"),
        action_code.alias("_code"),
    )
    code = F.col("_code")
    change = f"_code BETWEEN {_CODES[Action.INSERT]} AND {_CODES[Action.DELETE]}"
    is_change = F.expr(change)
    earlier = (
        "OVER (PARTITION BY key ORDER BY partition, offset "
        "ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)"
    )
    link = f"CASE WHEN {change} THEN struct(_code AS a, _fields AS f, after AS j) END"
    staged = narrow.select(
        "*",
        F.expr(f"last({link}, true) {earlier}").alias("_prev"),
        F.expr(f"last(event_time, true) {earlier}").alias("_prev_time"),
        F.expr(f"last(true, true) {earlier} IS NULL").alias("_first_of_key"),
    )

    # array_remove of a sentinel, not filter(array, lambda): higher-order functions are
    # interpreted row by row, array_remove is compiled. No previous change (null struct)
    # reads as every field unset.
    changed = F.expr(
        "array_remove(array("
        + ", ".join(
            f"CASE WHEN {change} AND NOT (_fields.{ident(f)} <=> _prev.f.{ident(f)}) "
            f"THEN {string(f)} ELSE '' END"
            for f in fields
        )
        + "), '')"
    )
    tolerance = rules.out_of_order_tolerance_ms
    out_of_order = F.unix_millis("event_time") < F.unix_millis("_prev_time") - F.lit(tolerance)
    is_poison = code == _CODES[Action.POISON]
    transitions = _transition_conditions()
    anomalies = [
        _anomaly(is_poison, AnomalyKind.POISON, Severity.ERROR, F.col("poison_detail")),
        *[_anomaly(cond, r.kind, r.severity, F.lit(r.detail)) for cond, r in transitions],
        _anomaly(
            out_of_order,
            AnomalyKind.OUT_OF_ORDER,
            Severity.WARNING,
            F.concat(
                F.lit("event time "),
                F.date_format("event_time", "yyyy-MM-dd HH:mm:ss.SSS"),
                F.lit(" is before "),
                F.date_format("_prev_time", "yyyy-MM-dd HH:mm:ss.SSS"),
                F.lit(", the event time of an earlier record of this key"),
            ),
        ),
    ]
    # Almost no record has an anomaly: test the conditions, build arrays only when one holds.
    # (A comparison with null is null, which when() treats as false.)
    any_anomaly = is_poison | out_of_order
    for cond, _ in transitions:
        any_anomaly = any_anomaly | cond
    anomalies_column = F.when(any_anomaly, F.concat(*anomalies)).otherwise(
        F.array().cast(_ANOMALY_TYPE)
    )
    derived = {
        "changed_fields": changed,
        "before": F.when(is_change, F.col("_prev.j")),
        "anomalies": anomalies_column,
    }
    internal = ["_first_of_key", "_code"]
    history = staged.select(
        *[derived.get(c, F.col(c)).alias(c) for c in HISTORY_COLUMNS], *internal
    )
    if observation is not None:
        history = history.observe(observation, *summary_metrics())
    return history.drop(*internal)


def summary_metrics() -> list[Column]:
    """Totals gathered while the history is written (Spark's ``observe``).

    Kept to a dozen: every metric is evaluated for every record (31 per-field counters
    here cost more than one later scan of ``changed_fields``).
    """

    def count_if(condition: Column, name: str) -> Column:
        return F.sum(F.when(condition, 1).otherwise(0)).alias(name)

    return [
        F.count(F.lit(1)).alias("records"),
        count_if(F.col("_first_of_key") & F.col("key").isNotNull(), "keys"),
        F.min(F.unix_millis("timestamp")).alias("first_ms"),
        F.max(F.unix_millis("timestamp")).alias("last_ms"),
        *[count_if(F.col("_code") == n, f"action:{a.value}") for a, n in _CODES.items()],
        *[count_if(F.col("scope") == s.value, f"scope:{s.value}") for s in PolicyScope],
    ]


def anomalies_frame(history: DataFrame, rules: AnomalyRules) -> DataFrame:
    """Every anomaly: per-record ones, duplicate event ids and bursts (one row each)."""
    per_record = history.where(F.size("anomalies") > 0).select(
        F.explode("anomalies").alias("a"), *[c for c in ANOMALY_COLUMNS if c in HISTORY_COLUMNS]
    )
    per_record = per_record.select(
        F.col("a.kind").alias("kind"),
        F.col("a.severity").alias("severity"),
        F.col("a.detail").alias("detail"),
        *[c for c in ANOMALY_COLUMNS if c in HISTORY_COLUMNS],
    )

    # Ids are hashed to longs first: grouping a million 36-character ids is the expensive
    # part, and almost none repeat. Only rows whose hash repeats are looked at exactly.
    with_ids = history.where(F.col("event_id").isNotNull()).withColumn("_h", F.xxhash64("event_id"))
    repeated = with_ids.groupBy("_h").count().where(F.col("count") > 1).select("_h")
    suspects = with_ids.join(F.broadcast(repeated), on="_h")
    by_id = Window.partitionBy("event_id").orderBy("kafka_topic", "partition", "offset")
    duplicates = (
        suspects.select(
            *[c for c in ANOMALY_COLUMNS if c in HISTORY_COLUMNS],
            F.row_number().over(by_id).alias("_n"),
            F.first(F.struct("kafka_topic", "partition", "offset")).over(by_id).alias("_first"),
        )
        .where(F.col("_n") > 1)
        .select(
            F.lit(AnomalyKind.DUPLICATE_EVENT_ID.value).alias("kind"),
            F.lit(Severity.ERROR.value).alias("severity"),
            F.concat(
                F.lit("event id "),
                F.col("event_id"),
                F.lit(" was first seen at "),
                F.col("_first.kafka_topic"),
                F.lit("["),
                F.col("_first.partition").cast("string"),
                F.lit("]@"),
                F.col("_first.offset").cast("string"),
            ).alias("detail"),
            *[c for c in ANOMALY_COLUMNS if c in HISTORY_COLUMNS],
        )
    )

    window = f"{rules.burst_window_s} seconds"
    bursts = (
        history.where(
            F.col("action").isin(*[a.value for a in CHANGE_ACTIONS])
            & F.col("namespace").isNotNull()
        )
        # Grouped by the change log too (an audit reads one): first(kafka_topic) instead
        # would make Spark sort the million rows for a sort-based aggregate.
        .groupBy("namespace", "kafka_topic", F.window("timestamp", window).alias("w"))
        .count()
        .withColumnRenamed("count", "n")
        .where(F.col("n") > rules.burst_threshold)
        .select(
            F.lit(AnomalyKind.BURST.value).alias("kind"),
            F.lit(Severity.WARNING.value).alias("severity"),
            F.concat(
                F.col("n").cast("string"),
                F.lit(f" changes to namespace policies in {rules.burst_window_s}s from "),
                F.date_format("w.start", "yyyy-MM-dd HH:mm:ss"),
                F.lit(f" UTC (threshold: more than {rules.burst_threshold})"),
            ).alias("detail"),
            F.lit(None).cast("string").alias("key"),
            "namespace",
            "kafka_topic",
            F.lit(None).cast("int").alias("partition"),
            F.lit(None).cast("long").alias("offset"),
            F.col("w.start").alias("timestamp"),
            F.lit(None).cast("string").alias("event_id"),
            F.lit(None).cast("string").alias("author"),
        )
    )
    columns = list(ANOMALY_COLUMNS)
    return (
        per_record.select(*columns)
        .unionByName(duplicates.select(*columns))
        .unionByName(bursts.select(*columns))
    )
