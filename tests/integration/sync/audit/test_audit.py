"""The Spark audit against a real broker and a real local Spark (``local[2]``).

Every expectation is computed independently of Spark: the log is read back with a plain
consumer and decoded with the Python codec (fastavro), and diffs, transitions, duplicates,
ordering and bursts are recomputed here in Python; so are the schema registry's versions
(decoded by the registry's own :class:`~sync.cluster.SchemaHistory`). One SparkSession (the
session's ``spark`` fixture) serves every test (starting Spark costs seconds; CI has two cores).
"""

from __future__ import annotations

import io
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastavro import schemaless_writer
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from sync import (
    CacheConfig,
    Codec,
    CodecError,
    Policies,
    PolicyService,
    PolicyTarget,
    ServiceConfig,
    WriterConfig,
)
from sync._constants import (
    HEADER_AUTHOR,
    HEADER_EVENT_ID,
    HEADER_ORIGIN,
    HEADER_TIMESTAMP,
    REGISTRY_KEY_SCHEMA,
    SINGLE_OBJECT_MAGIC,
)
from sync.audit import (
    SCHEMA_VERSION_COLUMNS,
    Action,
    AnomalyKind,
    AnomalyRules,
    AuditSummary,
    KafkaSource,
    SparkProgress,
    SparkSchemas,
    _job,
    changed_fields,
    reconcile,
    run_archive,
    run_audit,
    transition_anomaly,
)
from sync.audit._rules import find_bursts
from sync.cluster import SchemaEntry, SchemaHistory, SchemaType
from sync.transport import OFFSET_BEGINNING, KafkaConfig, KafkaTransport, TopicSpec
from tests.support.events import change_event
from tests.support.http import JsonRoutes, http
from tests.support.kafka import free_port
from tests.support.sidecars import Sidecar, run_cli
from tests.support.spark import SPARK_TEST_CONF

_POLICY_EVENTS = ("TOPIC_POLICY", "NAMESPACE_POLICY")
_CHANGES = {Action.INSERT.value, Action.UPDATE.value, Action.DELETE.value}


# ----------------------------------------------------------------------- writing the log


def _service(bootstrap: str, topic: str, author: str, partitions: int = 4) -> PolicyService:
    config = ServiceConfig(
        cache=CacheConfig(topic=topic, partitions=partitions, dead_letter=False),
        writer=WriterConfig(author=author, origin="test_audit"),
    )
    return PolicyService(KafkaTransport(KafkaConfig(bootstrap)), config).start()


def _event(
    codec: Codec,
    key: str,
    action: str,
    policies: dict[str, Any] | None,
    *,
    event_id: str | None = None,
    at_ms: int | None = None,
    author: str = "mallory",
) -> bytes:
    target = PolicyTarget.from_key(key)
    topic = target.topic
    return codec.encode(
        change_event(
            target.tenant,
            target.namespace,
            topic.local_name if topic else "",
            policies,
            action=action,
            domain=topic.domain.value if topic else "",
            event_type="TOPIC_POLICY" if topic else "NAMESPACE_POLICY",
            replicate_to=["standalone"],
            metadata={
                "eventId": event_id or str(uuid.uuid4()),
                "author": author,
                "timestampMillis": at_ms if at_ms is not None else int(time.time() * 1000),
                "origin": "raw-producer",
            },
        )
    )


def _v1_event(codec: Codec, key: str, policies: dict[str, Any]) -> bytes:
    """What a policy-sync of schema v1 wrote: no metadata, older TopicPolicies."""
    v1 = next(v for v in codec.versions.values() if v.name == "v1")
    target = PolicyTarget.from_key(key)
    assert target.topic is not None
    buf = io.BytesIO()
    buf.write(SINGLE_OBJECT_MAGIC + v1.fingerprint)
    schemaless_writer(
        buf,
        v1.parsed,
        {
            "eventType": "TOPIC_POLICY",
            "actionType": "INSERT",
            "topicPoliciesEvent": {
                "domain": "persistent",
                "tenant": target.tenant,
                "namespace": target.namespace,
                "topic": target.topic.local_name,
                "policies": policies,
            },
            "replicateTo": None,
        },
    )
    return buf.getvalue()


def _produce(bootstrap: str, topic: str, records: list[tuple[str, bytes | None]]) -> None:
    producer = KafkaTransport(KafkaConfig(bootstrap)).producer()
    for key, value in records:
        producer.produce(topic, key.encode(), value)
    assert producer.flush(30) == 0
    producer.close()


