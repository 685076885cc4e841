"""The short chaos soak (``CHAOS_SECONDS=75``), part of ``make test``: the soak must pass
every check that does not depend on the machine's speed.

It runs the real soak as a process on the 3-broker cluster (it takes /tmp/ps-cluster.lock
itself): kill -9 and SIGSTOP of sidecars, clean restarts, kill -9 of Kafka brokers, admin
writers, WebSocket traffic, the poison fuzz and the HTTP/WebSocket fuzz, then the checks:
no crash, no lost write or message, no duplicate without a redelivery count, no divergent
cache (also a fresh replay), no double owner, no 5xx to bad input, no 5xx but 503 +
Retry-After to the writers' and clients' valid requests. The seed is fixed. The speed targets
(failover p99, healthy within 5 s) are measured and printed but not checked here
(``CHAOS_TIME_CHECKS=0``); ``make chaos`` checks them over 10 minutes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXED_SEED = 10290505


@pytest.mark.timeout(1500)
def test_short_chaos_soak_passes_every_check(tmp_path: Path) -> None:
    env = dict(
        os.environ,
        CHAOS_SECONDS=os.environ.get("CHAOS_SECONDS", "75"),
        # One fixed seed: `make test` checks correctness the same way every run; other
        # seeds are `make chaos`'s job. This one made a fresh clone's soak fail on a busy
        # machine (a 503 to a name no Kafka topic can hold, a 500 to a fenced write).
        CHAOS_SEED=os.environ.get("CHAOS_SEED", str(FIXED_SEED)),
        CHAOS_TIME_CHECKS=os.environ.get("CHAOS_TIME_CHECKS", "0"),
        CHAOS_WORKDIR=str(tmp_path / "chaos"),
    )
    out = subprocess.run(
        [sys.executable, "-m", "chaos"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1400,
        check=False,
    )
    report = out.stdout[-20000:] + out.stderr[-3000:]
    assert "===== checks =====" in out.stdout, report
    assert out.returncode == 0, report
