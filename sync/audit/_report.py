"""The HTML audit report: one self-contained file (charts are inline PNGs), no server.

Rendering is pure: it takes a :class:`ReportData` of plain values (the Spark job
aggregates and collects them) and returns HTML, so it is tested without Spark.
"""

from __future__ import annotations

import base64
import html
import io
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from matplotlib.figure import Figure

from ._rules import AnomalyRules, Severity

__all__ = [
    "AnomalyRow",
    "ReportData",
    "SchemaReport",
    "SchemaVersionRow",
    "render_report",
    "utc_of_millis",
]

_OTHER = "(other namespaces)"
_SEVERITY_COLOURS = {Severity.ERROR.value: "#c0392b", Severity.WARNING.value: "#e67e22"}


@dataclass(frozen=True, slots=True)
class AnomalyRow:
    """One anomaly as listed in the report."""

    kind: str
    severity: str
    detail: str | None
    key: str | None = None
    namespace: str | None = None
    kafka_topic: str | None = None
    partition: int | None = None
    offset: int | None = None
    timestamp: datetime | None = None
    event_id: str | None = None
    author: str | None = None

    @property
    def where(self) -> str:
        if self.partition is None:
            return ""
        return f"{self.kafka_topic}[{self.partition}]@{self.offset}"


@dataclass(frozen=True, slots=True)
class SchemaVersionRow:
    """One row of the schema registry's history (see :mod:`._schema_versions`)."""

    topic: str
    version: int | None
    type: str | None
    timestamp: datetime | None
    deleted: bool
    forced: bool
    unreadable: bool
    user: str | None = None
    partition: int | None = None
    offset: int | None = None

    @property
    def where(self) -> str:
        return "" if self.partition is None else f"[{self.partition}]@{self.offset}"

    @property
    def what(self) -> str:
        if self.unreadable:
            return "unreadable record (not a schema history)"
        if self.forced:
            return "forced delete: the history dropped"
        if self.deleted:
            return "soft delete: the versions before it no longer count"
        return ""


@dataclass(frozen=True, slots=True)
class SchemaReport:
    """The schema registry's part of the report."""

    #: The registry topic read.
    source: str
    #: Topics with at least one version in the log.
    topics: int
    #: Versions written by uploads and producers (soft deletes' markers not counted).
    versions: int
    soft_deletes: int
    forced_deletes: int
    unreadable: int
    #: Every row of ``DIR/schemas``; ``rows`` holds the first ones.
    total_rows: int
    rows: Sequence[SchemaVersionRow]


@dataclass(frozen=True, slots=True)
class ReportData:
    """Everything the report shows, already aggregated."""

    source: str
    generated_at: datetime
    records: int
    keys: int
    first: datetime | None
    last: datetime | None
    actions: Mapping[str, int]
    scopes: Mapping[str, int]
    #: Width of one bucket of ``changes_over_time``, in seconds.
    bucket_s: int
    #: (bucket start, namespace, changes); namespaces beyond the top few are merged.
    changes_over_time: Sequence[tuple[datetime, str, int]]
    field_changes: Sequence[tuple[str, int]]
    authors: Sequence[tuple[str, int]]
    #: (kind, severity, count)
    anomaly_counts: Sequence[tuple[str, str, int]]
    #: The first anomalies (errors first, then by time); ``anomalies_total`` counts all.
    anomalies: Sequence[AnomalyRow]
    anomalies_total: int
    rules: AnomalyRules = field(default_factory=AnomalyRules)
    #: The schema registry's history (None: the registry topic was not read).
    schemas: SchemaReport | None = None


