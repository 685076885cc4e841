"""pulsar-perf-go, the Pulsar project's own load generator, against one sidecar (on the
benchmark's Kafka) and Apache Pulsar standalone, side by side: both stay up the whole run
and the rounds alternate between them.

Scenarios (100-byte messages; the Go client's default batching: up to 1,000 messages,
1 ms; ``perf produce -r 0`` is unthrottled):

* ``produce_1`` – one producer on a one-partition topic;
* ``produce_4p`` – one perf producer on a 4-partition topic: the Go client's partitioned
  producer, four producers on the wire, one per partition;
* ``pubsub_exclusive`` – one Exclusive consumer and one unthrottled producer, one topic;
* ``pubsub_shared`` – a Shared subscription with two consumers (two perf processes) and
  one unthrottled producer;
* ``latency_half`` – one producer at half Pulsar's ``produce_1`` median (the sidecar's
  when Pulsar is not there; half of ``BENCH_PERF_REFERENCE`` msg/s when neither ran):
  publish latency p50 and p99 (send to acknowledgement, as the tool measures it).

A round runs ``BENCH_PERF_ROUND_S`` seconds (40); pulsar-perf prints its figures every
10 s, and a round's figure is the mean of the intervals after the first. Each scenario
runs ``BENCH_PERF_ROUNDS`` rounds (3) per broker, alternating, and reports the median.
Before the first scenario every broker gets one uncounted warm-up round of produce and
consume (``BENCH_PERF_WARMUP_S``, 30; 0 skips it), so no JVM's compiler is measured.
Also per round: the broker's CPU seconds per message published (the sidecar's plus
Kafka's; Pulsar's JVM), and the load generator's own CPU (cores used by every perf
process together) — with two cores, a generator near 1.0 is near its limit, so compare
it with Pulsar's figures from the same generator before reading a gap as the broker's.

The tool is built on first use by ``go install`` from the Go module proxy
(``github.com/apache/pulsar-client-go/perf@v0.19.0``, CGO off) into ``.cache/tools/``.
Run alone: ``python -m bench.perf`` (``--scenarios produce_1,latency_half``); ``--formats
message,message@../before`` also runs a sidecar from another checkout (a git worktree of an
older commit), so before and after are measured interleaved in one run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._servers import Broker, cpu_seconds, listener_pid, pulsar_standalone, sidecar

__all__ = ["SCENARIOS", "consume_rates", "perf_binary", "publish_stats", "run"]

ROOT = Path(__file__).resolve().parent.parent
PERF_MODULE = "github.com/apache/pulsar-client-go/perf"
PERF_VERSION = "v0.19.0"
SIZE = 100
STATS_S = 10.0
#: Consumers subscribe this long before the producer starts.
SUBSCRIBE_S = 3.0

_PUBLISH = re.compile(
    r"Publish rate:\s*([\d.]+) msg/s.*?Latency ms: 50%\s*([\d.]+) -95%\s*([\d.]+)"
    r" - 99%\s*([\d.]+)",
    re.S,
)
_CONSUME = re.compile(r"Consume rate:\s*([\d.]+) msg/s")
#: The figures of a round, in the order the table prints them.
_FIGURES = (
    "publish",
    "consume",
    "p50",
    "p99",
    "broker_cpu_us_per_msg",
    "kafka_cpu_us_per_msg",
    "perf_cores",
)


@dataclass(frozen=True)
class Scenario:
    """One load shape: producers and consumers of one topic."""

    name: str
    partitions: int = 1
    #: Consumers (perf processes) of one subscription, and its type (perf's ``-t``:
    #: 0 Exclusive, 1 Shared).
    consumers: int = 0
    sub_type: int = 0
    #: Fixed publish rate (None: unthrottled; "half": half the reference maximum).
    rate: str | None = None


#: Run once against every broker before the measured rounds, figures discarded: both
#: brokers are JVMs started for the run (Kafka; Pulsar), and a cold JVM spends its first
#: minute compiling (Kafka's C2 threads took 0.21-0.67 of a core in the first round,
#: 0.01 once warm), which counted as the broker's CPU per message and slowed round 1.
WARMUP = Scenario("warmup", consumers=1, sub_type=0)

SCENARIOS = (
    Scenario("produce_1"),
    Scenario("produce_4p", partitions=4),
    Scenario("pubsub_exclusive", consumers=1, sub_type=0),
    Scenario("pubsub_shared", consumers=2, sub_type=1),
    Scenario("latency_half", rate="half"),
)


@dataclass
class Round:
    """What one round measured (rates in messages/s, latencies in ms)."""

    publish: float = 0.0
    consume: float = 0.0
    p50: float = 0.0
    p99: float = 0.0
    published: float = 0.0
    #: CPU of every broker process (the sidecar's plus Kafka's; Pulsar's JVM) per message
    #: published, and Kafka's part of it.
    broker_cpu_us_per_msg: float = 0.0
    kafka_cpu_us_per_msg: float = 0.0
    perf_cores: float = 0.0
    notes: list[str] = field(default_factory=list)


def perf_binary() -> Path:
    """pulsar-perf-go, built on first use (``go install``) into ``.cache/tools/``."""
    cache = ROOT / ".cache" / "tools"
    target = cache / f"pulsar-perf-go-{PERF_VERSION}"
    if target.is_file():
        return target
    go = shutil.which("go") or "/usr/local/go/bin/go"
    if not Path(go).exists():
        raise RuntimeError("pulsar-perf-go needs Go (go install from the Go module proxy)")
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as gobin:
        env = dict(os.environ, GOBIN=gobin, GOFLAGS="-mod=mod", CGO_ENABLED="0")
        print(f"  building pulsar-perf-go {PERF_VERSION} (go install, first use only)")
        subprocess.run(  # noqa: S603 - the Go toolchain
            [go, "install", f"{PERF_MODULE}@{PERF_VERSION}"], env=env, cwd=gobin, check=True
        )
        os.replace(Path(gobin) / "perf", target)
    return target


def _create_topic(broker: Broker, topic: str, partitions: int) -> None:
    """Create ``topic`` through the broker's admin API (partitioned when > 1)."""
    path = topic.replace("persistent://", "/admin/v2/persistent/")
    body = b""
    if partitions > 1:
        path += "/partitions"
        body = str(partitions).encode()
    request = urllib.request.Request(  # noqa: S310 - loopback
        broker.web_url + path,
        data=body,
        method="PUT",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as resp:  # noqa: S310
        if resp.status not in (200, 204):
            raise RuntimeError(f"{broker.name}: creating {topic} answered {resp.status}")


@contextlib.contextmanager
def _perf(binary: Path, broker: Broker, args: list[str], log: Path) -> Iterator[int]:
    """One pulsar-perf-go process (output to ``log``); yields its pid; SIGINT on exit."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(  # noqa: S603 - the load generator
            [str(binary), "--metrics", "-1", "-u", broker.service_url, *args],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            yield proc.pid
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def publish_stats(log: str) -> list[tuple[float, float, float]]:
    """``(rate msg/s, p50 ms, p99 ms)`` of each 10-s interval a ``perf produce`` printed."""
    return [(float(r), float(p50), float(p99)) for r, p50, _p95, p99 in _PUBLISH.findall(log)]


def consume_rates(log: str) -> list[float]:
    """The msg/s of each 10-s interval a ``perf consume`` printed."""
    return [float(v) for v in _CONSUME.findall(log)]


def _after_first(values: list[float]) -> float:
    kept = values[1:] or values
    return statistics.fmean(kept) if kept else 0.0


def _round(
    binary: Path,
    broker: Broker,
    pids: dict[str, int],
    scenario: Scenario,
    seconds: float,
    rate: int,
    workdir: Path,
) -> Round:
    topic = f"persistent://public/default/perf-{scenario.name}-{uuid.uuid4().hex[:8]}"
    _create_topic(broker, topic, scenario.partitions)
    tag = f"{broker.name}-{scenario.name}-{uuid.uuid4().hex[:4]}"
    result = Round()
    with contextlib.ExitStack() as stack:
        perf_pids = []
        for i in range(scenario.consumers):
            args = ["consume", "-s", "perf", "-t", str(scenario.sub_type), topic]
            log = workdir / f"{tag}-consume-{i}.log"
            perf_pids.append(stack.enter_context(_perf(binary, broker, args, log)))
        if scenario.consumers:
            time.sleep(SUBSCRIBE_S)
        before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        perf_before = sum(cpu_seconds(p) for p in perf_pids)
        started = time.monotonic()
        args = ["produce", "-r", str(rate), "-s", str(SIZE), topic]
        perf_pids.append(stack.enter_context(_perf(binary, broker, args, workdir / f"{tag}.log")))
        time.sleep(seconds + 1.0)
        elapsed = time.monotonic() - started
        used = {name: cpu_seconds(pid) - before[name] for name, pid in pids.items()}
        result.perf_cores = (sum(cpu_seconds(p) for p in perf_pids) - perf_before) / elapsed
    produced = (workdir / f"{tag}.log").read_text(errors="replace")
    stats = publish_stats(produced)
    if not stats:
        result.notes.append(f"no publish figures (see {workdir / tag}.log)")
        return result
    result.publish = _after_first([s[0] for s in stats])
    result.p50 = _after_first([s[1] for s in stats])
    result.p99 = _after_first([s[2] for s in stats])
    result.published = sum(s[0] for s in stats) * STATS_S
    if result.published:
        result.broker_cpu_us_per_msg = sum(used.values()) / result.published * 1e6
        result.kafka_cpu_us_per_msg = used.get("kafka", 0.0) / result.published * 1e6
    if scenario.consumers:
        per_consumer = []
        for i in range(scenario.consumers):
            text = (workdir / f"{tag}-consume-{i}.log").read_text(errors="replace")
            per_consumer.append(consume_rates(text))
        result.consume = sum(_after_first(v) for v in per_consumer)
    return result


def _median(rounds: list[Round], name: str) -> float:
    values = [getattr(r, name) for r in rounds]
    return statistics.median(values) if values else 0.0


def run(
    bootstrap: str | None = None,
    *,
    rounds: int | None = None,
    seconds: float | None = None,
    scenarios: list[str] | None = None,
    formats: list[str] | None = None,
) -> dict[str, Any]:
    """Run the scenarios against Pulsar and a sidecar per stored format (``formats``,
    default ``$BENCH_ENTRY_FORMATS`` or message and entry), print the table, return the
    figures."""
    bootstrap = bootstrap or os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if bootstrap is None:
        sys.path.insert(0, str(ROOT))
        from tests.support.kafka import kafka_for_tests

        with kafka_for_tests() as started:
            return run(
                started, rounds=rounds, seconds=seconds, scenarios=scenarios, formats=formats
            )
    rounds = rounds or int(os.environ.get("BENCH_PERF_ROUNDS", "3"))
    seconds = seconds or float(os.environ.get("BENCH_PERF_ROUND_S", "40"))
    warmup = float(os.environ.get("BENCH_PERF_WARMUP_S", "30"))
    chosen = [s for s in SCENARIOS if scenarios is None or s.name in scenarios]
    binary = perf_binary()
    workdir = Path(tempfile.mkdtemp(prefix="bench-perf-"))
    kafka_pid = listener_pid(int(bootstrap.split(",")[0].rsplit(":", 1)[1]))
    out: dict[str, Any] = {
        "tool": f"pulsar-perf-go {PERF_VERSION}",
        "size": SIZE,
        "rounds": rounds,
        "round_s": seconds,
        "warmup_s": warmup,
        "logs": str(workdir),
    }
    formats = formats or os.environ.get("BENCH_ENTRY_FORMATS", "message,entry").split(",")
    out["sidecars"] = [_sidecar_name(f) for f in formats]
    with contextlib.ExitStack() as stack:
        pulsar = stack.enter_context(pulsar_standalone())
        targets: list[tuple[Broker, dict[str, int]]] = []
        if pulsar is not None:
            pid = listener_pid(pulsar.broker_port)
            targets.append((pulsar, {"pulsar": pid} if pid else {}))
        for spec in formats:
            entry_format, _, source = spec.partition("@")
            ours = stack.enter_context(
                sidecar(
                    bootstrap, entry_format, _sidecar_name(spec), Path(source) if source else None
                )
            )
            found = {"sidecar": listener_pid(ours.broker_port), "kafka": kafka_pid}
            targets.append((ours, {name: pid for name, pid in found.items() if pid}))
        if warmup > 0:
            for broker, pids in targets:
                r = _round(binary, broker, pids, WARMUP, warmup, 0, workdir)
                print(f"  warm-up {broker.name} ({warmup:.0f} s, not counted): publish "
                      f"{r.publish:,.0f}/s consume {r.consume:,.0f}/s", flush=True)  # fmt: skip
        # Without produce_1 in this run, "half" takes half of BENCH_PERF_REFERENCE (msg/s):
        # a fixed rate to compare CPU per message of two formats without Pulsar.
        reference: float | None = float(os.environ.get("BENCH_PERF_REFERENCE", "0")) or None
        for scenario in chosen:
            rate = 0
            if scenario.rate == "half":
                rate = max(1, int((reference or 2_000.0) / 2))
            results: dict[str, list[Round]] = {b.name: [] for b, _ in targets}
            for n in range(rounds):
                for broker, pids in targets:
                    r = _round(binary, broker, pids, scenario, seconds, rate, workdir)
                    results[broker.name].append(r)
                    print(
                        f"  {scenario.name} round {n + 1} {broker.name}: publish "
                        f"{r.publish:,.0f}/s consume {r.consume:,.0f}/s p50 {r.p50:.1f} ms "
                        f"p99 {r.p99:.1f} ms cpu {r.broker_cpu_us_per_msg:.1f} us/msg "
                        f"(kafka {r.kafka_cpu_us_per_msg:.1f}) "
                        f"perf {r.perf_cores:.2f} cores {' '.join(r.notes)}",
                        flush=True,
                    )
            figures = {
                name: {key: _median(rs, key) for key in _FIGURES} for name, rs in results.items()
            }
            if scenario.rate is not None:
                figures["rate_per_s"] = {"fixed": float(rate)}
            out[scenario.name] = figures
            if scenario.name == "produce_1":
                ref = figures.get("pulsar", figures[targets[-1][0].name])
                reference = ref["publish"] or None
    _print_table(out, [s.name for s in chosen])
    return out


def _sidecar_name(spec: str) -> str:
    """The table's name of the sidecar of ``spec``: a stored format, with ``@PATH`` when
    it runs another checkout's code (``message@../before``: ``sidecar@before``)."""
    entry_format, _, source = spec.partition("@")
    name = "sidecar" if entry_format == "message" else f"sidecar-{entry_format}"
    return f"{name}@{Path(source).name}" if source else name


def _print_table(out: dict[str, Any], names: list[str]) -> None:
    print(f"pulsar-perf-go {PERF_VERSION}, {SIZE}-byte messages, medians of {out['rounds']} "
          f"rounds of {out['round_s']:.0f} s, interleaved")  # fmt: skip
    sidecars: list[str] = out["sidecars"]
    head = "".join(f" {n:>14} {'ratio':>7}" for n in sidecars)
    print(f"  {'scenario / figure':<34} {'Pulsar':>12}{head}")
    for name in names:
        figures = out[name]
        pulsar = figures.get("pulsar", {})
        for key in _FIGURES:
            if not pulsar.get(key) and not any(figures[n].get(key) for n in sidecars):
                continue
            theirs = pulsar.get(key, 0.0)
            cells = ""
            for n in sidecars:
                ours = figures[n][key]
                ratio = f"{ours / theirs:.2f}x" if theirs else "-"
                cells += f" {ours:>14,.1f} {ratio:>7}"
            print(f"  {name + ' ' + key:<34} {theirs:>12,.1f}{cells}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.perf")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--seconds", type=float, default=None)
    parser.add_argument("--scenarios", default=None, help="comma-separated; default: all")
    parser.add_argument(
        "--formats",
        default=None,
        help="stored formats, comma-separated (message,entry); FORMAT@PATH runs that "
        "checkout's code too (e.g. a git worktree of an older commit: before and after)",
    )
    args = parser.parse_args()
    names = args.scenarios.split(",") if args.scenarios else None
    formats = args.formats.split(",") if args.formats else None
    figures = run(rounds=args.rounds, seconds=args.seconds, scenarios=names, formats=formats)
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
