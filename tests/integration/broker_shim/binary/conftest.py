"""What the binary-protocol tests of this folder share: one sidecar with its ``pulsar://``
listener per test module, and a real ``pulsar-client`` on it per test (a module that needs
another sidecar or client defines its own fixture of the same name); the Java client's
classpath, resolved once per session."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pulsar
import pytest

from tests.clients.admin_clients import cache_lock
from tests.support.kafka import ROOT
from tests.support.sidecars import BinarySidecar


@pytest.fixture(scope="module")
def sidecar(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BinarySidecar]:
    with BinarySidecar(kafka_bootstrap, tmp_path_factory.mktemp("binary")) as s:
        yield s


@pytest.fixture(scope="module")
def message_sidecar(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BinarySidecar]:
    """A sidecar storing one Kafka record per message (``--entry-format message``), for
    the tests of that layout (the default stores a SEND as sent)."""
    with BinarySidecar(
        kafka_bootstrap, tmp_path_factory.mktemp("binary-message"), entry_format="message"
    ) as s:
        yield s


@pytest.fixture
def client(sidecar: BinarySidecar) -> Iterator[pulsar.Client]:
    c = pulsar.Client(sidecar.broker_url, operation_timeout_seconds=20)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> pulsar.CryptoKeyReader:
    """An RSA key pair made for the test, read by the client's ``CryptoKeyReader``."""
    folder = tmp_path_factory.mktemp("keys")
    private, public = folder / "private.pem", folder / "public.pem"
    subprocess.run(
        ["openssl", "genrsa", "-out", str(private), "2048"], check=True, capture_output=True
    )
    subprocess.run(
        ["openssl", "rsa", "-in", str(private), "-pubout", "-out", str(public)],
        check=True,
        capture_output=True,
    )
    return pulsar.CryptoKeyReader(str(public), str(private))


@pytest.fixture(scope="session")
def classpath(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The Java client's classpath (``tests/java/pom.xml``), resolved by Maven (cached in
    ~/.m2 after the first run), once for every module that runs a Java program."""
    out = tmp_path_factory.mktemp("java") / "classpath.txt"
    with cache_lock("java"):  # another worker may be filling ~/.m2
        subprocess.run(
            ["mvn", "-q", "-B", "-f", str(ROOT / "tests" / "java" / "pom.xml"),
             "dependency:build-classpath", f"-Dmdep.outputFile={out}"],
            check=True, timeout=500,
        )  # fmt: skip
    return out.read_text().strip()