# ------------------------------------------------------------------ reading it back (oracle)


@dataclass
class Expected:
    partition: int
    offset: int
    key: str
    action: str
    timestamp_ms: int
    event_id: str | None = None
    event_ms: int | None = None
    author: str | None = None
    origin: str | None = None
    tombstone: bool = False
    schema_version: str | None = None
    changed: list[str] | None = None
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None


def _read_back(bootstrap: str, topic: str) -> list[Any]:
    transport = KafkaTransport(KafkaConfig(bootstrap))
    description = transport.admin().describe_topic(topic)
    assert description is not None
    partitions = list(range(description.partitions))
    consumer = transport.consumer(read_committed=True)
    ends = consumer.end_offsets(topic, partitions)
    consumer.assign(topic, dict.fromkeys(partitions, OFFSET_BEGINNING))
    messages: list[Any] = []
    deadline = time.monotonic() + 60
    while any(consumer.positions(topic, partitions)[p] < ends[p] for p in partitions):
        assert time.monotonic() < deadline, "could not read the log back"
        messages.extend(consumer.consume(1000, 0.5))
    consumer.close()
    return sorted(messages, key=lambda m: (m.partition(), m.offset()))


def _strip_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_strip_nulls(v) for v in value]
    return value


def _oracle(messages: list[Any], fields: tuple[str, ...]) -> list[Expected]:
    """The history the audit must produce, from the fastavro codec and plain Python."""
    codec = Codec()
    names = {fp: v.name for fp, v in codec.versions.items()}
    previous: dict[str, tuple[str, dict[str, Any] | None]] = {}
    out = []
    for m in messages:
        key, value = m.key().decode(), m.value()
        row = Expected(m.partition(), m.offset(), key, "", m.timestamp()[1])
        doc: dict[str, Any] | None = None
        if value is not None and value[:2] == SINGLE_OBJECT_MAGIC:
            row.schema_version = names.get(value[2:10])  # known even if the body is broken
        if value is None:
            row.action = Action.DELETE.value
            row.tombstone = True
            # The writer's metadata travels as headers (the last one of a name wins).
            headers = {name: raw.decode() for name, raw in m.headers() or []}
            row.author, row.origin = headers.get(HEADER_AUTHOR), headers.get(HEADER_ORIGIN)
            row.event_id = headers.get(HEADER_EVENT_ID)
            if HEADER_TIMESTAMP in headers:
                row.event_ms = int(headers[HEADER_TIMESTAMP])
        elif codec.check_header(value) is not None:
            row.action = Action.POISON.value
        else:
            try:
                event = codec.decode(value)
            except CodecError:
                row.action = Action.POISON.value
            else:
                meta = event.get("metadata") or {}
                row.event_id, row.author = meta.get("eventId"), meta.get("author")
                row.origin = meta.get("origin")
                if meta.get("timestampMillis") is not None:
                    stamp = meta["timestampMillis"]
                    row.event_ms = round(stamp.timestamp() * 1000)
                action = event["actionType"]
                row.action = (
                    action
                    if event["eventType"] in _POLICY_EVENTS and action in _CHANGES
                    else Action.NONE.value
                )
                if row.action in (Action.INSERT.value, Action.UPDATE.value):
                    policies = event["topicPoliciesEvent"]["policies"]
                    doc = _strip_nulls(Policies.from_avro(policies).to_json_obj())
        if row.action in _CHANGES:
            prev_action, prev_doc = previous.get(key, (None, None))
            row.changed = changed_fields(prev_doc, doc, fields)
            row.before = prev_doc if prev_action is not None else None
            row.after = doc
            previous[key] = (row.action, doc)
        else:
            row.changed = []
        out.append(row)
    return out


def _expected_record_anomalies(rows: list[Expected]) -> set[tuple[str, str, int, int]]:
    """(kind, severity, partition, offset) of every per-record anomaly, recomputed."""
    found = set()
    last_change: dict[str, Action] = {}
    last_time: dict[str, int] = {}
    for row in rows:
        where = (row.partition, row.offset)
        if row.action == Action.POISON.value:
            found.add(("poison", "error", *where))
        if row.action in _CHANGES:
            rule = transition_anomaly(last_change.get(row.key), Action(row.action))
            if rule is not None:
                found.add((rule.kind.value, rule.severity.value, *where))
            last_change[row.key] = Action(row.action)
        if row.event_ms is not None:
            if row.key in last_time and row.event_ms < last_time[row.key]:
                found.add(("out_of_order", "warning", *where))
            last_time[row.key] = row.event_ms
    return found


