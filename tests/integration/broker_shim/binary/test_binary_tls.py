"""``pulsar+ssl://`` with the official ``pulsar-client``: a sidecar serving TLS beside its
plain listener (certificates made by the test), on Kafka."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from broker_shim._tls import TlsSettings
from tests.support.kafka import make_topic
from tests.support.sidecars import BinarySidecar
from tests.support.tls import TlsFiles, make_tls_files

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def sidecar(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory, files: TlsFiles
) -> Iterator[BinarySidecar]:
    tls = TlsSettings(files.cert, files.key)
    with BinarySidecar(kafka_bootstrap, tmp_path_factory.mktemp("binary-tls"), tls=tls) as s:
        yield s


def test_a_tls_client_produces_and_consumes(
    kafka_bootstrap: str, sidecar: BinarySidecar, files: TlsFiles
) -> None:
    assert sidecar.broker_url_tls is not None
    topic = str(make_topic(kafka_bootstrap, 1))
    client = pulsar.Client(
        sidecar.broker_url_tls,
        tls_trust_certs_file_path=str(files.ca),
        tls_validate_hostname=True,
        operation_timeout_seconds=30,
    )
    try:
        consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic)
        sent = producer.send(b"over tls")
        got = consumer.receive(timeout_millis=30_000)
        assert (got.data(), got.message_id().entry_id()) == (b"over tls", sent.entry_id())
        consumer.acknowledge(got)
    finally:
        client.close()
    # the plain listener serves as before
    plain = pulsar.Client(sidecar.broker_url, operation_timeout_seconds=30)
    try:
        plain.create_producer(topic).send(b"plain")
    finally:
        plain.close()


def test_a_client_that_does_not_trust_the_certificate_is_not_served(
    kafka_bootstrap: str, sidecar: BinarySidecar, tmp_path: Path
) -> None:
    assert sidecar.broker_url_tls is not None
    other = make_tls_files(tmp_path / "other")  # another CA: the sidecar's cert is unknown
    client = pulsar.Client(
        sidecar.broker_url_tls,
        tls_trust_certs_file_path=str(other.ca),
        operation_timeout_seconds=5,
    )
    try:
        with pytest.raises(pulsar.PulsarException):
            client.create_producer(str(make_topic(kafka_bootstrap, 1)), send_timeout_millis=2000)
    finally:
        client.close()
