"""``https://`` on the sidecar's HTTP listener (Pulsar's ``webServicePortTls``), on Kafka:
the admin REST and HTTP lookups over HTTPS, the official ``pulsar-client`` given an
``https://`` service URL (HTTP lookup, then ``pulsar+ssl://``), WebSocket over ``wss://``,
and a real ``broker-shim run --http-port-tls`` process that checks client certificates
and stops cleanly. Certificates are made by the test (``tests/support/tls.py``)."""

from __future__ import annotations

import asyncio
import signal
import ssl
import urllib.error
import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from broker_shim._tls import TlsSettings
from sync import TopicName
from sync.cluster import ClusterSettings
from tests.integration.broker_shim.test_lookup_http import ShimProcess
from tests.support.http import HttpResult, http
from tests.support.kafka import free_port
from tests.support.sidecars import BinarySidecar
from tests.support.tls import TlsFiles, make_tls_files
from tests.support.ws import connect, produce, receive

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def sidecar(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory, files: TlsFiles
) -> Iterator[BinarySidecar]:
    """A sidecar of a cluster of its own (so it serves lookups and the admin REST) with
    ``pulsar+ssl://`` and ``https://`` beside its plain listeners."""
    tls = TlsSettings(files.cert, files.key)
    with BinarySidecar(
        kafka_bootstrap, tmp_path_factory.mktemp("https"), tls=tls, lookup=ClusterSettings()
    ) as s:
        yield s


def trusting(ca: Path, cert: TlsFiles | None = None) -> ssl.SSLContext:
    """A client's TLS context trusting ``ca`` (with ``cert``'s client certificate)."""
    ctx = ssl.create_default_context(cafile=str(ca))
    if cert is not None:
        ctx.load_cert_chain(cert.client_cert, cert.client_key)
    return ctx


def https(
    s: BinarySidecar, ctx: ssl.SSLContext, method: str, path: str, body: str | None = None
) -> HttpResult:
    assert s.https_url is not None
    return http(method, s.https_url + path, body, context=ctx)


def test_admin_rest_and_lookups_over_https(sidecar: BinarySidecar, files: TlsFiles) -> None:
    """Tenants, namespaces, topics and their policies are administered over HTTPS as over
    HTTP (one app behind both); a lookup answers the owner's ``httpUrlTls`` and
    ``brokerUrlTls`` beside the plain URLs, as Pulsar's LookupData."""
    ctx = trusting(files.ca)
    tenant = "hs" + uuid.uuid4().hex[:6]
    assert https(sidecar, ctx, "PUT", f"/admin/v2/tenants/{tenant}", "{}").status == 204
    assert https(sidecar, ctx, "PUT", f"/admin/v2/namespaces/{tenant}/ns").status == 204
    topic = f"/admin/v2/persistent/{tenant}/ns/t"
    assert https(sidecar, ctx, "PUT", topic).status == 204
    assert https(sidecar, ctx, "POST", topic + "/maxConsumers", "5").status == 204
    assert https(sidecar, ctx, "GET", topic + "/maxConsumers").json() == 5
    assert http("GET", sidecar.http_url + topic + "/maxConsumers").json() == 5  # one app
    listed = https(sidecar, ctx, "GET", f"/admin/v2/namespaces/{tenant}")
    assert (listed.status, listed.json()) == (200, [f"{tenant}/ns"])

    found = https(sidecar, ctx, "GET", f"/lookup/v2/topic/persistent/{tenant}/ns/t")
    assert found.status == 200, found.body
    body = found.json()
    assert body["httpUrl"] == sidecar.http_url
    assert body["httpUrlTls"] == sidecar.https_url
    assert body["brokerUrlTls"] == sidecar.broker_url_tls
    # the plain listener answers the same LookupData
    assert http("GET", f"{sidecar.http_url}/lookup/v2/topic/persistent/{tenant}/ns/t").json() == (
        body
    )
    assert https(sidecar, ctx, "GET", "/metrics").status == 200


def test_the_pulsar_client_looks_up_over_https(
    kafka_bootstrap: str, sidecar: BinarySidecar, files: TlsFiles
) -> None:
    """``pulsar.Client('https://…')`` looks topics up over HTTPS and is sent to the
    ``pulsar+ssl://`` listener (brokerUrlTls), where it produces and consumes."""
    assert sidecar.https_url is not None
    topic = f"persistent://public/default/https-{uuid.uuid4().hex[:8]}"
    client = pulsar.Client(
        sidecar.https_url,
        tls_trust_certs_file_path=str(files.ca),
        tls_validate_hostname=True,
        operation_timeout_seconds=30,
    )
    try:
        consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        client.create_producer(topic).send(b"looked up over https")
        got = consumer.receive(timeout_millis=30_000)
        assert got.data() == b"looked up over https"
        consumer.acknowledge(got)
    finally:
        client.close()