def _namespace_of(key: str) -> str:
    target = PolicyTarget.from_key(key)
    return f"{target.tenant}/{target.namespace}"


# ---------------------------------------------------------------------------------- tests


@pytest.fixture(scope="module")
def audited_log(kafka_bootstrap: str) -> str:
    """A change log with every kind of record an auditor must see."""
    topic = f"audit-{uuid.uuid4().hex[:10]}"
    orders = PolicyTarget.parse("persistent://acme/shop/orders")
    with _service(kafka_bootstrap, topic, "alice") as svc:
        svc.set(orders, {"maxConsumerPerTopic": 5})
        svc.set(
            orders,
            {
                "maxConsumerPerTopic": 6,
                "retentionPolicies": {"retentionTimeInMinutes": 10, "retentionSizeInMB": 5},
            },
        )
        svc.set(
            orders,
            {
                "backLogQuotaMap": {
                    "destination_storage": {
                        "limitSize": 10,
                        "limitTime": 5,
                        "policy": "producer_exception",
                    }
                }
            },
        )
        svc.set(orders, {"maxConsumerPerTopic": None})  # removing one field is an UPDATE
        svc.set(PolicyTarget.parse(orders.key, is_global=True), {"messageTTLInSeconds": 60})
        svc.set(
            PolicyTarget.parse("acme/shop"),
            {"deduplicationEnabled": True, "subscriptionTypesEnabled": ["Shared"]},
        )
        svc.delete(orders)
        svc.set(orders, {"maxProducerPerTopic": 3})  # INSERT again after the delete
        for i in range(12):
            svc.set(PolicyTarget.parse(f"persistent://acme/bulk/t{i}"), {"maxMessageSize": i})
    codec = Codec()
    now = int(time.time() * 1000)
    dup = str(uuid.uuid4())

    def raw(name: str, action: str, value: int, **extra: Any) -> tuple[str, bytes]:
        key = f"persistent://acme/shop/{name}"
        return key, _event(codec, key, action, {"maxConsumerPerTopic": value}, **extra)

    legacy = "persistent://acme/shop/legacy"
    _produce(
        kafka_bootstrap,
        topic,
        [
            (legacy, _v1_event(codec, legacy, {"maxConsumerPerTopic": 1})),
            ("persistent://acme/shop/bad-magic", b"\x00\x01 not avro at all"),
            ("persistent://acme/shop/bad-fp", SINGLE_OBJECT_MAGIC + b"\x01" * 8 + b"\x00\x00"),
            ("persistent://acme/shop/bad-body", codec.header + b"\xff" * 16),
            ("persistent://acme/shop/short", SINGLE_OBJECT_MAGIC + b"\x88\x22"),
            raw("ghost", "UPDATE", 2),  # update before any insert
            ("persistent://acme/shop/never", None),  # delete of an unknown key
            raw("twice", "INSERT", 1),
            raw("twice", "INSERT", 2),  # insert of an existing key
            raw("dup", "INSERT", 1, event_id=dup),
            raw("dup", "UPDATE", 2, event_id=dup),  # duplicate event id
            raw("late", "INSERT", 1, at_ms=now),
            raw("late", "UPDATE", 2, at_ms=now - 60_000),  # out of order
        ],
    )
    return topic


# A day-long window: the writes of one test never straddle a window boundary in practice.
RULES = AnomalyRules(burst_threshold=10, burst_window_s=86400)


@dataclass(frozen=True)
class Audited:
    """One audit of ``audited_log``, run with a progress bar: what it wrote and said."""

    out: Path
    summary: AuditSummary
    progress: str


