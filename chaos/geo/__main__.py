"""``python -m chaos.geo`` (``make geo-chaos``): every geo fault, N runs each, with long
outages on one geo setup (``geoctl up --free-ports``, stopped at the end; the Kafka stopped
is west's in the first run, east's in the second, and so on); prints each run
and, per fault, p50/max of the convergence bound and the counts; exits 1 on a lost write or
a run that did not converge.

Options: ``--runs N`` (5), ``--outage S`` (60), ``--faults mm2-stop,mm2-kill,kafka-down``,
``--seed`` (random, printed), ``--ceiling S`` (300: the liveness bound of one convergence),
``--keep-logs`` (keep the setup's state directory, logs included, after stopping it).
"""

from __future__ import annotations

import argparse
import json
import logging
import secrets
import statistics
import sys
import time
from collections.abc import Sequence

from ._cluster import CLUSTERS, GeoCluster
from ._faults import FAULTS, FaultConfig, FaultResult, all_clusters_healthy, run_fault


def say(text: str) -> None:
    print(f"geo-chaos: {text}", flush=True)


def _faults(text: str) -> tuple[str, ...]:
    faults = tuple(f.strip() for f in text.split(",") if f.strip())
    unknown = [f for f in faults if f not in FAULTS]
    if unknown or not faults:
        raise argparse.ArgumentTypeError(f"faults are {', '.join(FAULTS)}; got {text!r}")
    return faults


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m chaos.geo", description=__doc__)
    parser.add_argument("--runs", type=int, default=5, help="runs per fault (5)")
    parser.add_argument("--outage", type=float, default=60.0, help="seconds (60)")
    parser.add_argument("--faults", type=_faults, default=FAULTS, help=",".join(FAULTS))
    parser.add_argument("--seed", type=int, default=None, help="random if unset (printed)")
    parser.add_argument("--ceiling", type=float, default=300.0, help="liveness bound, s")
    parser.add_argument("--keep-logs", action="store_true", help="keep the state directory")
    return parser.parse_args(argv)


def report(results: list[FaultResult]) -> None:
    say("===== per fault =====")
    for fault in dict.fromkeys(r.config.fault for r in results):
        runs = [r for r in results if r.config.fault == fault]
        bounds = [r.bound_s for r in runs]
        line = {
            "fault": fault,
            "runs": len(runs),
            "boundP50S": round(statistics.median(bounds), 2),
            "boundMaxS": round(max(bounds), 2),
            "acknowledged": sum(r.acknowledged for r in runs),
            "lost": sum(len(r.lost) for r in runs),
            "duplicatesSeen": sum(r.duplicates for r in runs),
        }
        say(json.dumps(line))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
    say(f"seed {seed}; {args.runs} run(s) per fault of {args.outage:.0f}s: {args.faults}")
    geo = GeoCluster()
    results: list[FaultResult] = []
    failed = False
    try:
        started = time.monotonic()
        geo.up()
        say(f"geo setup up in {time.monotonic() - started:.0f}s ({geo.state_dir})")
        for run in range(args.runs):
            for fault in args.faults:
                config = FaultConfig(
                    fault=fault,
                    outage_s=args.outage,
                    seed=seed + run,
                    tag=f"c{seed % 10_000}-{run}-{fault}",
                    ceiling_s=args.ceiling,
                    down_cluster=CLUSTERS[(run + 1) % len(CLUSTERS)],  # west, east, west, ...
                )
                try:
                    result = run_fault(geo, config)
                except AssertionError as exc:
                    say(f"FAILED {fault} run {run}: {exc}")
                    failed = True
                    continue
                results.append(result)
                say(json.dumps(result.summary()))
                if result.lost:
                    failed = True
                    for line in result.lost[:20]:
                        say(f"LOST: {line}")
                if not all_clusters_healthy(geo):
                    say(f"after {fault} run {run} not every sidecar is healthy")
        if results:
            report(results)
    finally:
        geo.down(purge=not args.keep_logs)
        if args.keep_logs or geo.keep_state:
            say(f"logs kept in {geo.state_dir}")
    say(f"seed {seed} (rerun: python -m chaos.geo --seed {seed})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
