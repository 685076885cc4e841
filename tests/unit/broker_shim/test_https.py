"""HTTPS on the sidecar's HTTP listener (Pulsar's ``webServicePortTls``) over loopback: the
whole app (in-memory twin) on a plain and a TLS site, certificates made by the test.

The same is exercised on real Kafka, with a real ``broker-shim run`` process, in
``tests/integration/broker_shim/test_https.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import ssl
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from unittest import mock

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from broker_shim._http import build_app
from broker_shim._http_shell import HTTPS_URL_OF, owner_base_url
from broker_shim._serve import start_sites
from broker_shim._sidecar import Sidecar
from broker_shim._tls import TlsSettings
from sync.cluster import AuthConfig, LookupConfig, TenantRoles
from sync.errors import InvalidInputError
from tests.support.kafka import ROOT, free_port
from tests.support.sidecars import memory_sidecar
from tests.support.tls import TlsFiles, make_tls_files
from tests.support.waits import eventually

pytestmark = pytest.mark.timeout(60)

LOOKUP = "/lookup/v2/topic/persistent/public/default/t"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"))


def client_context(files: TlsFiles, *, trusted: bool = True, cert: bool = False) -> ssl.SSLContext:
    """A client's TLS context: trusting the test CA (or only the system's), with the
    client certificate or without."""
    ctx = ssl.create_default_context(cafile=str(files.ca) if trusted else None)
    if cert:
        ctx.load_cert_chain(files.client_cert, files.client_key)
    return ctx


class Served:
    """A sidecar app served on a plain and an HTTPS site."""

    def __init__(self, sidecar: Sidecar) -> None:
        self.sidecar = sidecar
        config = sidecar.config
        assert config.http_port_tls is not None
        self.http_url = f"http://127.0.0.1:{config.http_port}"
        self.https_url = f"https://127.0.0.1:{config.http_port_tls}"

    async def get(
        self, url: str, ctx: ssl.SSLContext | None = None, **headers: str
    ) -> tuple[int, Any]:
        async with (
            aiohttp.ClientSession() as session,
            session.get(url, ssl=ctx if ctx is not None else True, headers=headers) as resp,
        ):
            body = await resp.json() if resp.content_type == "application/json" else None
            return resp.status, body


@contextlib.asynccontextmanager
async def serving(
    files: TlsFiles, settings: TlsSettings, *, auth: AuthConfig | None = None
) -> AsyncIterator[Served]:
    """The whole sidecar app on ``http://`` and ``https://`` (``settings``), ready."""
    sidecar = memory_sidecar(
        LookupConfig(lookup_timeout_s=5.0, request_retry_s=0.5),
        "https",
        http_port=free_port(),
        http_port_tls=free_port(),
        tls=settings,
        auth=auth,
    )
    config = sidecar.config
    runner = web.AppRunner(build_app(sidecar, freeze_heap=False))
    await runner.setup()
    try:
        await start_sites(
            runner,
            host="127.0.0.1",
            port=config.http_port,
            tls=settings.server_context(),
            tls_port=config.http_port_tls,
        )
        served = Served(sidecar)
        trusted = client_context(files, cert=settings.require_client_cert)

        async def ready() -> bool:
            return (await served.get(served.https_url + "/health", trusted))[0] == 200

        await eventually(ready, "the sidecar is healthy over https", 20)
        yield served
    finally:
        await runner.cleanup()


