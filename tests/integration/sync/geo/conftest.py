"""One geo setup per module: two real Kafka clusters (east, west), two sidecars each and the
real MirrorMaker 2, started by ``docker/geo/geoctl.py up --free-ports`` (tests never use fixed
ports: other runs share the machine) and stopped with ``down --purge``."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.kafka import ROOT

GEOCTL = ROOT / "docker" / "geo" / "geoctl.py"


@pytest.fixture(scope="module")
def geo() -> Iterator[dict[str, Any]]:
    """``endpoints.json`` of a running geo setup: ``{"east": {"bootstrap", "sidecars"}, …}``."""
    state = Path(tempfile.mkdtemp(prefix="policy-sync-geo-"))
    base = [sys.executable, str(GEOCTL)]
    up = subprocess.run(
        [*base, "up", "--free-ports", "--state-dir", str(state)],
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        assert up.returncode == 0, f"geoctl up failed:\n{up.stdout}\n{up.stderr}"
        yield json.loads(Path(up.stdout.strip().splitlines()[-1]).read_text())
    finally:
        subprocess.run(
            [*base, "down", "--state-dir", str(state), "--purge"], capture_output=True, check=False
        )