@pytest.fixture(scope="module")
def audited(
    spark: SparkSession,
    kafka_bootstrap: str,
    audited_log: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Audited:
    out = tmp_path_factory.mktemp("audited")
    stream = io.StringIO()
    summary = run_audit(
        spark,
        KafkaSource(kafka_bootstrap, audited_log),
        out,
        rules=RULES,
        progress=SparkProgress(spark, stream=stream, interval_s=0.1),
    )
    return Audited(out, summary, stream.getvalue())


def test_history_diffs_and_anomalies_match_an_independent_decode(
    spark: SparkSession, kafka_bootstrap: str, audited_log: str, audited: Audited
) -> None:
    summary, out = audited.summary, audited.out
    messages = _read_back(kafka_bootstrap, audited_log)
    expected = _oracle(messages, SparkSchemas.load().policy_fields)
    written = spark.read.parquet(str(out / "history"))
    history = {
        (r["partition"], r["offset"]): r.asDict()
        for r in written.withColumn("event_ms", F.unix_millis("event_time")).collect()
    }
    assert summary.records == len(messages) == len(history)
    assert summary.keys == len({m.key() for m in messages})
    for row in expected:
        got = history[(row.partition, row.offset)]
        where = f"{row.key} @{row.partition}/{row.offset}"
        assert got["key"] == row.key, where
        assert got["action"] == row.action, where
        assert got["changed_fields"] == row.changed, where
        assert (json.loads(got["before"]) if got["before"] else None) == row.before, where
        assert (json.loads(got["after"]) if got["after"] else None) == row.after, where
        assert got["event_id"] == row.event_id, where
        assert got["author"] == row.author, where
        assert got["origin"] == row.origin, where
        assert got["event_ms"] == row.event_ms, where
        assert got["schema_version"] == row.schema_version, where
        assert got["tombstone"] == row.tombstone, where
        assert got["namespace"] == _namespace_of(row.key), where
        scope = PolicyTarget.from_key(row.key).scope.value
        assert got["scope"] == scope, where

    # The scenario really covers what it claims to.
    actions = {r.action for r in expected}
    assert actions == {"INSERT", "UPDATE", "DELETE", "POISON"}
    assert {h["scope"] for h in history.values()} == {"local", "global", "namespace"}
    assert "v1" in {h["schema_version"] for h in history.values()}
    orders = [r for r in expected if r.key.endswith("/orders") and r.action == "UPDATE"]
    removal = [r for r in orders if r.after and "maxConsumerPerTopic" not in r.after]
    assert [r.changed for r in removal] == [["maxConsumerPerTopic"]]
    # Deletes say who made them: the writer's tombstone carries the metadata as headers.
    deleted = [r for r in expected if r.key.endswith("/orders") and r.action == "DELETE"]
    assert [(r.tombstone, r.author, r.origin) for r in deleted] == [(True, "alice", "test_audit")]
    assert deleted[0].event_id is not None and deleted[0].event_ms is not None
    bare = [r for r in expected if r.key.endswith("/never")]  # a tombstone from elsewhere
    assert [(r.action, r.tombstone, r.author, r.event_id) for r in bare] == [
        ("DELETE", True, None, None)
    ]

    anomalies = spark.read.parquet(str(out / "anomalies")).collect()
    per_record = {
        (a["kind"], a["severity"], a["partition"], a["offset"])
        for a in anomalies
        if a["kind"] not in ("duplicate_event_id", "burst")
    }
    assert per_record == _expected_record_anomalies(expected)
    kinds = {a["kind"] for a in anomalies}
    assert kinds == {k.value for k in AnomalyKind}
    poison_keys = {a["key"].rsplit("/", 1)[1] for a in anomalies if a["kind"] == "poison"}
    assert poison_keys == {"bad-magic", "bad-fp", "bad-body", "short"}

    ids = [r.event_id for r in expected if r.event_id]
    repeats = [r for r in expected if r.event_id and ids.count(r.event_id) > 1]
    duplicates = {
        (a["partition"], a["offset"]) for a in anomalies if a["kind"] == "duplicate_event_id"
    }
    assert duplicates == {(r.partition, r.offset) for r in repeats[1:]}

    changes = [(_namespace_of(r.key), r.timestamp_ms) for r in expected if r.action in _CHANGES]
    bursts = {(ns, n) for ns, _, n in find_bursts(changes, RULES)}
    found = {
        (a["namespace"], int(a["detail"].split()[0])) for a in anomalies if a["kind"] == "burst"
    }
    assert found == bursts
    assert ("acme/bulk", 12) in bursts

    report = (out / "report.html").read_text()
    assert report.count("data:image/png;base64,") == 4
    _check_report_tallies(spark, out, expected)
    assert "bad magic 0001" in report
    assert summary.anomalies[("poison", "error")] == 4


def _check_report_tallies(spark: SparkSession, out: Path, expected: list[Expected]) -> None:
    """The report's counts equal the oracle's, whether the tallies are collected whole or,
    as for a huge number of namespaces or authors, cut down in Spark first."""
    history = spark.read.parquet(str(out / "history"))
    anomalies = spark.read.parquet(str(out / "anomalies"))
    metrics = {"records": history.count(), "first_ms": 0, "last_ms": 1}
    whole = _job.collect_report_data(history, anomalies, metrics, source="s", rules=RULES)
    fields: dict[str, int] = {}
    authors: dict[str, int] = {}
    for row in expected:
        for name in row.changed or []:
            fields[name] = fields.get(name, 0) + 1
        if row.action in _CHANGES:
            who = row.author or "(no metadata: v1 event or bare tombstone)"
            authors[who] = authors.get(who, 0) + 1
    assert dict(whole.field_changes) == fields
    assert dict(whole.authors) == authors
    changes = sum(1 for r in expected if r.action in _CHANGES)
    assert sum(n for _, _, n in whole.changes_over_time) == changes
    assert {label for _, label, _ in whole.changes_over_time} == {
        _namespace_of(r.key) for r in expected if r.action in _CHANGES
    }
    kinds = {(r["kind"], r["severity"]) for r in anomalies.collect()}
    assert {(k, s) for k, s, _ in whole.anomaly_counts} == kinds
    assert whole.anomalies_total == anomalies.count()
    original = _job._COLLECT_LIMIT
    _job._COLLECT_LIMIT = 3  # force the reduction in Spark
    try:
        reduced = _job.collect_report_data(history, anomalies, metrics, source="s", rules=RULES)
    finally:
        _job._COLLECT_LIMIT = original
    assert reduced.field_changes == whole.field_changes
    assert reduced.authors == whole.authors
    assert reduced.anomaly_counts == whole.anomaly_counts
    assert sorted(reduced.changes_over_time) == sorted(whole.changes_over_time)


# ---------------------------------------------------------------------------- reconcile


def _fake_sidecar(positions: dict[str, int], entries: dict[str, str]) -> JsonRoutes:
    """A sidecar's two reconciliation endpoints, serving entries we choose."""
    return JsonRoutes(
        {
            "/policy-sync/v1/digest": {"digest": "x", "size": 0, "positions": positions},
            "/policy-sync/v1/entries": {"entries": entries},
        }
    )


@pytest.fixture(scope="module")
def sidecar_log(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Sidecar]]:
    """A log of every kind of record a cache must judge, and a sidecar that read it (the
    tests only read from it)."""
    topic = f"audit-rc-{uuid.uuid4().hex[:10]}"
    with _service(kafka_bootstrap, topic, "alice") as svc:
        for i in range(6):
            svc.set(PolicyTarget.parse(f"persistent://acme/rc/t{i}"), {"maxConsumerPerTopic": i})
        svc.set(PolicyTarget.parse("persistent://acme/rc/t0"), {"maxConsumerPerTopic": 9})
        svc.delete(PolicyTarget.parse("persistent://acme/rc/t1"))
    codec = Codec()
    # What caches must ignore or apply exactly as the audit's replay does.
    t2, ghost = "persistent://acme/rc/t2", "persistent://acme/rc/ghost"
    _produce(
        kafka_bootstrap,
        topic,
        [
            (t2, _event(codec, t2, "INSERT", {"maxConsumerPerTopic": 77})),  # ignored: exists
            ("persistent://acme/rc/t3", b"poison"),  # a poison last record: key absent
            (ghost, _event(codec, ghost, "UPDATE", {"maxConsumerPerTopic": 5})),  # applied
        ],
    )
    # Poison of every kind (issue #11): the sidecar and reconcile apply one rule (the
    # cache's judge()), including what Spark's Avro decoder alone would accept.
    p = [f"persistent://acme/rc/p{i}" for i in range(5)]
    good = [_event(codec, k, "UPDATE", {"maxConsumerPerTopic": 1}) for k in p]
    _produce(
        kafka_bootstrap,
        topic,
        [
            *zip(p, good, strict=True),
            (p[0], good[0][: good[0].index(b"acme") + 7]),  # cut after the namespace
            (p[1], codec.header + b"\x04\x00\xff\xff\xff"),  # classifies as ignored
            (p[2], good[2] + b"\x00"),  # a trailing byte: Java's decoder accepts it
            (p[3], good[3][:-3]),  # truncated, then an INSERT: it applies
            (p[3], _event(codec, p[3], "INSERT", {"maxConsumerPerTopic": 3})),
            (p[4], _event(codec, p[0], "UPDATE", {"maxConsumerPerTopic": 4})),  # names p0
        ],
    )
    shim = Sidecar(kafka_bootstrap, topic, free_port(), tmp_path_factory.mktemp("rc"))
    try:
        shim.wait_ready()
        yield topic, shim
    finally:
        shim.stop()


