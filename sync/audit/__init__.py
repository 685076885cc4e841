"""Spark audit of the policy change log: who changed what, when, and does every broker agree?

Three jobs, all on Spark (embedded ``local[*]`` by default, any cluster via ``master``):

* :func:`run_audit` reads ``__change_events`` once with Spark's Kafka source
  (``read_committed``, ``failOnDataLoss=false``), decodes every value with ``from_avro``
  (writer schema picked by the fingerprint in the value's header, resolved to the current
  schema) and writes ``DIR/history`` and ``DIR/anomalies`` (Parquet) and
  ``DIR/report.html``;
* :func:`run_archive` appends what the log gained since its checkpoint to ``DIR/archive``
  (Structured Streaming, ``trigger(availableNow=True)``) and writes the same outputs from
  the whole archive, so versions compaction removed later stay audited;
* :func:`reconcile` derives the state every cache should hold and compares it, key by
  key, with each sidecar's ``/policy-sync/v1/entries``.

``DIR/history``: one row per Kafka record: ``key``, ``scope`` (local/global/namespace),
``topic`` (the policy's topic; null for namespace policies), ``tenant``, ``namespace``
(``tenant/ns``), ``action`` (INSERT/UPDATE/DELETE, a tombstone being a DELETE with
``tombstone`` true; NONE for events that change nothing; POISON), ``changed_fields``
(TopicPolicies fields that differ from the key's previous INSERT/UPDATE/DELETE record:
every set field for a first record or a delete), ``before``/``after`` (the policies as
JSON, ``isGlobal`` left out as the key carries it), ``author``, ``origin``, ``event_time``,
``event_id`` (event metadata: from the body, or for a tombstone from the headers the writer
puts on it, ``policy-sync.author`` etc.; null for v1 events and bare tombstones), ``kafka_topic``,
``partition``, ``offset``, ``timestamp`` (Kafka's), ``event_type``, ``schema_version``,
``replicate_to``, ``value_size``, ``poison_reason`` and ``anomalies`` (the per-record
rules that fired). The raw Kafka headers are not repeated there: what they carry is in
``author``/``origin``/``event_id``/``event_time``, and the archive keeps them as they came.

``DIR/anomalies``: ``kind``, ``severity``, ``detail`` and where (key or namespace, record
coordinates, time, event id, author). The rules and their thresholds are documented in
``sync/audit/_rules.py`` (:class:`AnomalyRules`: a burst is more than 100 changes to one
namespace in one minute by default).

``DIR/schemas`` (when the runs are given the cluster's registry topic, as ``policy-audit``
does by default): the schema registry's history, one row per version of every topic's
schema (``topic``, ``version``, ``type``, ``timestamp``, ``deleted`` for a soft delete's
marker, ``user``), per forced delete (``forced``) and per unreadable record, with where it
was first seen; the report lists them (``sync/audit/_schema_versions.py``).

Across geo clusters (``sync/audit/_geo.py``, ``_geo_reconcile.py``): :func:`run_geo_audit`
lists every write of every global key from each cluster's ``policy-sync-global-events``,
which won and why (the merge rule of :mod:`sync.geo`, run in Spark's Python workers), and
:func:`reconcile_geo` compares every geo sidecar's global table with that state.

The batch audit runs SQL expressions and the JVM Avro decoder only; reconciliation and the
geo audit run the caches' own rules in Spark's Python workers.
The connector jars (spark-sql-kafka, spark-avro, pinned in ``sync/audit/connectors.pom.xml``) are
fetched by Maven on first use and cached (:func:`resolve_spark_jars`).
"""

from ._decode import ARCHIVE_COLUMNS, KafkaSource, check_source, decode_records, read_log
from ._errors import AuditError, SidecarError, SparkSetupError
from ._geo import (
    GEO_WRITE_COLUMNS,
    GeoCluster,
    GeoWrite,
    geo_cluster,
    geo_lines,
    geo_writes,
    global_winners,
    run_geo_audit,
)
from ._geo_reconcile import GlobalDivergence, cross_cluster_lines, reconcile_geo
from ._history import ANOMALY_COLUMNS, HISTORY_COLUMNS
from ._jars import resolve_spark_jars
from ._job import AuditOutputs, AuditSummary, run_archive, run_audit, write_parquet
from ._progress import SparkProgress
from ._reconcile import SidecarDivergence, reconcile, validate_sidecar_url
from ._report import AnomalyRow, ReportData, SchemaReport, SchemaVersionRow, render_report
from ._rules import (
    Action,
    AnomalyKind,
    AnomalyRules,
    PoisonReason,
    Severity,
    changed_fields,
    transition_anomaly,
)
from ._schema_versions import SCHEMA_VERSION_COLUMNS
from ._schemas import SparkSchemas
from ._session import DEFAULT_MASTER, SparkConfig, spark_session, validate_master

__all__ = [
    "ANOMALY_COLUMNS",
    "GEO_WRITE_COLUMNS",
    "GeoCluster",
    "GeoWrite",
    "GlobalDivergence",
    "cross_cluster_lines",
    "geo_cluster",
    "geo_lines",
    "geo_writes",
    "global_winners",
    "reconcile_geo",
    "run_geo_audit",
    "ARCHIVE_COLUMNS",
    "DEFAULT_MASTER",
    "HISTORY_COLUMNS",
    "Action",
    "AnomalyKind",
    "AnomalyRow",
    "AnomalyRules",
    "AuditError",
    "AuditOutputs",
    "AuditSummary",
    "KafkaSource",
    "PoisonReason",
    "ReportData",
    "Severity",
    "SidecarDivergence",
    "SidecarError",
    "SparkConfig",
    "SparkProgress",
    "SCHEMA_VERSION_COLUMNS",
    "SchemaReport",
    "SchemaVersionRow",
    "SparkSchemas",
    "SparkSetupError",
    "changed_fields",
    "check_source",
    "reconcile",
    "render_report",
    "resolve_spark_jars",
    "run_archive",
    "run_audit",
    "spark_session",
    "transition_anomaly",
    "validate_master",
    "validate_sidecar_url",
    "write_parquet",
    "read_log",
    "decode_records",
]
