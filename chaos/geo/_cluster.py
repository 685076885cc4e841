"""Two geo-replicated clusters as ``docker/geo/geoctl.py`` runs them, driven from Python:
up (any free ports, own state directory), the faults (MirrorMaker 2 stopped or killed, one
cluster's Kafka stopped) and their heals, down."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
GEOCTL = ROOT / "docker" / "geo" / "geoctl.py"
CLUSTERS = ("east", "west")


class GeoError(Exception):
    """A geoctl command failed (its output is in the message)."""


@dataclass(frozen=True)
class Endpoints:
    """One cluster's bootstrap address and sidecar URLs (``endpoints.json``)."""

    bootstrap: str
    sidecars: tuple[str, ...]


class GeoCluster:
    """East and west, two sidecars each, joined by MirrorMaker 2 (see ``geoctl.py``)."""

    def __init__(self, state_dir: Path | None = None) -> None:
        self._own_dir = state_dir is None
        self.state_dir = state_dir or Path(tempfile.mkdtemp(prefix="policy-sync-geo-"))
        self.raw: dict[str, Any] = {}
        self.endpoints: dict[str, Endpoints] = {}
        #: Set by a run that failed: ``down`` then keeps the state directory (the logs).
        self.keep_state = False

    def _geoctl(self, *args: str) -> str:
        cmd = [sys.executable, str(GEOCTL), *args, "--state-dir", str(self.state_dir)]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)  # noqa: S603
        if done.returncode != 0:
            raise GeoError(f"geoctl {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
        return done.stdout

    def up(self) -> GeoCluster:
        out = self._geoctl("up", "--free-ports")
        self.raw = json.loads(Path(out.strip().splitlines()[-1]).read_text())
        self.endpoints = {
            name: Endpoints(str(e["bootstrap"]), tuple(e["sidecars"]))
            for name, e in self.raw.items()
        }
        return self

    def down(self, *, purge: bool = True) -> None:
        """Stop everything ``up`` started and (``purge``, unless :attr:`keep_state`) delete
        its state and logs; never raises."""
        if purge and self.keep_state:
            purge = False
            # Said again at the teardown: the failure that set it may be far above.
            print(f"geo setup's state and logs kept in {self.state_dir}", file=sys.stderr)
        try:
            self._geoctl("down", *(["--purge"] if purge else []))
        except GeoError:
            logger.exception("geoctl down failed")
            return
        if purge and self._own_dir:
            shutil.rmtree(self.state_dir, ignore_errors=True)  # only its lock file is left

    def mm2_stop(self) -> None:
        self._geoctl("mm2-stop")

    def mm2_kill(self) -> None:
        self._geoctl("mm2-kill")

    def mm2_start(self) -> None:
        """Start MirrorMaker 2 and wait until it replicates both ways."""
        self._geoctl("mm2-start")

    def kafka_stop(self, cluster: str) -> None:
        self._geoctl("kafka-stop", "--cluster", cluster)

    def kafka_start(self, cluster: str) -> None:
        self._geoctl("kafka-start", "--cluster", cluster)

    def sidecar_pids(self, cluster: str) -> list[int]:
        """Pids geoctl recorded for ``cluster``'s sidecars."""
        state = json.loads((self.state_dir / "state.json").read_text())
        procs = state.get("processes", {})
        return [
            int(p["pid"]) for name, p in procs.items() if name.startswith(f"sidecar-{cluster[0]}")
        ]

    def mm2_log_tail(self, lines: int = 12) -> str:
        """MirrorMaker 2's last ``replicating`` and ERROR lines (for a failure message)."""
        try:
            text = (self.state_dir / "mm2" / "mm2.log").read_text(errors="replace")
        except OSError as exc:
            return f"(no MirrorMaker 2 log: {exc})"
        picked = [ln for ln in text.splitlines() if " ERROR " in ln or "replicating" in ln]
        return "\n".join(ln[:300] for ln in picked[-lines:])

    def sidecar_log_tail(self, url: str, lines: int = 15) -> str:
        """The WARNING and ERROR lines at the end of the log of the sidecar at ``url``."""
        for cluster, ends in self.endpoints.items():
            if url in ends.sidecars:
                index = ends.sidecars.index(url)
                path = self.state_dir / cluster / f"{cluster[0]}{index + 1}" / "sidecar.log"
                break
        else:
            return f"(no sidecar at {url})"
        try:
            text = path.read_text(errors="replace")
        except OSError as exc:
            return f"(no log: {exc})"
        picked = [ln for ln in text.splitlines() if " WARNING " in ln or " ERROR " in ln]
        return "\n".join(ln[:300] for ln in picked[-lines:])

    @property
    def sidecars(self) -> list[str]:
        """Every sidecar URL, east's first."""
        return [u for c in CLUSTERS for u in self.endpoints[c].sidecars]