def _png(fig: Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=96, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _img(png: str, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{png}">'


def _bucket_label(seconds: int) -> str:
    for unit, size in (("day", 86400), ("h", 3600), ("min", 60)):
        if seconds % size == 0 and seconds >= size:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"


def _timeline_chart(data: ReportData) -> str | None:
    if not data.changes_over_time:
        return None
    series: dict[str, dict[datetime, int]] = defaultdict(dict)
    for start, namespace, count in data.changes_over_time:
        series[namespace][start] = series[namespace].get(start, 0) + count
    first = min(start for start, _, _ in data.changes_over_time)
    last = max(start for start, _, _ in data.changes_over_time)
    step = timedelta(seconds=data.bucket_s)
    buckets = [first + i * step for i in range(int((last - first) / step) + 1)]
    names = sorted(series, key=lambda n: (n == _OTHER, -sum(series[n].values()), n))
    fig = Figure(figsize=(10, 4))
    ax = fig.subplots()
    xs = list(range(len(buckets)))
    bottom = [0] * len(buckets)
    for name in names:
        heights = [series[name].get(b, 0) for b in buckets]
        ax.bar(xs, heights, width=0.9, bottom=bottom, label=name, align="edge")
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    every = max(1, len(buckets) // 8)
    ax.set_xticks(xs[::every], [b.strftime("%m-%d %H:%M:%S") for b in buckets[::every]])
    ax.set_xlabel("UTC")
    ax.set_ylabel(f"changes per {_bucket_label(data.bucket_s)}")
    ax.set_title("Policy changes over time, per namespace")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.autofmt_xdate()
    return _img(_png(fig), "policy changes over time per namespace")


def _barh_chart(
    items: Sequence[tuple[str, int]], title: str, xlabel: str, colours: Sequence[str] | None = None
) -> str | None:
    if not items:
        return None
    labels = [label for label, _ in items][::-1]
    values = [value for _, value in items][::-1]
    fig = Figure(figsize=(8, max(1.5, 0.3 * len(items) + 1)))
    ax = fig.subplots()
    ax.barh(labels, values, color=list(colours)[::-1] if colours else "#2c7fb8")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    return _img(_png(fig), title)


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_text(v))}</td>" for v in row) + "</tr>" for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    return str(value)


_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
h1 { margin-bottom: 0.2em; } .sub { color: #666; margin-top: 0; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } td.num { text-align: right; }
.error { color: #c0392b; font-weight: bold; } .warning { color: #e67e22; font-weight: bold; }
.none { color: #2e7d32; } img { max-width: 100%; display: block; margin: 1em 0; }
"""


def render_report(data: ReportData) -> str:
    """The report as one HTML document."""
    esc = html.escape
    span = (
        f"{_text(data.first)} to {_text(data.last)} UTC"
        if data.first and data.last
        else "no records"
    )
    summary_rows: list[tuple[str, object]] = [
        ("source", data.source),
        ("records", data.records),
        ("keys", data.keys),
        ("time range (Kafka timestamps)", span),
        *[(f"action {a}", n) for a, n in sorted(data.actions.items())],
        *[(f"scope {s}", n) for s, n in sorted(data.scopes.items())],
        ("anomalies", data.anomalies_total),
    ]
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        "<title>policy-sync audit</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>policy-sync audit</h1>",
        f'<p class="sub">generated {esc(_text(data.generated_at))} UTC from {esc(data.source)}</p>',
        "<h2>Summary</h2>",
        _table(("", "value"), summary_rows),
    ]
    charts = [
        _timeline_chart(data),
        _barh_chart(data.field_changes, "Most-changed policy fields", "records changing the field"),
        _barh_chart(data.authors, "Authors", "change records"),
        _barh_chart(
            [(f"{k} ({s})", n) for k, s, n in data.anomaly_counts],
            "Anomalies by kind",
            "anomalies",
            [_SEVERITY_COLOURS.get(s, "#777") for _, s, _ in data.anomaly_counts],
        ),
    ]
    parts.append("<h2>Charts</h2>")
    drawn = [c for c in charts if c]
    parts.extend(drawn if drawn else ["<p>No changes to chart.</p>"])
    parts.append(f"<h2>Anomalies ({data.anomalies_total})</h2>")
    rules = data.rules
    parts.append(
        "<p>Burst: more than "
        f"{rules.burst_threshold} changes to one namespace's policies within "
        f"{rules.burst_window_s} s (tumbling windows). Out of order: an event time more than "
        f"{rules.out_of_order_tolerance_ms} ms before that of the key's previous record.</p>"
    )
    if not data.anomalies:
        parts.append('<p class="none">No anomalies.</p>')
    else:
        if data.anomalies_total > len(data.anomalies):
            parts.append(
                f"<p>Showing the first {len(data.anomalies)}; every anomaly is in the "
                "<code>anomalies</code> Parquet table.</p>"
            )
        head = ("severity", "kind", "time", "key / namespace", "record", "author", "detail")
        rows = "".join(
            "<tr>"
            f'<td class="{esc(a.severity)}">{esc(a.severity)}</td>'
            f"<td>{esc(a.kind)}</td><td>{esc(_text(a.timestamp))}</td>"
            f"<td>{esc(a.key or a.namespace or '')}</td><td>{esc(a.where)}</td>"
            f"<td>{esc(a.author or '')}</td><td>{esc(a.detail or '')}</td>"
            "</tr>"
            for a in data.anomalies
        )
        header = "".join(f"<th>{esc(h)}</th>" for h in head)
        parts.append(f"<table><thead><tr>{header}</tr></thead><tbody>{rows}</tbody></table>")
    if data.schemas is not None:
        parts.extend(_schema_section(data.schemas))
    parts.append("</body></html>")
    return "\n".join(parts)


def _schema_section(schemas: SchemaReport) -> list[str]:
    esc = html.escape
    parts = [
        f"<h2>Schema registry ({schemas.versions} versions of {schemas.topics} topics)</h2>",
        f"<p>Every version in {esc(schemas.source)}, listed once (each record of a topic "
        "repeats its history), with soft deletes (a marker version), forced deletes "
        "(a tombstone: the history dropped) and records that are not a schema history. "
        "Versions a forced delete dropped are listed while compaction keeps their records."
        "</p>",
        _table(
            ("", "count"),
            [
                ("topics", schemas.topics),
                ("versions", schemas.versions),
                ("soft deletes", schemas.soft_deletes),
                ("forced deletes", schemas.forced_deletes),
                ("unreadable records", schemas.unreadable),
            ],
        ),
    ]
    if not schemas.rows:
        parts.append('<p class="none">No schemas.</p>')
        return parts
    if schemas.total_rows > len(schemas.rows):
        parts.append(
            f"<p>Showing the first {len(schemas.rows)}; every row is in the "
            "<code>schemas</code> Parquet table.</p>"
        )
    head = ("topic", "version", "type", "written (UTC)", "user", "", "record")
    rows = [
        (r.topic, r.version, r.type, r.timestamp, r.user, r.what, r.where) for r in schemas.rows
    ]
    parts.append(_table(head, rows))
    return parts


def utc_of_millis(epoch_ms: int | None) -> datetime | None:
    """Naive UTC datetime of epoch milliseconds (Spark hands timestamps to Python in the
    *local* zone, so the report collects them as numbers)."""
    if epoch_ms is None:
        return None
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).replace(tzinfo=None)


def utc_now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)
