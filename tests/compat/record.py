"""Differential test against the real Apache Pulsar (issue 13, item 5).

::

    python -m tests.compat.record record  --target http://127.0.0.1:18080 [--out FILE]
    python -m tests.compat.record compare --target http://127.0.0.1:PORT [--recorded FILE]
                                          [--differences FILE] [--report FILE]

``record`` sends :data:`tests.compat.cases.CASES` in order to a real Pulsar and writes its
answers (status and normalized body) to ``pulsar-<version>.json`` beside this file, the file
the project commits. ``compare`` sends the same cases to a sidecar and compares its answers
with the recorded ones; every difference must be listed in ``differences.json`` with the
reason (intended, or not done yet), or ``compare`` exits 1. ``tests/integration/
test_pulsar_compat.py`` runs ``compare`` against a fresh sidecar without starting Pulsar;
``make compat`` records live first.

Stdlib only (urllib), so it runs against either side without the project's code.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.compat.cases import CASES, Case

HERE = Path(__file__).resolve().parent
PULSAR_VERSION = "4.0.7"
RECORDED = HERE / f"pulsar-{PULSAR_VERSION}.json"
DIFFERENCES = HERE / "differences.json"
REQUEST_TIMEOUT_S = 30.0
SETTLE_TIMEOUT_S = 15.0
SETTLE_POLL_S = 0.2

# Addresses differ between the two sides (ports, host names): compared as placeholders.
_ADDRESS = re.compile(r"(?:127\.0\.0\.1|localhost|\[::1\]):\d+")


@dataclass(frozen=True)
class Answer:
    """A normalized answer: status and body (parsed JSON, text, or None when empty)."""

    status: int
    body: Any

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "body": self.body}


# Jersey's own error page (a path no resource serves) names its servlet instance by hash.
_JERSEY_ERROR_KEYS = frozenset({"message", "servlet", "status", "url"})
# A schema version (Pulsar's GetSchemaResponse) carries the time it was written.
_SCHEMA_KEYS = frozenset({"data", "properties", "timestamp", "type", "version"})
TIMESTAMP = "TIMESTAMP"
# Pulsar's body for an unexpected exception (a 500): its message, then the Java stack
# trace (line numbers of Pulsar's classes), which is cut off.
_SERVER_ERROR = "\n --- An unexpected error occurred in the server ---"
_STACKTRACE = "\n\nStacktrace:"


def normalize(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == _JERSEY_ERROR_KEYS:
        value = {k: v for k, v in value.items() if k != "servlet"}
    if isinstance(value, dict) and set(value) == _SCHEMA_KEYS:
        value = {**value, "timestamp": TIMESTAMP}
    if isinstance(value, dict) and isinstance(value.get("reason"), str):
        reason = value["reason"]
        if reason.startswith(_SERVER_ERROR):
            value = {**value, "reason": reason.split(_STACKTRACE, 1)[0]}
    if isinstance(value, str):
        return _ADDRESS.sub("HOST:PORT", value)
    if isinstance(value, list):
        return [normalize(v) for v in value]
    if isinstance(value, dict):
        return {k: normalize(v) for k, v in sorted(value.items())}
    return value


def _parse_body(raw: bytes, unordered: bool) -> Any:
    text = raw.decode("utf-8", "replace")
    if not text.strip():
        return None
    try:
        body = json.loads(text)
    except ValueError:
        return normalize(text.strip())
    body = normalize(body)
    return _sorted_lists(body) if unordered else body


def _sorted_lists(value: Any) -> Any:
    """``value`` with every list in it sorted (sets: Pulsar's JSON of a ``HashSet`` lists
    them in an order that changes from one JVM to the next)."""
    if isinstance(value, list):
        items = [_sorted_lists(v) for v in value]
        return sorted(items, key=lambda v: json.dumps(v, sort_keys=True))
    if isinstance(value, dict):
        return {k: _sorted_lists(v) for k, v in value.items()}
    return value


def send(base_url: str, case: Case) -> Answer:
    data = None if case.body is None else case.body.encode()
    request = urllib.request.Request(  # noqa: S310 - loopback test targets only
        base_url.rstrip("/") + case.path, data=data, method=case.method
    )
    request.add_header("Accept", "application/json")
    if data is not None:
        request.add_header("Content-Type", case.content_type)
    try:
        with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:  # noqa: S310
            return Answer(response.status, _parse_body(response.read(), case.unordered))
    except urllib.error.HTTPError as err:
        return Answer(err.code, _parse_body(err.read(), case.unordered))


def _settled(case: Case, answer: Answer) -> bool:
    if answer.status == 503 and case.path.startswith("/lookup/"):
        return False  # a bundle changing owners: Pulsar's clients retry the lookup
    if case.settle is None or answer.status != 200:
        return True
    present = answer.body not in (None, {}, [])
    return present if case.settle == "set" else not present


def run_case(base_url: str, case: Case) -> Answer:
    """Send case; a settling read is repeated (bounded) until it shows the write."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        answer = send(base_url, case)
        if _settled(case, answer) or time.monotonic() > deadline:
            return answer
        time.sleep(SETTLE_POLL_S)


