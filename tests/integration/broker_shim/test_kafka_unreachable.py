"""Readiness that tells the truth when Kafka is unreachable, on a real broker: a sidecar
whose only Kafka broker is killed (-9) answers /health 503 with ``"kafka":
"UNREACHABLE"`` during the outage, and 200 again once the broker is back (the hysteresis
and the catch-up after an outage are unit-tested on the twin:
tests/unit/broker_shim/test_kafka_readiness.py).

A private single-node broker, so the session-wide one is never stopped.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.integration.broker_shim.test_faults import jar_broker_at
from tests.support.http import http
from tests.support.kafka import KAFKACTL, free_port
from tests.support.sidecars import Sidecar
from tests.support.waits import wait_for


def test_health_is_503_while_kafka_is_down_and_200_once_it_is_back(
    unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    port, cport = free_port(), free_port()
    ctl = [sys.executable, str(KAFKACTL)]
    node = ["--port", str(port), "--state-dir", str(tmp_path / "broker")]
    where = [*node, "--controller-port", str(cport)]
    with jar_broker_at(ctl, where, node) as bootstrap:
        shim = Sidecar(bootstrap, unique_name("ce"), free_port(), tmp_path)
        seen: list[tuple[int, dict[str, Any]]] = []

        def health_is(status: int, kafka: str) -> bool:
            try:
                got = http("GET", shim.url + "/health", timeout=5)
            except OSError:
                return False
            body = got.json()
            seen[:] = [(got.status, body)]
            return got.status == status and body.get("kafka") == kafka

        try:
            shim.wait_ready(120)
            wait_for(lambda: health_is(200, "REACHABLE"), lambda: f"REACHABLE: {seen}", 60, 0.2)
            pid = int((tmp_path / "broker" / "kafka.pid").read_text().strip())
            os.kill(pid, signal.SIGKILL)
            wait_for(
                lambda: health_is(503, "UNREACHABLE"),
                lambda: (
                    f"/health 503 UNREACHABLE during the outage: {seen}\n{shim.log_text()[-3000:]}"
                ),
                timeout_s=120,
                interval_s=0.2,
            )
            body = seen[0][1]
            assert body["kafkaLastError"], body
            assert {"state", "brokerId", "writer"} <= body.keys(), body
            subprocess.run([*ctl, "up", *where], check=True, capture_output=True)
            wait_for(
                lambda: health_is(200, "REACHABLE"),
                lambda: f"/health 200 once Kafka is back: {seen}\n{shim.log_text()[-3000:]}",
                timeout_s=180,
                interval_s=0.2,
            )
            assert seen[0][1]["state"] == "READY", seen
        finally:
            shim.stop()
