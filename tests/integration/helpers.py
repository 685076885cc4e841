"""Helpers for tests that run the real command-line programs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent


def run_cli(
    name: str, *args: str, bootstrap: str, stdin: str | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, KAFKA_BOOTSTRAP_SERVERS=bootstrap)
    return subprocess.run(
        [str(BIN / name), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )


@dataclass
class HttpResult:
    status: int
    body: str

    def json(self) -> Any:
        return json.loads(self.body)


def http(method: str, url: str, body: str | None = None, timeout: float = 30) -> HttpResult:
    data = None if body is None else body.encode()
    req = urllib.request.Request(url, data=data, method=method)  # noqa: S310 - loopback test URLs
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310
            return HttpResult(resp.status, resp.read().decode())
    except urllib.error.HTTPError as err:
        return HttpResult(err.code, err.read().decode())


def create_topic(url: str, topic: str) -> None:
    """Create ``persistent://tenant/ns/local`` through a sidecar's Pulsar admin API, with its
    tenant and namespace (each may already exist): Pulsar keeps policies only for topics."""
    tenant_ns, _, local = topic.removeprefix("persistent://").rpartition("/")
    tenant = tenant_ns.partition("/")[0]
    for path in (
        f"/admin/v2/tenants/{tenant}",
        f"/admin/v2/namespaces/{tenant_ns}",
        f"/admin/v2/persistent/{tenant_ns}/{local}",
    ):
        result = http("PUT", url + path, "{}" if "tenants" in path else None)
        assert result.status in (204, 409), (path, result.status, result.body)


class Sidecar:
    """A real ``broker-shim run`` process."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        port: int,
        state_dir: Path,
        broker_id: str = "1",
        extra: list[str] | None = None,
    ) -> None:
        self.topic = topic
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log = state_dir / f"shim-{broker_id}.log"
        state_dir.mkdir(parents=True, exist_ok=True)
        self._logfile = open(self.log, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [
                str(BIN / "broker-shim"),
                "run",
                "--broker-id",
                broker_id,
                "--http-port",
                str(port),
                "--broker-port",
                "0",
                "--bootstrap-servers",
                bootstrap,
                "--topic",
                topic,
                "--state-dir",
                str(state_dir / f"state-{broker_id}"),
                *(extra or []),
            ],
            stdout=self._logfile,
            stderr=subprocess.STDOUT,
        )

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"sidecar exited {self.proc.returncode}:\n{self.log_text()}")
            try:
                if http("GET", self.url + "/health", timeout=2).status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"sidecar not ready in {timeout}s:\n{self.log_text()}")

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def digest(self) -> dict[str, Any]:
        result = http("GET", self.url + "/policy-sync/v1/digest")
        assert result.status == 200, result.body
        return dict(result.json())

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            # Never leak a process into the next test: a sidecar that ignored the signal
            # is killed, and its exit code (-9) tells a caller that checks it.
            self.proc.kill()
            code = self.proc.wait()
        self._logfile.close()
        return code