def test_reconcile_agrees_with_a_real_sidecar_and_pinpoints_divergence(
    spark: SparkSession, kafka_bootstrap: str, sidecar_log: tuple[str, Sidecar]
) -> None:
    topic, shim = sidecar_log
    digest = shim.digest()
    real = http("GET", shim.url + "/policy-sync/v1/entries").json()["entries"]
    assert "persistent://acme/rc/t1" not in real and "persistent://acme/rc/ghost" in real
    assert [k for k in real if "/rc/p" in k] == ["persistent://acme/rc/p3"]
    tampered = dict(real)
    missing = tampered.pop("persistent://acme/rc/t4")
    tampered["persistent://acme/rc/extra"] = "0" * 64
    tampered["persistent://acme/rc/t5"] = "f" * 64
    fake = _fake_sidecar(digest["positions"], tampered)
    try:
        results = reconcile(
            spark,
            KafkaSource(kafka_bootstrap, topic),
            [shim.url, fake.url, f"http://127.0.0.1:{free_port()}"],
            timeout_s=5,
        )
    finally:
        fake.close()
    ok, diverged, down = results
    assert not ok.diverged and ok.stable, ok.lines()
    assert ok.matching == ok.expected_keys == ok.sidecar_keys == len(real)
    assert diverged.diverged
    assert (diverged.missing, diverged.extra, diverged.different) == (1, 1, 1)
    assert {(k, kind) for k, kind, _, _ in diverged.examples} == {
        ("persistent://acme/rc/t4", "missing"),
        ("persistent://acme/rc/extra", "extra"),
        ("persistent://acme/rc/t5", "different"),
    }
    assert next(e for e in diverged.examples if e[1] == "missing")[2] == missing
    assert down.diverged and down.error is not None


