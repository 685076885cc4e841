"""Reading ``__change_events`` with Spark's Kafka source and decoding it with ``from_avro``.

Decoding is Spark work end to end: the fingerprint (bytes 3..10 of the value) picks the
writer schema, ``from_avro`` decodes the body (``substring(value, 11, …)``) with that
writer schema and resolves it to the current (reader) schema through the ``avroSchema``
option, i.e. Avro's own schema resolution, as the Python codec does with fastavro. Older
versions therefore come out with the current columns (fields they lack are null). With
``mode=PERMISSIVE`` a body that does not decode yields an all-null struct instead of
failing the job: that record is poison, reported, and the audit goes on. (Unlike the
Python codec, Java's decoder does not notice bytes left over after a complete body; such
a record decodes here and is not reported.)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro
from pyspark.sql.types import StructType

from sync._constants import (
    CHANGE_EVENTS_TOPIC,
    GLOBAL_KEY_PREFIX,
    HEADER_AUTHOR,
    HEADER_EVENT_ID,
    HEADER_ORIGIN,
    HEADER_TIMESTAMP,
    NAMESPACE_KEY_PREFIX,
    SINGLE_OBJECT_HEADER_LEN,
    SINGLE_OBJECT_MAGIC,
)
from sync._errors import ConfigurationError, NotFoundError
from sync.policy._policies import PolicyScope
from sync.transport import KafkaConfig, KafkaTransport

from ._rules import CHANGE_ACTIONS, Action, PoisonReason
from ._schemas import SparkSchemas
from ._sql import ident, string

__all__ = [
    "ARCHIVE_COLUMNS",
    "KAFKA_ROW_SCHEMA",
    "KafkaSource",
    "check_source",
    "cluster_by_key",
    "decode_records",
    "policies_type",
    "read_log",
    "stream_log",
    "with_policies_from_json",
]

# Set by the audit, never by the caller: what makes the read correct.
_FIXED_OPTIONS = frozenset(
    {
        "kafka.bootstrap.servers",
        "kafka.isolation.level",
        "subscribe",
        "subscribePattern",
        "assign",
        "startingOffsets",
        "endingOffsets",
        "failOnDataLoss",
        "includeHeaders",
    }
)
_TUNING_OPTIONS = frozenset(
    {
        "minPartitions",
        "maxOffsetsPerTrigger",
        "minOffsetsPerTrigger",
        "fetchOffset.numRetries",
        "fetchOffset.retryIntervalMs",
        "kafkaConsumer.pollTimeoutMs",
    }
)
_POLICY_EVENTS = ("TOPIC_POLICY", "NAMESPACE_POLICY")


@dataclass(frozen=True, slots=True)
class KafkaSource:
    """Which change log to audit.

    ``options`` go to Spark's Kafka source as they are: ``kafka.*`` consumer settings (e.g.
    ``kafka.security.protocol``) and the source's tuning knobs (``minPartitions``, …). The
    options that make the audit correct (offsets, isolation level, data-loss handling,
    headers) are the audit's own and are refused here.
    """

    bootstrap_servers: str
    topic: str = CHANGE_EVENTS_TOPIC
    options: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        KafkaConfig(self.bootstrap_servers)  # validates host:port[,host:port]
        if not self.topic.strip():
            raise ConfigurationError("the change-events topic name is empty")
        for key in self.options:
            if key in _FIXED_OPTIONS:
                raise ConfigurationError(f"Kafka source option {key!r} is set by the audit")
            if not key.startswith("kafka.") and key not in _TUNING_OPTIONS:
                raise ConfigurationError(
                    f"unknown Kafka source option {key!r}: use kafka.<consumer setting> or "
                    f"one of {sorted(_TUNING_OPTIONS)}"
                )
        object.__setattr__(self, "options", MappingProxyType(dict(self.options)))

    def spark_options(self) -> dict[str, str]:
        return {
            "kafka.bootstrap.servers": self.bootstrap_servers,
            "subscribe": self.topic,
            "startingOffsets": "earliest",
            # A compacted, transactional topic has offset gaps that look like data loss.
            "failOnDataLoss": "false",
            # Aborted transactions never happened: no cache applies them, nor does the audit.
            "kafka.isolation.level": "read_committed",
            "includeHeaders": "true",
            **self.options,
        }

    def describe(self) -> str:
        return f"{self.topic} on {self.bootstrap_servers}"


def check_source(source: KafkaSource, timeout_s: float = 15.0) -> int | None:
    """Fail fast (before Spark's Kafka source retries for a minute) if the topic is missing.

    Returns the topic's partition count, or None when the check was skipped because the
    source carries ``kafka.*`` settings (e.g. security) only the Java client understands.
    """
    if any(k.startswith("kafka.") for k in source.options):
        return None
    admin = KafkaTransport(KafkaConfig(source.bootstrap_servers, client_id="policy-audit")).admin()
    description = admin.describe_topic(source.topic, timeout_s)
    if description is None:
        raise NotFoundError(
            f"topic {source.topic!r} does not exist on {source.bootstrap_servers}: nothing to "
            "audit (wrong --topic or --bootstrap-servers?)"
        )
    return description.partitions


def read_log(
    spark: SparkSession, source: KafkaSource, ending_offsets: Mapping[int, int] | None = None
) -> DataFrame:
    """The whole log as a batch, up to ``ending_offsets`` (exclusive; default: the end)."""
    ending = "latest"
    if ending_offsets is not None:
        ending = json.dumps({source.topic: {str(p): o for p, o in sorted(ending_offsets.items())}})
    reader = spark.read.format("kafka").options(**source.spark_options())
    return reader.option("endingOffsets", ending).load()


def cluster_by_key(frame: DataFrame) -> DataFrame:
    """Records of one key together, in log order: the order the history window needs.

    Done on the raw (or archived) rows, before decoding: the shuffle then moves compact
    rows, and decoding and the per-key window run after it in one stage (Spark sees the
    distribution and ordering already satisfied and adds no second exchange).
    """
    keyed = frame.withColumn("key", F.col("key").cast("string"))
    return keyed.repartition("key").sortWithinPartitions("key", "partition", "offset")


def stream_log(spark: SparkSession, source: KafkaSource) -> DataFrame:
    """The log as a stream (the first run starts at the beginning; the checkpoint resumes)."""
    return spark.readStream.format("kafka").options(**source.spark_options()).load()


def _decoded(schemas: SparkSchemas) -> tuple[Column, Column]:
    value = F.col("value")
    fingerprint = F.substring(value, 3, SINGLE_OBJECT_HEADER_LEN - 2)
    header = SINGLE_OBJECT_HEADER_LEN
    body = F.expr(f"substring(value, {header + 1}, length(value) - {header})")
    options = {"mode": "PERMISSIVE", "avroSchema": schemas.reader_json}
    decoded = F.coalesce(
        *[
            F.when(fingerprint == F.lit(v.fingerprint), from_avro(body, v.json, options))
            for v in schemas.versions
        ]
    )
    version = F.coalesce(
        *[F.when(fingerprint == F.lit(v.fingerprint), F.lit(v.name)) for v in schemas.versions]
    )
    return decoded, version


def _poison_reason() -> Column:
    value = F.col("value")
    return (
        F.when(F.col("key").isNull(), F.lit(PoisonReason.NO_KEY.value))
        .when(value.isNull(), F.lit(None))
        .when(F.substring(value, 1, 2) != F.lit(SINGLE_OBJECT_MAGIC), PoisonReason.BAD_MAGIC.value)
        .when(F.length(value) < SINGLE_OBJECT_HEADER_LEN + 2, PoisonReason.TRUNCATED.value)
        .when(F.col("schema_version").isNull(), PoisonReason.UNKNOWN_FINGERPRINT.value)
        .when(F.col("d.eventType").isNull(), PoisonReason.UNDECODABLE.value)
    )


def _poison_detail() -> Column:
    value = F.col("value")
    reason = F.col("poison_reason")
    fingerprint = F.lower(F.hex(F.substring(value, 3, SINGLE_OBJECT_HEADER_LEN - 2)))
    return (
        F.when(reason == PoisonReason.NO_KEY.value, F.lit("record has no key"))
        .when(
            reason == PoisonReason.BAD_MAGIC.value,
            F.concat(
                F.lit("bad magic "),
                F.lower(F.hex(F.substring(value, 1, 2))),
                F.lit(f" (want {SINGLE_OBJECT_MAGIC.hex()}: Avro single-object encoding)"),
            ),
        )
        .when(
            reason == PoisonReason.TRUNCATED.value,
            F.concat(
                F.lit("value of "),
                F.length(value).cast("string"),
                F.lit(" bytes is too short for a change event"),
            ),
        )
        .when(
            reason == PoisonReason.UNKNOWN_FINGERPRINT.value,
            F.concat(
                F.lit("unknown schema fingerprint "),
                fingerprint,
                F.lit("; is a newer policy-sync writing? run the audit with its schemas/"),
            ),
        )
        .when(
            reason == PoisonReason.UNDECODABLE.value,
            F.concat(
                F.lit("Avro body does not decode with writer schema "),
                F.col("schema_version"),
                F.lit(" (fingerprint "),
                fingerprint,
                F.lit(")"),
            ),
        )
    )


def _namespace_of_key() -> Column:
    """``tenant/namespace`` from the key (tombstones have no body to read it from)."""
    topic = F.col("topic")
    # "domain://tenant/ns/local" -> "tenant/ns" (plain string functions: no regex per row)
    from_topic = F.substring_index(F.substring_index(topic, "://", -1), "/", 2)
    return F.when(
        F.col("scope") == PolicyScope.NAMESPACE.value,
        F.expr(f"substring(key, {len(NAMESPACE_KEY_PREFIX) + 1})"),
    ).when(topic.contains("://") & from_topic.contains("/"), from_topic)


def _header(name: str) -> Column:
    """The last value of header ``name`` as a string (null if absent), like Kafka's
    ``lastHeader``. A higher-order function, so only ever evaluated for tombstones."""
    found = F.filter("headers", lambda h: h["key"] == F.lit(name))
    return F.try_element_at(found, F.lit(-1))["value"].cast("string")


def _metadata(field: str, header: str) -> Column:
    """Event metadata: from the body, or for a tombstone from the writer's headers."""
    return F.when(F.col("tombstone"), _header(header)).otherwise(F.col(f"d.metadata.{field}"))


def _event_time() -> Column:
    # A header that is not a number gives no time rather than failing the job (ANSI cast).
    stamp = _header(HEADER_TIMESTAMP).try_cast("bigint")
    return F.when(F.col("tombstone"), F.timestamp_millis(stamp)).otherwise(
        F.col("d.metadata.timestampMillis")
    )


def _policies(schemas: SparkSchemas) -> Column:
    # SQL text: one JVM call, where a Column per field took a hundred Py4J round trips.
    fields = ", ".join(
        f"d.topicPoliciesEvent.policies.{ident(f)} AS {ident(f)}" for f in schemas.policy_fields
    )
    changes = ", ".join(string(a.value) for a in (Action.INSERT, Action.UPDATE))
    return F.expr(
        f"CASE WHEN action IN ({changes}) AND d.topicPoliciesEvent.policies IS NOT NULL "
        f"THEN struct({fields}) END"
    )


#: What the archive stores of each record (``decode_records`` also returns the ``policies``
#: struct, rebuilt from ``after`` when the archive is read, and ``value_sha256``).
ARCHIVE_COLUMNS = (
    "key",
    "scope",
    "topic",
    "tenant",
    "namespace",
    "action",
    "tombstone",
    "kafka_topic",
    "partition",
    "offset",
    "timestamp",
    "event_time",
    "event_id",
    "author",
    "origin",
    "event_type",
    "schema_version",
    "replicate_to",
    "headers",
    "value_size",
    "poison_reason",
    "poison_detail",
    "after",
)


def decode_records(raw: DataFrame, schemas: SparkSchemas) -> DataFrame:
    """One row per Kafka record: coordinates, scope, action, metadata, decoded policies.

    ``policies`` is the TopicPolicies struct (current schema, ``isGlobal`` dropped) of
    INSERT/UPDATE events; ``after`` is the same as JSON (fields that are set only).
    """
    decoded, version = _decoded(schemas)
    # One projection computes from_avro once per row; the next ones only read its fields
    # (Spark does not inline an expensive expression that is used more than once).
    stage = raw.select(
        F.col("key").cast("string").alias("key"),
        "value",
        F.col("topic").alias("kafka_topic"),
        "partition",
        "offset",
        "timestamp",
        "headers",
        decoded.alias("d"),
        version.alias("schema_version"),
    )
    stage = stage.withColumn("poison_reason", _poison_reason())
    is_policy_event = F.col("d.eventType").isin(*_POLICY_EVENTS)
    action = (
        F.when(F.col("poison_reason").isNotNull(), Action.POISON.value)
        .when(F.col("value").isNull(), Action.DELETE.value)
        .when(
            is_policy_event & F.col("d.actionType").isin(*[a.value for a in CHANGE_ACTIONS]),
            F.col("d.actionType"),
        )
        .otherwise(Action.NONE.value)
    )
    key = F.col("key")
    scope = (
        F.when(key.startswith(NAMESPACE_KEY_PREFIX), PolicyScope.NAMESPACE.value)
        .when(key.startswith(GLOBAL_KEY_PREFIX), PolicyScope.GLOBAL.value)
        .when(key.isNotNull(), PolicyScope.LOCAL.value)
    )
    stage = stage.select(
        "*",
        action.alias("action"),
        scope.alias("scope"),
        (F.col("value").isNull() & key.isNotNull()).alias("tombstone"),
        F.length("value").alias("value_size"),
        F.sha2(F.col("value"), 256).alias("value_sha256"),
        _poison_detail().alias("poison_detail"),
    )
    stage = stage.withColumn(
        "topic",
        F.when(
            F.col("scope") == PolicyScope.GLOBAL.value,
            F.expr(f"substring(key, {len(GLOBAL_KEY_PREFIX) + 1})"),
        ).when(F.col("scope") == PolicyScope.LOCAL.value, key),
    )
    # Tenant and namespace come from the decoded body when there is one (no string
    # parsing per record); tombstones and poison have only their key to tell.
    body = F.col("d.topicPoliciesEvent")
    from_key = _namespace_of_key()
    stage = stage.withColumn(
        "namespace",
        F.when(body.isNotNull(), F.concat(body["tenant"], F.lit("/"), body["namespace"])).otherwise(
            from_key
        ),
    ).withColumn(
        "tenant",
        F.when(body.isNotNull(), body["tenant"]).otherwise(
            F.substring_index(F.col("namespace"), "/", 1)
        ),
    )
    policies = _policies(schemas)
    return stage.select(
        "key",
        "scope",
        "topic",
        "tenant",
        "namespace",
        "action",
        "tombstone",
        "kafka_topic",
        "partition",
        "offset",
        "timestamp",
        _event_time().alias("event_time"),
        _metadata("eventId", HEADER_EVENT_ID).alias("event_id"),
        _metadata("author", HEADER_AUTHOR).alias("author"),
        _metadata("origin", HEADER_ORIGIN).alias("origin"),
        F.col("d.eventType").alias("event_type"),
        "schema_version",
        F.col("d.replicateTo").alias("replicate_to"),
        "headers",
        "value_size",
        "value_sha256",
        "poison_reason",
        "poison_detail",
        policies.alias("policies"),
    ).withColumn("after", F.to_json("policies"))


#: The columns Spark's Kafka source produces (with includeHeaders).
KAFKA_ROW_SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
    "headers array<struct<key: string, value: binary>>"
)


def policies_type(spark: SparkSession, schemas: SparkSchemas) -> StructType:
    """The Spark type of the ``policies`` column (worked out by analysis; runs no job)."""
    empty = spark.createDataFrame([], KAFKA_ROW_SCHEMA)
    found = decode_records(empty, schemas).schema["policies"].dataType
    if not isinstance(found, StructType):
        raise TypeError(f"policies decoded as {found}, not a struct")
    return found


def with_policies_from_json(
    archived: DataFrame, spark: SparkSession, schemas: SparkSchemas
) -> DataFrame:
    """Archived rows with the ``policies`` struct rebuilt from their ``after`` JSON.

    The JSON is read with today's schema: a field added since a row was archived is null.
    """
    return archived.withColumn("policies", F.from_json("after", policies_type(spark, schemas)))