def run_all(base_url: str, cases: Sequence[Case] = CASES) -> dict[str, Answer]:
    return {case.name: run_case(base_url, case) for case in cases}


# ------------------------------------------------------------------------------- compare


@dataclass(frozen=True)
class Difference:
    name: str
    case: Case
    expected: Answer
    actual: Answer

    def describe(self) -> str:
        return (
            f"{self.name}: {self.case.method} {self.case.path}\n"
            f"    pulsar:  {json.dumps(self.expected.to_json(), sort_keys=True)}\n"
            f"    sidecar: {json.dumps(self.actual.to_json(), sort_keys=True)}"
        )


def _jackson_text(answer: Answer) -> bool:
    """Pulsar's 400 for a body its JSON binding (Jackson) refused is Jackson's own text
    (Java type names, line and column): such answers are compared by status only."""
    return answer.status == 400 and isinstance(answer.body, str)


def _ordered(case: Case, body: Any) -> Any:
    return _sorted_lists(body) if case.unordered else body


def load_recorded(path: Path = RECORDED) -> dict[str, Answer]:
    raw = json.loads(path.read_text())
    return {entry["name"]: Answer(int(entry["status"]), entry["body"]) for entry in raw["answers"]}


def load_differences(path: Path = DIFFERENCES) -> dict[str, str]:
    """Case name -> why the sidecar answers differently (kept on purpose or not done yet)."""
    raw = json.loads(path.read_text())
    listed: dict[str, str] = {}
    for entry in raw["differences"]:
        reason = str(entry.get("reason", "")).strip()
        if not reason:
            raise ValueError(f"difference {entry!r} has no reason")
        for name in entry["cases"]:
            listed[str(name)] = reason
    return listed


def differences(
    recorded: dict[str, Answer], actual: dict[str, Answer], cases: Sequence[Case] = CASES
) -> list[Difference]:
    found: list[Difference] = []
    for case in cases:
        expected = recorded.get(case.name)
        if expected is None:
            raise KeyError(f"case {case.name!r} was never recorded: run `make compat`")
        got = actual[case.name]
        same = expected.status == got.status and (
            case.compare == "status"
            or _jackson_text(expected)
            or _ordered(case, expected.body) == _ordered(case, got.body)
        )
        if not same:
            found.append(Difference(case.name, case, expected, got))
    return found


def compare(
    base_url: str, recorded_path: Path = RECORDED, differences_path: Path = DIFFERENCES
) -> tuple[list[Difference], list[Difference], list[str]]:
    """(unlisted differences, listed differences, listed cases that now agree)."""
    recorded = load_recorded(recorded_path)
    listed = load_differences(differences_path)
    actual = run_all(base_url)
    found = differences(recorded, actual)
    unlisted = [d for d in found if d.name not in listed]
    known = [d for d in found if d.name in listed]
    fixed = sorted(set(listed) - {d.name for d in found})
    return unlisted, known, fixed


# ----------------------------------------------------------------------------------- CLI


def cmd_record(args: argparse.Namespace) -> int:
    answers = run_all(args.target)
    payload = {
        "pulsar": PULSAR_VERSION,
        "note": "Recorded by tests/compat/record.py from a real Pulsar standalone "
        "(docker/pulsar/pulsarctl.py); addresses normalized to HOST:PORT.",
        "answers": [
            {"name": c.name, "method": c.method, "path": c.path, **answers[c.name].to_json()}
            for c in CASES
        ],
    }
    Path(args.out).write_text(json.dumps(payload, indent=1, sort_keys=False) + "\n")
    print(f"recorded {len(answers)} answers of {args.target} in {args.out}", file=sys.stderr)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    unlisted, known, fixed = compare(args.target, Path(args.recorded), Path(args.differences))
    lines = [f"{len(CASES)} cases; {len(known)} listed differences; {len(unlisted)} unlisted"]
    lines += ["UNLISTED " + d.describe() for d in unlisted]
    if args.verbose:
        lines += ["listed " + d.describe() for d in known]
    lines += [f"listed but now equal (remove from the list): {name}" for name in fixed]
    text = "\n".join(lines) + "\n"
    if args.report:
        Path(args.report).write_text(text)
    sys.stdout.write(text)
    return 1 if unlisted or fixed else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.compat.record")
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="record a real Pulsar's answers")
    rec.add_argument("--target", required=True, help="Pulsar web URL, http://127.0.0.1:8080")
    rec.add_argument("--out", default=str(RECORDED))
    rec.set_defaults(func=cmd_record)
    cmp_ = sub.add_parser("compare", help="compare a sidecar with the recorded answers")
    cmp_.add_argument("--target", required=True, help="sidecar URL")
    cmp_.add_argument("--recorded", default=str(RECORDED))
    cmp_.add_argument("--differences", default=str(DIFFERENCES))
    cmp_.add_argument("--report", default=None, help="also write the report here")
    cmp_.add_argument("-v", "--verbose", action="store_true", help="print listed ones too")
    cmp_.set_defaults(func=cmd_compare)
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
