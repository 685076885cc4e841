"""The HTML report renders from plain data: self-contained, escaped, honest about counts."""

from __future__ import annotations

import base64
import re
from datetime import datetime, timedelta

from sync.audit import (
    AnomalyRow,
    AnomalyRules,
    ReportData,
    SchemaReport,
    SchemaVersionRow,
    render_report,
)

T0 = datetime(2026, 1, 1, 12, 0, 0)


def _data(**overrides: object) -> ReportData:
    base: dict[str, object] = {
        "source": "Kafka topic __change_events on 127.0.0.1:9092",
        "generated_at": T0,
        "records": 7,
        "keys": 3,
        "first": T0,
        "last": T0 + timedelta(minutes=5),
        "actions": {"INSERT": 3, "UPDATE": 2, "DELETE": 1, "POISON": 1},
        "scopes": {"local": 4, "global": 1, "namespace": 1},
        "bucket_s": 60,
        "changes_over_time": [
            (T0, "t/a", 2),
            (T0 + timedelta(minutes=3), "t/a", 1),
            (T0 + timedelta(minutes=3), "t/b", 3),
        ],
        "field_changes": [("maxConsumerPerTopic", 4), ("retentionPolicies", 1)],
        "authors": [("alice", 5), ("(no metadata: tombstone or v1 event)", 1)],
        "anomaly_counts": [("poison", "error", 1)],
        "anomalies": [
            AnomalyRow(
                "poison",
                "error",
                "bad magic 3c73 <script>alert(1)</script>",
                key="persistent://t/a/<x>",
                namespace="t/a",
                kafka_topic="__change_events",
                partition=2,
                offset=41,
                timestamp=T0,
            )
        ],
        "anomalies_total": 1,
        "rules": AnomalyRules(burst_threshold=7, burst_window_s=30),
    }
    base.update(overrides)
    return ReportData(**base)  # type: ignore[arg-type]


def test_charts_are_inline_pngs_and_nothing_is_fetched() -> None:
    page = render_report(_data())
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(images) == 4  # timeline, fields, authors, anomalies
    for image in images:
        assert base64.b64decode(image).startswith(b"\x89PNG\r\n\x1a\n")
    assert not re.search(r'(src|href)="(https?:)?//', page)
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")


def test_everything_from_the_log_is_escaped() -> None:
    page = render_report(_data())
    assert "<script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "persistent://t/a/&lt;x&gt;" in page
    assert "__change_events[2]@41" in page


def test_rules_and_counts_are_stated() -> None:
    page = render_report(_data())
    assert "more than 7 changes" in page and "30 s" in page
    assert "Anomalies (1)" in page


def test_a_truncated_anomaly_list_says_so() -> None:
    page = render_report(_data(anomalies_total=1234))
    assert "Showing the first 1;" in page
    assert "Anomalies (1234)" in page


def test_an_empty_log_renders() -> None:
    page = render_report(
        _data(
            records=0,
            keys=0,
            first=None,
            last=None,
            actions={},
            scopes={},
            changes_over_time=[],
            field_changes=[],
            authors=[],
            anomaly_counts=[],
            anomalies=[],
            anomalies_total=0,
        )
    )
    assert "No anomalies." in page
    assert "No changes to chart." in page
    assert "data:image/png" not in page


def _schemas(**overrides: object) -> SchemaReport:
    topic = "persistent://t/a/<orders>"
    base: dict[str, object] = {
        "source": "Kafka topic __policy_sync.registry on 127.0.0.1:9092",
        "topics": 1,
        "versions": 1,
        "soft_deletes": 1,
        "forced_deletes": 1,
        "unreadable": 0,
        "total_rows": 3,
        "rows": [
            SchemaVersionRow(topic, 0, "AVRO", T0, False, False, False, "<alice>", 1, 7),
            SchemaVersionRow(topic, 1, "NONE", T0, True, False, False, "", 1, 8),
            SchemaVersionRow(topic, None, None, T0, True, True, False, None, 1, 9),
        ],
    }
    base.update(overrides)
    return SchemaReport(**base)  # type: ignore[arg-type]


def test_the_schema_registrys_history_is_listed_escaped_when_read() -> None:
    assert "Schema registry" not in render_report(_data())  # the registry was not read
    page = render_report(_data(schemas=_schemas()))
    assert "Schema registry (1 versions of 1 topics)" in page
    assert "persistent://t/a/&lt;orders&gt;" in page and "&lt;alice&gt;" in page
    assert "<orders>" not in page and "<alice>" not in page
    assert "soft delete: the versions before it no longer count" in page
    assert "forced delete: the history dropped" in page
    assert "[1]@9" in page and "Showing the first" not in page
    truncated = render_report(_data(schemas=_schemas(total_rows=1000)))
    assert "Showing the first 3; every row is in the <code>schemas</code>" in truncated
    empty = render_report(_data(schemas=_schemas(topics=0, versions=0, total_rows=0, rows=[])))
    assert "No schemas." in empty


def test_report_tallies_parse_into_fields_authors_kinds_and_a_timeline() -> None:
    from sync.audit._job import _from_tallies

    sep = "\x1f"
    t0_ms = int((T0 - datetime(1970, 1, 1)).total_seconds() * 1000)
    counted = [
        ("maxConsumerPerTopic", 5),
        ("retentionPolicies", 7),
        (f"{sep}aalice", 3),
        (f"{sep}awho\x1fever", 9),  # an author may contain anything after the prefix
        (f"{sep}kpoison{sep}error", 2),
        (f"{sep}kburst{sep}warning", 4),
    ]
    # Ten namespaces: the eight busiest keep their name, the rest are merged.
    counted += [(f"{sep}tt/ns{i}{sep}{t0_ms}", 10 + i) for i in range(10)]
    counted += [(f"{sep}tt/ns9{sep}{t0_ms + 60_000}", 1)]
    fields, authors, kinds, timeline = _from_tallies(counted)

    assert fields == [("retentionPolicies", 7), ("maxConsumerPerTopic", 5)]
    assert authors == [("who\x1fever", 9), ("alice", 3)]
    assert kinds == [("burst", "warning", 4), ("poison", "error", 2)]
    named = {label for _, label, _ in timeline} - {"(other namespaces)"}
    assert named == {f"t/ns{i}" for i in range(2, 10)}
    at_t0 = {label: n for at, label, n in timeline if at == T0}
    assert at_t0["(other namespaces)"] == 10 + 11
    assert (T0 + timedelta(minutes=1), "t/ns9", 1) in timeline
    assert sum(n for _, _, n in timeline) == sum(10 + i for i in range(10)) + 1