def test_https_serves_the_same_app_and_lookups_answer_its_url(files: TlsFiles) -> None:
    """A client trusting the CA is served the admin REST, lookups and metrics over
    ``https://``; a lookup answers ``httpUrlTls`` (Pulsar's LookupData) with this
    sidecar's HTTPS URL beside ``httpUrl``. A client that does not trust the certificate
    fails the handshake, and both listeners go on serving."""

    async def scenario() -> None:
        async with serving(files, TlsSettings(files.cert, files.key)) as s:
            trusted = client_context(files)
            status, body = await s.get(s.https_url + LOOKUP, trusted)
            assert status == 200, body
            assert body["httpUrlTls"] == s.https_url
            assert body["httpUrl"] == s.http_url
            assert "brokerUrlTls" not in body  # no pulsar+ssl:// listener configured
            status, body = await s.get(s.https_url + "/admin/v2/namespaces/public", trusted)
            assert (status, body) == (200, ["public/default"])
            assert (await s.get(s.https_url + "/metrics", trusted))[0] == 200
            # the plain listener answers the same lookup
            assert (await s.get(s.http_url + LOOKUP))[1]["httpUrlTls"] == s.https_url
            with pytest.raises(aiohttp.ClientConnectorCertificateError):
                await s.get(s.https_url + LOOKUP, client_context(files, trusted=False))
            with pytest.raises(aiohttp.ClientError):  # plain HTTP on the TLS port
                await s.get(s.https_url.replace("https", "http") + LOOKUP)
            assert (await s.get(s.https_url + LOOKUP, trusted))[0] == 200
            assert (await s.get(s.http_url + LOOKUP))[0] == 200

    asyncio.run(scenario())


def test_a_required_client_certificate_is_checked_on_https(files: TlsFiles, tmp_path: Path) -> None:
    """``--tls-require-trusted-client-cert`` applies to HTTPS as to ``pulsar+ssl://``
    (Pulsar's ``tlsRequireTrustedClientCertOnConnect``): no certificate, no answer; a
    certificate the CA signed is served. Plain HTTP is not affected."""
    settings = TlsSettings(files.cert, files.key, files.ca, require_client_cert=True)

    async def scenario() -> None:
        async with serving(files, settings) as s:
            # TLS 1.3: the client learns of the refusal at its first read.
            with pytest.raises(aiohttp.ClientError):
                await s.get(s.https_url + LOOKUP, client_context(files))
            other = make_tls_files(tmp_path / "other")
            stranger = client_context(files)
            stranger.load_cert_chain(other.client_cert, other.client_key)  # another CA's
            with pytest.raises(aiohttp.ClientError):
                await s.get(s.https_url + LOOKUP, stranger)
            assert (await s.get(s.https_url + LOOKUP, client_context(files, cert=True)))[0] == 200
            assert (await s.get(s.http_url + LOOKUP))[0] == 200

    asyncio.run(scenario())


def test_a_client_certificate_is_a_role_over_https(files: TlsFiles) -> None:
    """With the ``tls`` provider, an HTTPS request without credentials but with a verified
    client certificate is its common name's role (Pulsar's ``AuthenticationProviderTls``
    on the web service); a token still wins when one is sent."""
    auth = AuthConfig(
        tokens={"t-admin": "admin", "t-other": "other"},
        super_user_roles=frozenset({"admin"}),
        tenants={"public": TenantRoles(lookup_roles=frozenset({"client"}))},
        providers=frozenset({"token", "tls"}),
    )
    settings = TlsSettings(files.cert, files.key, files.ca)

    async def scenario() -> None:
        async with serving(files, settings, auth=auth) as s:
            with_cert = client_context(files, cert=True)
            assert (await s.get(s.https_url + LOOKUP, with_cert))[0] == 200
            assert (await s.get(s.https_url + LOOKUP, client_context(files)))[0] == 401
            assert (await s.get(s.http_url + LOOKUP))[0] == 401
            other = {"Authorization": "Bearer t-other"}
            assert (await s.get(s.https_url + LOOKUP, with_cert, **other))[0] == 403
            brokers = "/admin/v2/brokers/" + s.sidecar.config.cluster
            assert (await s.get(s.https_url + brokers, with_cert))[0] == 403  # not a super-user

    asyncio.run(scenario())


