"""Audit plumbing that needs no Spark: public names, schemas, jars, sources, sidecar answers."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import sync.audit
from sync import Codec, ConfigurationError, InvalidInputError
from sync.audit import (
    KafkaSource,
    SidecarDivergence,
    SidecarError,
    SparkSchemas,
    SparkSetupError,
    resolve_spark_jars,
    validate_master,
    validate_sidecar_url,
)
from sync.audit._jars import JARS_ENV_VAR, _artifact
from sync.audit._reconcile import parse_entries, parse_positions


def test_public_names_are_pinned() -> None:
    assert sorted(sync.audit.__all__) == sorted(
        [
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
            "decode_records",
            "read_log",
            "write_parquet",
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
            "SCHEMA_VERSION_COLUMNS",
            "SchemaReport",
            "SchemaVersionRow",
            "Severity",
            "SidecarDivergence",
            "SidecarError",
            "SparkConfig",
            "SparkProgress",
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
        ]
    )
    for name in sync.audit.__all__:
        assert hasattr(sync.audit, name), name


def test_audit_errors_live_in_the_one_exception_tree() -> None:
    import sync._errors as errors

    # One class each, importable from sync.audit and from the library's tree.
    assert sync.audit.AuditError is errors.AuditError
    assert sync.audit.SparkSetupError is errors.SparkSetupError
    assert sync.audit.SidecarError is errors.SidecarError
    assert issubclass(errors.AuditError, errors.PolicySyncError)
    assert issubclass(errors.SparkSetupError, errors.AuditError)
    assert issubclass(errors.SidecarError, errors.AuditError)
    tree = errors.__doc__ or ""
    for name in ("AuditError", "SparkSetupError", "SidecarError"):
        assert name in errors.__all__
        assert re.search(rf"[├└]── {name}\b", tree), f"{name} is not drawn in the tree"
    failure = errors.SidecarError("http://h:1", "answered HTTP 500")
    assert str(failure) == "sidecar http://h:1: answered HTTP 500"


class TestSchemas:
    def test_every_codec_version_is_there_with_its_fingerprint(self) -> None:
        codec = Codec()
        schemas = SparkSchemas.load(codec)
        assert {v.fingerprint for v in schemas.versions} == set(codec.versions)
        assert {v.name for v in schemas.versions} >= {"current", "v1"}

    def test_each_schema_defines_every_named_type_exactly_once(self) -> None:
        # Java's Avro parser (what from_avro uses) refuses a redefined name.
        for version in SparkSchemas.load().versions:
            text = version.json
            definitions = re.findall(r'"type": "(?:record|enum)"[^{}]*?"name": "([\w.]+)"', text)
            definitions += re.findall(r'"name": "([\w.]+)"[^{}]*?"type": "(?:record|enum)"', text)
            named = {n for n in definitions if n.startswith("policysync.")}
            for name in named:
                assert len(re.findall(rf'"name": "{re.escape(name)}"', text)) == 1, name
            json.loads(text)

    def test_policy_fields_leave_out_the_scope_flag(self) -> None:
        schemas = SparkSchemas.load()
        assert "isGlobal" not in schemas.policy_fields
        assert "maxConsumerPerTopic" in schemas.policy_fields
        assert "shadowTopics" in schemas.policy_fields  # added in v2
        assert schemas.map_fields == {"backLogQuotaMap", "subscriptionPolicies"}


class TestJars:
    @pytest.mark.parametrize(
        ("name", "artifact"),
        [
            ("spark-sql-kafka-0-10_2.13-4.1.1.jar", "spark-sql-kafka-0-10_2.13"),
            (
                "spark-token-provider-kafka-0-10_2.13-4.0.0.jar",
                "spark-token-provider-kafka-0-10_2.13",
            ),
            ("hive-exec-2.3.10-core.jar", "hive-exec"),
            ("netty-codec-native-quic-4.2.7.Final-linux-aarch_64.jar", "netty-codec-native-quic"),
            ("commons-pool2-2.12.1.jar", "commons-pool2"),
            ("guava-33.4.8-jre.jar", "guava"),
        ],
    )
    def test_artifact_names(self, name: str, artifact: str) -> None:
        assert _artifact(Path(name)) == artifact

    def test_the_environment_can_name_the_jars(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        jar = tmp_path / "x.jar"
        jar.write_bytes(b"PK")
        monkeypatch.setenv(JARS_ENV_VAR, f"{jar}, ")
        assert resolve_spark_jars() == [jar]
        monkeypatch.setenv(JARS_ENV_VAR, str(tmp_path / "missing.jar"))
        with pytest.raises(ConfigurationError, match="missing"):
            resolve_spark_jars()

    def test_a_pom_for_another_spark_is_refused(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.delenv(JARS_ENV_VAR, raising=False)
        pom = tmp_path / "pom.xml"
        pom.write_text("<project><properties><spark.version>3.5.0</spark.version></properties>")
        with pytest.raises(SparkSetupError, match="pins Spark 3.5.0"):
            resolve_spark_jars(pom)

    def test_the_shipped_pom_matches_pyspark(self) -> None:
        import pyspark

        pom = Path(__file__).resolve().parents[4] / "sync" / "audit" / "connectors.pom.xml"
        pinned = re.search(r"<spark\.version>([^<]+)</spark\.version>", pom.read_text())
        assert pinned is not None and pinned.group(1) == pyspark.__version__


class TestConfig:
    @pytest.mark.parametrize(
        "master", ["local", "local[2]", "local[*]", "local[4,2]", "spark://h:7077", "yarn"]
    )
    def test_masters(self, master: str) -> None:
        assert validate_master(master) == master

    @pytest.mark.parametrize("master", ["", "local[0]", "local[x]", "bogus", "spark://"])
    def test_bad_masters(self, master: str) -> None:
        with pytest.raises(ConfigurationError):
            validate_master(master)

    def test_source_options_that_make_the_audit_correct_are_its_own(self) -> None:
        with pytest.raises(ConfigurationError, match="set by the audit"):
            KafkaSource("h:1", options={"kafka.isolation.level": "read_uncommitted"})
        with pytest.raises(ConfigurationError, match="unknown Kafka source option"):
            KafkaSource("h:1", options={"colour": "blue"})
        with pytest.raises(ConfigurationError):
            KafkaSource("no-port")
        options = KafkaSource("h:1", options={"kafka.security.protocol": "SSL"}).spark_options()
        assert options["kafka.isolation.level"] == "read_committed"
        assert options["failOnDataLoss"] == "false"
        assert options["includeHeaders"] == "true"
        assert options["startingOffsets"] == "earliest"
        assert options["kafka.security.protocol"] == "SSL"


class TestSidecarAnswers:
    def test_urls(self) -> None:
        assert validate_sidecar_url(" http://127.0.0.1:8080/ ") == "http://127.0.0.1:8080"
        for bad in ("ftp://h:1", "127.0.0.1:8080", "http://", "http://h:99999"):
            with pytest.raises(InvalidInputError):
                validate_sidecar_url(bad)

    def test_entries(self) -> None:
        digest = "ab" * 32
        assert parse_entries({"entries": {"k": digest.upper()}}) == {"k": digest}
        bad_answers: list[object] = [
            {},
            {"entries": []},
            {"entries": {"k": "zz"}},
            {"entries": {"k": 1}},
        ]
        for bad in bad_answers:
            with pytest.raises(SidecarError):
                parse_entries(bad, "http://h:1")

    def test_positions(self) -> None:
        assert parse_positions({"positions": {"0": 5, "3": "7"}}) == {0: 5, 3: 7}
        with pytest.raises(SidecarError):
            parse_positions({"positions": {"x": 1}})
        with pytest.raises(SidecarError):
            parse_positions({"digest": "…"})

    def test_divergence_summary(self) -> None:
        ok = SidecarDivergence("http://a:1", {0: 3}, True, 2, 2, 2, 0, 0, 0, ())
        assert not ok.diverged and "in sync" in ok.lines()[0]
        bad = SidecarDivergence(
            "http://b:1", {0: 3}, True, 2, 2, 1, 1, 1, 0, (("k", "missing", "aa", None),)
        )
        assert bad.diverged
        assert any("missing   k" in line for line in bad.lines())
        assert "... and 1 more" in bad.lines()[-1]
        down = SidecarDivergence.failed("http://c:1", "connection refused")
        assert down.diverged and "UNREACHABLE" in down.lines()[0]
