"""The short chaos soak (``CHAOS_SECONDS=75``): ``make chaos`` must pass its own checks.

It runs the real soak as a process on the 3-broker cluster (it takes /tmp/ps-cluster.lock
itself) and fails with the soak's report when any check is violated. ``make chaos-short``
runs it. It is not part of ``make test`` yet: on the current code the soak still finds
violations of issue 11's targets (see docs/benchmarks.md, "Chaos soak"), and ``make test``
must pass; it joins ``make test`` when the soak passes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(1500)
def test_short_chaos_soak_passes_every_check(tmp_path: Path) -> None:
    env = dict(
        os.environ,
        CHAOS_SECONDS=os.environ.get("CHAOS_SECONDS", "75"),
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
