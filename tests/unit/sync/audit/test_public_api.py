"""Pin the exported names of ``sync.audit``: changing its public surface must be deliberate."""

from __future__ import annotations

import sync.audit


def test_audit_exports() -> None:
    assert sorted(sync.audit.__all__) == sorted(
        [
            "ANOMALY_COLUMNS", "ARCHIVE_COLUMNS", "Action", "AnomalyKind", "AnomalyRow",
            "AnomalyRules", "AuditError", "AuditOutputs", "AuditSummary", "DEFAULT_MASTER",
            "HISTORY_COLUMNS", "KafkaSource", "PoisonReason", "ReportData",
            "SCHEMA_VERSION_COLUMNS", "SchemaReport", "SchemaVersionRow", "Severity",
            "SidecarDivergence", "SidecarError", "SparkConfig", "SparkProgress", "SparkSchemas",
            "SparkSetupError", "changed_fields", "check_source", "decode_records", "read_log",
            "reconcile", "render_report", "resolve_spark_jars", "run_archive", "run_audit",
            "spark_session", "transition_anomaly", "validate_master", "validate_sidecar_url",
            "write_parquet",
            # geo: the audit across clusters
            "GEO_WRITE_COLUMNS", "GeoCluster", "GeoWrite", "GlobalDivergence",
            "cross_cluster_lines", "geo_cluster", "geo_lines", "geo_writes",
            "global_winners", "reconcile_geo", "run_geo_audit",
        ]
    )  # fmt: skip
    for name in sync.audit.__all__:
        assert getattr(sync.audit, name) is not None
