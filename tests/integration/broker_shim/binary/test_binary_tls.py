"""``pulsar+ssl://`` with the official ``pulsar-client``: a sidecar serving TLS beside its
plain listener (certificates made by the test), on Kafka."""

from __future__ import annotations

import json
import uuid
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


def test_a_client_certificate_authenticates_its_common_name(
    kafka_bootstrap: str, files: TlsFiles, tmp_path: Path
) -> None:
    """``authenticationProviders: ["token", "tls"]``: a client's certificate (CN=client)
    is its role, as Pulsar's AuthenticationProviderTls; lookups send TLS clients to the
    owner's ``pulsar+ssl://`` URL; a TLS client without a certificate is refused."""
    from tests.integration.broker_shim.binary.test_binary_cluster import AuthBinaryShim
    from tests.integration.broker_shim.test_lookup_auth import TOKENS, call
    from tests.support.kafka import free_port

    tenant = "tls" + uuid.uuid4().hex[:6]
    config = tmp_path / "auth.json"
    config.write_text(
        json.dumps(
            {
                "tokens": TOKENS,
                "authenticationProviders": ["token", "tls"],
                "superUserRoles": ["admin"],
                "tenants": {tenant: {"lookupRoles": ["client"]}},
            }
        )
    )
    tls_port = free_port()
    shim = AuthBinaryShim(
        kafka_bootstrap, "tl" + uuid.uuid4().hex[:6], "b0", tmp_path,
        extra=(
            "--auth-config", str(config), "--broker-port-tls", str(tls_port),
            "--tls-cert-file", str(files.cert), "--tls-key-file", str(files.key),
            "--tls-trust-cert-file", str(files.ca),
        ),
    )  # fmt: skip
    shim.start()
    try:
        shim.wait_ready()
        assert call(shim, "PUT", f"/admin/v2/tenants/{tenant}", "t-admin", "{}").status == 204
        assert call(shim, "PUT", f"/admin/v2/namespaces/{tenant}/ns", "t-admin").status == 204
        grant = f"/admin/v2/namespaces/{tenant}/ns/permissions/client"
        assert call(shim, "POST", grant, "t-admin", '["produce", "consume"]').status == 204
        topic = f"persistent://{tenant}/ns/t-{uuid.uuid4().hex[:6]}"
        url = f"pulsar+ssl://127.0.0.1:{tls_port}"
        anonymous = pulsar.Client(
            url, tls_trust_certs_file_path=str(files.ca), operation_timeout_seconds=10
        )
        with pytest.raises(pulsar.PulsarException):
            anonymous.create_producer(topic, send_timeout_millis=2000)
        anonymous.close()
        client = pulsar.Client(
            url,
            tls_trust_certs_file_path=str(files.ca),
            authentication=pulsar.AuthenticationTLS(str(files.client_cert), str(files.client_key)),
            operation_timeout_seconds=30,
        )
        try:
            consumer = client.subscribe(
                topic, "s", initial_position=pulsar.InitialPosition.Earliest
            )
            client.create_producer(topic).send(b"by certificate")
            assert consumer.receive(timeout_millis=30_000).data() == b"by certificate"
        finally:
            client.close()
    finally:
        shim.stop()