def test_cli_reconcile_exits_1_on_divergence_and_cli_audit_reports(
    kafka_bootstrap: str, sidecar_log: tuple[str, Sidecar], tmp_path: Path
) -> None:
    topic, shim = sidecar_log
    digest = shim.digest()
    fake = _fake_sidecar(digest["positions"], {"persistent://acme/rc/t0": "0" * 64})
    common = ["--topic", topic, "--master", "local[2]", "--no-progress"]
    for key, value in SPARK_TEST_CONF.items():
        common += ["--conf", f"{key}={value}"]
    try:
        rc = run_cli(
            "policy-audit", "reconcile", *common, "--sidecar", shim.url, "--sidecar", fake.url,
            bootstrap=kafka_bootstrap, timeout=300,
        )  # fmt: skip
    finally:
        fake.close()
    assert rc.returncode == 1, rc.stderr
    assert f"{shim.url}: in sync" in rc.stdout
    assert f"{fake.url}: DIVERGED" in rc.stdout
    assert "1 of 2 sidecars in sync" in rc.stdout

    out = tmp_path / "audit"
    registry = f"audit-rc-registry-{uuid.uuid4().hex[:10]}"  # not the shared registry
    KafkaTransport(KafkaConfig(kafka_bootstrap)).admin().ensure_topic(TopicSpec(registry, 1))
    orders = "persistent://acme/rc/orders"
    _produce(
        kafka_bootstrap,
        registry,
        [(REGISTRY_KEY_SCHEMA + orders, _schema_history(orders, ("AVRO", 1_000, "alice")))],
    )
    audit = run_cli(
        "policy-audit", *common, "--output", str(out), "--fail-on-errors",
        "--registry-topic", registry, bootstrap=kafka_bootstrap, timeout=300,
    )  # fmt: skip
    assert audit.returncode == 1, audit.stderr  # the poison record is an error anomaly
    assert "poison (error)" in audit.stdout
    assert "schemas            1 versions of 1 topics" in audit.stdout
    assert f"report    {out / 'report.html'}" in audit.stdout
    assert (out / "report.html").is_file()
    missing = run_cli(
        "policy-audit", "--topic", "no-topic", "--output", str(out), bootstrap=kafka_bootstrap
    )
    assert missing.returncode == 3 and "does not exist" in missing.stderr


# ------------------------------------------------------------------ archive vs compaction


def _versions_in_log(bootstrap: str, topic: str, key: str) -> int:
    return sum(1 for m in _read_back(bootstrap, topic) if m.key() == key.encode())