def test_a_request_over_https_is_redirected_to_the_owners_https_url() -> None:
    """Pulsar redirects with ``isRequestHttps() ? webServiceUrlTls : webServiceUrl``: never
    from HTTPS down to plain HTTP (412 when the owner serves no HTTPS)."""
    app = web.Application()
    urls: dict[str, str | None] = {"http://h1:8080": "https://h1:8443", "http://h2:8080": None}
    https_url_of: Callable[[str], str | None] = urls.get
    app[HTTPS_URL_OF] = https_url_of

    def request(secure: bool) -> web.Request:
        ctx = ssl.create_default_context() if secure else None
        return make_mocked_request("GET", "/x", app=app, sslcontext=ctx)

    assert owner_base_url(request(False), "http://h1:8080") == "http://h1:8080"
    assert owner_base_url(request(True), "http://h1:8080") == "https://h1:8443"
    with pytest.raises(InvalidInputError, match="service url is not configured"):
        owner_base_url(request(True), "http://h2:8080")
    with pytest.raises(InvalidInputError):
        owner_base_url(request(True), "http://unknown:8080")
    plain = web.Application()  # no cluster: nothing known about other sidecars
    assert owner_base_url(make_mocked_request("GET", "/x", app=plain), "http://h:1") == "http://h:1"
    with pytest.raises(InvalidInputError):
        owner_base_url(
            make_mocked_request("GET", "/x", app=plain, sslcontext=mock.Mock()), "http://h:1"
        )


#: A child process serving a small app as ``broker-shim run`` serves the sidecar's: its
#: steps print when they run; ``/slow`` answers after a while.
_CHILD = textwrap.dedent(
    """
    import asyncio, logging, socket, sys
    from aiohttp import web
    from broker_shim._serve import run
    from broker_shim._shutdown import ShutdownGuard
    from broker_shim._tls import TlsSettings

    port, cert, key = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(message)s")

    def say(what):
        print(what, flush=True)

    async def slow(_request):
        say("slow started")
        await asyncio.sleep(1.0)
        return web.Response(text="slow done")

    async def fast(_request):
        return web.Response(text="ok")

    def step(name):
        async def run_step(_app):
            say(name)
        return run_step

    app = web.Application()
    app.router.add_get("/slow", slow)
    app.router.add_get("/ok", fast)
    app.on_startup.append(step("startup"))
    app.on_shutdown.append(step("shutdown"))
    app.on_cleanup.append(step("cleanup"))
    ShutdownGuard(5.0).install(app)
    tls_sock = socket.create_server(("127.0.0.1", 0))
    say(f"tls-port {tls_sock.getsockname()[1]}")
    run(
        app,
        host="127.0.0.1",
        port=port,
        tls=TlsSettings(cert, key).server_context(),
        tls_sock=tls_sock,
        shutdown_timeout=5.0,
        access_log=None,
    )
    say("exited")
    """
)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_both_listeners_stop_gracefully_on_a_signal(files: TlsFiles, sig: int) -> None:
    """The graceful stop of ``web.run_app``, kept with two listeners: on SIGTERM or
    SIGINT both stop accepting, a request in flight is answered, then on_shutdown and
    on_cleanup run in order, the guard is disarmed, and the process exits 0."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(port), str(files.cert), str(files.key)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("tls-port "), first
        tls_port = int(first.split()[1])

        async def clients() -> str:
            ctx = client_context(files)
            async with aiohttp.ClientSession() as session:

                async def up() -> bool:
                    try:
                        async with session.get(f"http://127.0.0.1:{port}/ok") as r:
                            return r.status == 200
                    except aiohttp.ClientError:
                        return False

                await eventually(up, "the child serves", 20)
                async with session.get(f"https://127.0.0.1:{tls_port}/ok", ssl=ctx) as r:
                    assert (r.status, await r.text()) == (200, "ok")
                slow = asyncio.ensure_future(
                    session.get(f"https://127.0.0.1:{tls_port}/slow", ssl=ctx)
                )
                await asyncio.sleep(0.3)  # the request has started
                proc.send_signal(sig)
                async with await slow as r:
                    return f"{r.status} {await r.text()}"

        assert asyncio.run(clients()) == "200 slow done"
        proc.wait(timeout=30)
        # Not communicate(): with a timeout it reads the pipe's descriptor directly, and
        # loses what readline() above had already buffered (the "startup" line, at times).
        out = proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out
    lines = [line for line in out.splitlines() if line in ("startup", "shutdown", "cleanup")]
    assert lines == ["startup", "shutdown", "cleanup"], out
    assert "stopped cleanly in" in out, out  # the guard was disarmed
    assert out.rstrip().endswith("exited"), out
