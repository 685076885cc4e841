"""What the binary-protocol tests of this folder share: one sidecar with its ``pulsar://``
listener per test module, and a real ``pulsar-client`` on it per test (a module that needs
another sidecar or client defines its own fixture of the same name)."""

from __future__ import annotations

from collections.abc import Iterator

import pulsar
import pytest

from tests.support.sidecars import BinarySidecar


@pytest.fixture(scope="module")
def sidecar(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BinarySidecar]:
    with BinarySidecar(kafka_bootstrap, tmp_path_factory.mktemp("binary")) as s:
        yield s


@pytest.fixture
def client(sidecar: BinarySidecar) -> Iterator[pulsar.Client]:
    c = pulsar.Client(sidecar.broker_url, operation_timeout_seconds=20)
    try:
        yield c
    finally:
        c.close()