def test_archive_keeps_every_version_compaction_removes(
    spark: SparkSession, kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic = f"audit-compact-{uuid.uuid4().hex[:10]}"
    KafkaTransport(KafkaConfig(kafka_bootstrap)).admin().ensure_topic(
        TopicSpec(
            topic,
            1,
            config={
                "cleanup.policy": "compact",
                "segment.ms": "100",
                "min.cleanable.dirty.ratio": "0.01",
                # No compaction before the first archive has run: on a loaded machine
                # the cleaner must not win the race (lowered right after it).
                "min.compaction.lag.ms": "3600000",
                "delete.retention.ms": "100",
            },
        )
    )
    key = "persistent://acme/arch/orders"
    target = PolicyTarget.parse(key)
    with _service(kafka_bootstrap, topic, "alice", partitions=1) as svc:
        for i in range(1, 6):
            svc.set(target, {"maxConsumerPerTopic": i})
    source = KafkaSource(kafka_bootstrap, topic)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    first = run_archive(spark, source, checkpoint, out)
    assert first.archived == 5 and first.records == 5
    KafkaTransport(KafkaConfig(kafka_bootstrap)).admin().alter_topic_config(
        topic, {"min.compaction.lag.ms": "0"}
    )

    # Force compaction: segments roll on the next append once segment.ms passed, the
    # cleaner (log.cleaner.backoff.ms=1000 on the test broker) then keeps one version.
    deadline = time.monotonic() + 90
    roll, rolls = PolicyTarget.parse("persistent://acme/arch/roll"), 0
    # At least one write after the first archive, even when the cleaner already ran (on a
    # slow machine every earlier write may have rolled its own segment).
    with _service(kafka_bootstrap, topic, "alice", partitions=1) as svc:
        while True:
            rolls += 1
            svc.set(roll, {"maxMessageSize": rolls})
            if _versions_in_log(kafka_bootstrap, topic, key) <= 1:
                break
            assert time.monotonic() < deadline, "the broker never compacted the topic"
            time.sleep(0.5)
    writes_after = _versions_in_log(kafka_bootstrap, topic, "persistent://acme/arch/roll")
    assert writes_after >= 1

    second = run_archive(spark, source, checkpoint, out)
    history = spark.read.parquet(str(out / "history"))
    versions = history.where(history.key == key).orderBy("offset").collect()
    assert [json.loads(v["after"])["maxConsumerPerTopic"] for v in versions] == [1, 2, 3, 4, 5]
    assert [v["changed_fields"] for v in versions] == [["maxConsumerPerTopic"]] * 5
    assert [v["action"] for v in versions] == ["INSERT"] + ["UPDATE"] * 4
    assert not [r for r in spark.read.parquet(str(out / "anomalies")).collect() if r["key"] == key]
    # Only what the log gained was appended: nothing archived twice.
    assert second.archived is not None and second.archived >= 1
    archived = spark.read.parquet(str(out / "archive"))
    assert archived.count() == archived.select("partition", "offset").distinct().count()

    # A fresh batch audit of the compacted log sees only the last version, as warned.
    fresh = run_audit(spark, source, tmp_path / "fresh")
    log_versions = spark.read.parquet(str(tmp_path / "fresh" / "history")).where(f"key = '{key}'")
    assert log_versions.count() == 1
    assert fresh.anomalies.get(("update_before_insert", "warning"), 0) >= 1


def test_progress_bar_and_console_summary(audited: Audited) -> None:
    summary, bars = audited.summary, audited.progress
    assert "history and diffs" in bars and "anomalies" in bars and "task" in bars
    text = "\n".join(summary.lines())
    assert f"records   {summary.records:>10,}" in text
    assert "poison (error)" in text


# ------------------------------------------------------------------ schema registry history


def _schema_history(topic: str, *versions: tuple[str, int, str]) -> bytes:
    """A registry record as the schema registry writes it: (type, timestamp ms, user) per
    version, NONE being a soft delete's marker."""
    entries = [
        SchemaEntry(i, SchemaType(kind), "" if kind == "NONE" else f'"{kind}"', {}, ms, user,
                    deleted=kind == "NONE")
        for i, (kind, ms, user) in enumerate(versions)
    ]  # fmt: skip
    return SchemaHistory(topic, tuple(entries)).to_json()


def _expected_schema_rows(bootstrap: str, topic: str) -> set[tuple[Any, ...]]:
    """The rows DIR/schemas must hold, from the registry topic read back with a consumer."""
    rows: set[tuple[Any, ...]] = set()
    first: dict[tuple[Any, ...], tuple[int, int]] = {}
    for m in _read_back(bootstrap, topic):
        key = m.key().decode()
        if not key.startswith(REGISTRY_KEY_SCHEMA):
            continue
        name, at = key[len(REGISTRY_KEY_SCHEMA) :], (m.partition(), m.offset())
        if m.value() is None:
            rows.add((name, None, None, m.timestamp()[1], True, True, False, None, *at))
            continue
        try:
            history = SchemaHistory.from_json(m.value())
        except CodecError:
            rows.add((name, None, None, m.timestamp()[1], False, False, True, None, *at))
            continue
        for v in history.versions:
            first.setdefault((name, v.version, v.type.value, v.timestamp, v.deleted, v.user), at)
    rows |= {(*k[:5], False, False, k[5], *at) for k, at in first.items()}
    return rows


def test_the_report_lists_the_schema_registrys_versions(
    spark: SparkSession, kafka_bootstrap: str, tmp_path: Path
) -> None:
    """``registry``: every version of every topic's schema once (each record repeats its
    topic's history), soft deletes, forced deletes (tombstones) and unreadable records,
    written to DIR/schemas, listed in the report and summed up on the console; the
    registry's other records are not read as schemas."""
    log, registry = (f"audit-{kind}-{uuid.uuid4().hex[:10]}" for kind in ("log", "registry"))
    with _service(kafka_bootstrap, log, "alice", partitions=1) as svc:
        svc.set(PolicyTarget.parse("persistent://acme/reg/orders"), {"maxConsumerPerTopic": 1})
    KafkaTransport(KafkaConfig(kafka_bootstrap)).admin().ensure_topic(TopicSpec(registry, 2))
    orders, users = "persistent://acme/reg/orders", "persistent://acme/reg/users"
    history = [("AVRO", 1_000, "alice"), ("AVRO", 2_000, "bob"), ("NONE", 3_000, "alice"),
               ("JSON", 4_000, "")]  # fmt: skip
    _produce(
        kafka_bootstrap,
        registry,
        [
            *[(REGISTRY_KEY_SCHEMA + orders, _schema_history(orders, *history[:n]))
              for n in range(1, 5)],
            (REGISTRY_KEY_SCHEMA + users, _schema_history(users, ("STRING", 1_500, ""))),
            (REGISTRY_KEY_SCHEMA + users, None),  # a forced delete drops the history
            (REGISTRY_KEY_SCHEMA + users, _schema_history(users, ("AVRO", 5_000, "carol"))),
            (REGISTRY_KEY_SCHEMA + "persistent://acme/reg/bad", b"not a history"),
            (REGISTRY_KEY_SCHEMA + "persistent://acme/reg/odd", b'{"topic": "odd"}'),
            ("broker/b-1", b'{"versions": []}'),  # not a schema record
            ("ns/acme/reg", b"{}"),
        ],
    )  # fmt: skip
    out = tmp_path / "audit"
    summary = run_audit(
        spark,
        KafkaSource(kafka_bootstrap, log),
        out,
        registry=KafkaSource(kafka_bootstrap, registry),
    )
    written = spark.read.parquet(str(out / "schemas"))
    assert tuple(written.columns) == SCHEMA_VERSION_COLUMNS
    got = {
        tuple(r)
        for r in written.select(
            *[F.unix_millis(c).alias(c) if c == "timestamp" else F.col(c) for c in written.columns]
        ).collect()
    }
    assert got == _expected_schema_rows(kafka_bootstrap, registry)
    assert summary.schemas is not None
    s = summary.schemas
    assert (s.topics, s.versions, s.soft_deletes, s.forced_deletes, s.unreadable) == (2, 5, 1, 1, 2)
    assert [(r.version, r.type) for r in s.rows if r.topic == orders] == [
        (0, "AVRO"), (1, "AVRO"), (2, "NONE"), (3, "JSON"),
    ]  # fmt: skip
    report = (out / "report.html").read_text()
    assert "Schema registry (5 versions of 2 topics)" in report
    assert "forced delete: the history dropped" in report and "carol" in report
    text = "\n".join(summary.lines())
    assert "schemas            5 versions of 2 topics (1 soft and 1 forced deletes" in text
    assert f"schemas   {out / 'schemas'}" in text
