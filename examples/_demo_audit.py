"""The last part of ``make demo``: audit what the demo did, then reconcile the sidecars.

Both steps run the real ``policy-audit`` command (the CLI's own code path) in a child
process, so the Spark JVM it starts ends with it: nothing is left running. Spark is
embedded (``local[2]``); a few thousand records take seconds, most of it Spark's start.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq  # type: ignore[import-untyped]

from sync.constants import CHANGE_EVENTS_TOPIC

__all__ = ["AuditDemoResult", "audit_demo"]

BIN = Path(sys.executable).parent
#: Spark settings for a short embedded run next to Kafka and three sidecars on a small box.
_SPARK = ("--master", "local[2]", "--conf", "spark.ui.enabled=false", "--no-progress")


@dataclass(frozen=True, slots=True)
class AuditDemoResult:
    """What the demo's audit found: the report, who deleted what, and whether sidecars agree."""

    report: Path
    #: (key, author, event time as text) of every DELETE in the history.
    deletes: list[tuple[str, str | None, str]]
    #: None when no sidecar was given.
    sidecars_agree: bool | None
    audit_s: float
    reconcile_s: float


def _policy_audit(args: Sequence[str], out: Callable[[str], None]) -> tuple[int, str, float]:
    out("$ policy-audit " + " ".join(shlex.quote(a) for a in args))
    started = time.monotonic()
    command = [str(BIN / "policy-audit"), *args]  # our own entry point, no shell
    done = subprocess.run(command, capture_output=True, text=True, check=False)  # noqa: S603
    took = time.monotonic() - started
    if done.stdout.strip():
        out(done.stdout.rstrip())
    if done.returncode not in (0, 1):
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        raise RuntimeError(f"policy-audit failed (exit {done.returncode}):\n{tail}")
    return done.returncode, done.stdout, took


def _deletes(history: Path) -> list[tuple[str, str | None, str]]:
    table = pq.read_table(history, columns=["key", "action", "author", "event_time", "offset"])
    rows = [r for r in table.to_pylist() if r["action"] == "DELETE"]
    return [
        (
            str(r["key"]),
            r["author"],
            r["event_time"].strftime("%Y-%m-%d %H:%M:%S UTC") if r["event_time"] else "?",
        )
        for r in sorted(rows, key=lambda r: (r["event_time"] is None, r["event_time"], r["key"]))
    ]


def audit_demo(
    bootstrap: str,
    output: Path,
    sidecars: Sequence[str],
    *,
    topic: str = CHANGE_EVENTS_TOPIC,
    out: Callable[[str], None] = print,
) -> AuditDemoResult:
    """``policy-audit`` over ``topic`` into ``output``, then ``policy-audit reconcile``."""
    source = ("--bootstrap-servers", bootstrap, "--topic", topic)
    rc, _, audit_s = _policy_audit(["--output", str(output), *source, *_SPARK], out)
    if rc != 0:
        raise RuntimeError(f"policy-audit exited {rc}")
    deletes = _deletes(output / "history")
    out("who deleted what (tombstones carry their author as Kafka headers):")
    for key, author, when in deletes:
        out(f"  {when}  {author or '(unknown)'} deleted the policies of {key}")
    report = output / "report.html"
    out(f"report: {report.as_uri()}  (audit took {audit_s:.1f}s)")
    agree: bool | None = None
    reconcile_s = 0.0
    if sidecars:
        flags = [a for url in sidecars for a in ("--sidecar", url)]
        rc, _, reconcile_s = _policy_audit(["reconcile", *source, *flags, *_SPARK], out)
        agree = rc == 0
        verdict = "agree with" if agree else "DIVERGE from"
        out(f"the {len(sidecars)} live sidecars {verdict} the log ({reconcile_s:.1f}s)")
    return AuditDemoResult(report, deletes, agree, audit_s, reconcile_s)
