"""``make bench``: every benchmark, side by side with raw confluent-kafka, in one run."""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
from typing import Any

from . import policy
from ._kafka import bench_broker, machine

# Benchmarks of the other capabilities; each module exposes run(bootstrap) -> dict.
OPTIONAL = (
    "bench.lookup",
    "bench.messaging",
    "bench.binary",
    "bench.policy_effect",
    "bench.audit",
    "bench.writes",
    "bench.perf",
    "bench.geo",
)


def main() -> None:
    parser = argparse.ArgumentParser(prog="make bench")
    parser.add_argument("--policies", type=int, default=1_000_000)
    parser.add_argument(
        "--only",
        default=None,
        help="policy|lookup|messaging|binary|policy_effect|audit|writes|perf|geo",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    results: dict[str, Any] = {"machine": machine()}
    with bench_broker() as bootstrap:
        if args.only in (None, "policy"):
            results["policy"] = policy.run(bootstrap, policies=args.policies)
            print(json.dumps({"policy": results["policy"]}, indent=2), flush=True)
        for name in OPTIONAL:
            short = name.rsplit(".", 1)[1]
            if args.only not in (None, short):
                continue
            try:
                module = importlib.import_module(name)
            except ModuleNotFoundError:
                continue
            results[short] = module.run(bootstrap)
            print(json.dumps({short: results[short]}, indent=2), flush=True)
    json.dump(results, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
