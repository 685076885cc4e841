"""The official Pulsar admin clients against sidecars (issue 13, item 6).

The Java ``PulsarAdmin`` (Maven Central ``pulsar-client-admin`` 4.0.7) and the Go
``pulsaradmin`` library (v0.19.0, what ``pulsarctl`` is built on), unmodified, go through
tenant → namespace → partitioned topic → policies → lookup → delete, with bad input
refused on the way (``tests/clients/java/AdminCheck.java``, ``tests/clients/go/main.go``).
Never skipped: a missing toolchain or registry fails the test.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.clients.admin_clients import go_command, java_command
from tests.integration.compat.test_pulsar_compat import CompatSidecar


@pytest.fixture(scope="module")
def sidecar(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CompatSidecar]:
    shim = CompatSidecar(kafka_bootstrap, tmp_path_factory.mktemp("admin-clients"))
    try:
        shim.wait_ready()
        yield shim
    finally:
        shim.stop()


def _drive(sidecar: CompatSidecar, command: Callable[[], list[str]]) -> None:
    tenant = "t" + uuid.uuid4().hex[:10]
    result = subprocess.run(
        [*command(), sidecar.url, tenant],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    steps = [line for line in result.stdout.splitlines() if line.startswith(("ok ", "FAILED"))]
    assert result.returncode == 0 and result.stdout.rstrip().endswith("ALL OK"), (
        result.stdout[-4000:] + result.stderr[-4000:]
    )
    assert len(steps) >= 25, steps  # the whole script ran, not an early exit


@pytest.mark.timeout(1800)  # first run: Maven resolves the client jars
def test_java_admin_client(sidecar: CompatSidecar) -> None:
    _drive(sidecar, java_command)


@pytest.mark.timeout(1800)  # first run: the Go module proxy and a build
def test_go_pulsaradmin(sidecar: CompatSidecar) -> None:
    _drive(sidecar, go_command)


def test_client_sources_are_pinned() -> None:
    here = Path(__file__).resolve().parents[2] / "clients"
    assert "<pulsar.version>4.0.7</pulsar.version>" in (here / "java" / "pom.xml").read_text()
    assert "github.com/apache/pulsar-client-go v0.19.0" in (here / "go" / "go.mod").read_text()