def test_websocket_over_wss(sidecar: BinarySidecar, files: TlsFiles) -> None:
    """Pulsar's WebSocket API over ``wss://``: a producer and a consumer of one topic."""
    assert sidecar.https_url is not None
    topic = TopicName.parse(f"persistent://public/default/wss-{uuid.uuid4().hex[:8]}")
    base = sidecar.https_url.replace("https://", "wss://", 1) + "/ws/v2"
    path = f"persistent/public/default/{topic.local_name}"
    ctx = trusting(files.ca)

    async def scenario() -> None:
        consumer_url = f"{base}/consumer/{path}/s?subscriptionInitialPosition=Earliest"
        async with (
            connect(consumer_url, ssl=ctx) as consumer,
            connect(f"{base}/producer/{path}", ssl=ctx) as producer,
        ):
            ids = await produce(producer, [b"one", b"two"])
            got = await receive(consumer, 2, timeout_s=30)
            assert [m["messageId"] for m in got] == ids

    asyncio.run(asyncio.wait_for(scenario(), 90))


def test_a_client_that_does_not_trust_the_certificate_fails_and_the_plain_port_serves(
    sidecar: BinarySidecar, files: TlsFiles, tmp_path: Path
) -> None:
    other = make_tls_files(tmp_path / "other")  # another CA: the sidecar's cert is unknown
    with pytest.raises(urllib.error.URLError) as refused:
        https(sidecar, trusting(other.ca), "GET", "/health")
    assert isinstance(refused.value.reason, ssl.SSLCertVerificationError)
    assert sidecar.https_url is not None
    client = pulsar.Client(
        sidecar.https_url, tls_trust_certs_file_path=str(other.ca), operation_timeout_seconds=5
    )
    try:
        with pytest.raises(pulsar.PulsarException):
            client.create_producer("persistent://public/default/untrusted")
    finally:
        client.close()
    assert http("GET", sidecar.http_url + "/health").status == 200
    assert https(sidecar, trusting(files.ca), "GET", "/health").status == 200


def test_broker_shim_run_serves_https_checks_client_certificates_and_stops_cleanly(
    kafka_bootstrap: str, files: TlsFiles, tmp_path: Path
) -> None:
    """``broker-shim run --http-port-tls`` with ``--tls-require-trusted-client-cert``: a
    client without a trusted certificate gets no answer over HTTPS, one with it is served
    and looked up to the process's TLS URLs; plain HTTP serves as before; SIGTERM stops
    both listeners cleanly."""
    https_port, tls_port = free_port(), free_port()
    shim = ShimProcess(
        kafka_bootstrap, "hs" + uuid.uuid4().hex[:6], "b0", tmp_path,
        session_timeout_ms=2000, slots=4,
        extra=(
            "--http-port-tls", str(https_port), "--broker-port-tls", str(tls_port),
            "--tls-cert-file", str(files.cert), "--tls-key-file", str(files.key),
            "--tls-trust-cert-file", str(files.ca), "--tls-require-trusted-client-cert",
            "--log-level", "info",
        ),
    ).start()  # fmt: skip
    url = f"https://127.0.0.1:{https_port}"
    lookup = "/lookup/v2/topic/persistent/public/default/t"
    try:
        shim.wait_ready(120)
        found = http("GET", url + lookup, context=trusting(files.ca, files))
        assert found.status == 200, found.body
        assert found.json()["httpUrlTls"] == url
        assert found.json()["brokerUrlTls"] == f"pulsar+ssl://127.0.0.1:{tls_port}"
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            http("GET", url + lookup, context=trusting(files.ca))  # no client certificate
        assert shim.get(lookup).status == 200
        client = pulsar.Client(
            url,
            tls_trust_certs_file_path=str(files.ca),
            authentication=pulsar.AuthenticationTLS(str(files.client_cert), str(files.client_key)),
            operation_timeout_seconds=30,
        )
        try:
            client.create_producer("persistent://public/default/by-cert").send(b"x")
        finally:
            client.close()
        shim.signal(signal.SIGTERM)
        assert shim.proc is not None
        code = shim.proc.wait(60)
    finally:
        shim.stop()
    log = shim.log.read_text(errors="replace")
    assert code == 0, log[-4000:]
    assert "stopped cleanly in" in log, log[-4000:]
    assert url in log  # it said where it listens
