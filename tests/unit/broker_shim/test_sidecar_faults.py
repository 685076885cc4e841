"""Issue 11 on the in-memory twin: malformed input is a 4xx with a reason, 503s say when to
retry, and /health follows the supervised cluster service (the same behaviour is checked
on real Kafka in tests/integration/broker_shim/test_faults.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient

from broker_shim._http import SIDECAR_KEY
from broker_shim._live_cluster import LiveCluster
from broker_shim._sidecar import Sidecar
from sync.cluster import ClusterService, LookupConfig, OwnershipConfig
from sync.transport import MemoryTransport
from tests.support.apps import app_client
from tests.support.sidecars import memory_sidecar
from tests.support.waits import eventually
from tests.unit.sync.cluster.test_pause_watch import pause

Scenario = Callable[[TestClient[Any, Any], web.Application], Awaitable[None]]


def _break(service: ClusterService) -> None:
    """Make the ownership member's next loop step fail as an unexpected error would."""

    def step() -> None:
        raise RuntimeError("injected fault")

    service.member._step = step  # type: ignore[method-assign]  # noqa: SLF001


def _sidecar() -> Sidecar:
    return memory_sidecar(LookupConfig(lookup_timeout_s=5.0, request_retry_s=0.5), "f")


async def _until_health(client: TestClient[Any, Any], status: int, limit_s: float = 60) -> Any:
    """Poll /health until it answers ``status`` (a liveness deadline, not a timing check)."""
    seen: list[Any] = []

    async def reached() -> bool:
        resp = await client.get("/health")
        seen[:] = [await resp.json()]
        return bool(resp.status == status)

    await eventually(
        reached, lambda: f"/health {status}: {seen[0]}", timeout_s=limit_s, interval_s=0.05
    )
    return seen[0]


def _cluster(app: web.Application) -> LiveCluster:
    """The live cluster service of the sidecar ``app`` serves."""
    cluster = app[SIDECAR_KEY].cluster
    assert cluster is not None
    return cluster


def _serve(scenario: Scenario, sidecar: Sidecar | None = None) -> None:
    sidecar = sidecar or _sidecar()

    async def main() -> None:
        async with app_client(sidecar, healthy=False) as client:
            await _until_health(client, 200)
            assert client.app is not None
            await scenario(client, client.app)

    asyncio.run(main())


POLICY = "/admin/v2/persistent/public/default/orders/maxConsumers"


async def _create_topic(client: TestClient[Any, Any], encoded_name: str) -> None:
    resp = await client.put(f"/admin/v2/persistent/public/default/{encoded_name}")
    assert resp.status in (204, 409), await resp.text()


NAMESPACE = "/admin/v2/namespaces/public/fresh"


def test_malformed_bodies_get_4xx_with_a_reason_never_500() -> None:
    cases: list[tuple[str, str, bytes, str]] = [
        ("POST", POLICY, b"[" * 100_000 + b"]" * 100_000, "application/json"),
        ("POST", POLICY, b'{"a": "\xff\xfe"}', "application/json"),
        ("POST", POLICY, bytes(range(256)) * 4, "application/octet-stream"),
        ("POST", POLICY, b"5", "application/json; charset=bogus-charset"),
        ("POST", POLICY, b"{not json", "application/json"),
        ("PUT", NAMESPACE, b"[" * 100_000, "application/json"),
        ("PUT", NAMESPACE, b"\xc3\x28", "application/json"),
        ("PUT", NAMESPACE, b"{}", "application/json; charset=x-no-such"),
        ("PUT", "/registry/v1/kv/ns/key", b"\xff\xff", "text/plain"),
    ]

    async def scenario(client: TestClient[Any, Any], app: web.Application) -> None:
        created = await client.put("/admin/v2/persistent/public/default/orders")
        assert created.status == 204, await created.text()
        before = await client.get(POLICY)
        assert before.status == 200 and await before.read() == b""  # unset, as Pulsar
        for method, path, body, content_type in cases:
            resp = await client.request(
                method, path, data=body, headers={"Content-Type": content_type}
            )
            text = await resp.text()
            assert 400 <= resp.status < 500, (method, path, content_type, resp.status, text)
            reason = (await resp.json())["reason"]
            assert reason, (method, path)
        # Nothing was written by any of them.
        resp = await client.get(POLICY)
        assert resp.status == 200 and await resp.read() == b""

    _serve(scenario)


def test_bodies_pulsar_does_not_read_are_415_before_the_handler_runs() -> None:
    """As Pulsar 4.0.7 answers (issue 11, chaos run 13): a form, octet-stream or XML body,
    or a body without Content-Type, is 415 on the admin routes before anything looks the
    topic up (that lookup may need Kafka, which answered 503 during a broker outage).
    JSON, ``+json`` and text bodies are read; the registry's own KV takes any text."""
    unknown = "/admin/v2/persistent/public/default/never-created/maxConsumers"

    async def scenario(client: TestClient[Any, Any], app: web.Application) -> None:
        created = await client.put("/admin/v2/persistent/public/default/orders")
        assert created.status == 204, await created.text()
        for path in (POLICY, unknown):
            for ctype in ("application/x-www-form-urlencoded", "application/octet-stream",
                          "application/xml", "multipart/form-data; boundary=x", None):  # fmt: skip
                headers = {} if ctype is None else {"Content-Type": ctype}
                resp = await client.post(path, data=b"5", headers=headers,
                                         skip_auto_headers=["Content-Type"])  # fmt: skip
                assert resp.status == 415, (path, ctype, resp.status, await resp.text())
                assert (await resp.json())["reason"]
        resp = await client.get(POLICY)
        assert resp.status == 200 and await resp.read() == b""  # nothing was written
        for ctype, value in (("application/json", 5), ("text/plain", 6),
                             ("application/vnd.api+json", 7), ("*/*", 8)):  # fmt: skip
            resp = await client.post(POLICY, data=str(value).encode(),
                                     headers={"Content-Type": ctype})  # fmt: skip
            assert resp.status == 204, (ctype, resp.status, await resp.text())
            assert (await (await client.get(POLICY)).text()) == str(value)
        json_type = {"Content-Type": "application/json"}
        assert (await client.post(unknown, data=b"5", headers=json_type)).status == 404
        kv = await client.put(
            "/registry/v1/kv/ns/key", data=b"v", skip_auto_headers=["Content-Type"]
        )
        assert kv.status == 204, await kv.text()

    _serve(scenario)


def test_health_follows_the_service_the_supervisor_started() -> None:
    # issue 11: after the supervisor replaced a failed cluster service, /health kept
    # reading the first (closed) one and said {"state": "READY", "lookup": "CLOSED"}.
    async def scenario(client: TestClient[Any, Any], app: web.Application) -> None:
        current = _cluster(app)
        first = current.service
        _break(first)
        body = await _until_health(client, 503)
        assert body["ownership"] == "FAILED" or body["lookup"] != "READY"
        body = await _until_health(client, 200)
        assert current.service is not first and current.restarts == 1
        assert {k: body[k] for k in ("state", "brokerId", "lookup", "ownership")} == {
            "state": "READY",
            "brokerId": "b0",
            "lookup": "READY",
            "ownership": "ACTIVE",
        }

    _serve(scenario)


def test_unavailable_answers_carry_retry_after() -> None:
    async def scenario(client: TestClient[Any, Any], app: web.Application) -> None:
        current = _cluster(app)
        _break(current.service)
        while (health := await client.get("/health")).status == 200:
            await asyncio.sleep(0.02)
        assert health.status == 503
        assert health.headers["Retry-After"] == "1"
        # The supervisor waits 2 s before it starts the next incarnation: still failed.
        resp = await client.get("/lookup/v2/topic/persistent/public/default/orders")
        assert resp.status == 503
        assert resp.headers["Retry-After"] == "1"
        assert (await resp.json())["reason"]

    _serve(scenario)


def test_ownership_transactions_time_out_with_the_liveness_timeout() -> None:
    # issue 11: a dead owner's open transaction held its slots 7x the liveness timeout.
    assert OwnershipConfig(session_timeout_ms=6_000).effective_transaction_timeout_ms == 3_000
    assert OwnershipConfig(session_timeout_ms=2_000).effective_transaction_timeout_ms == 1_000
    # librdkafka refuses transaction.timeout.ms below 1000.
    assert OwnershipConfig(session_timeout_ms=1_000).effective_transaction_timeout_ms == 1_000
    pinned = OwnershipConfig(session_timeout_ms=6_000, transaction_timeout_ms=9_000)
    assert pinned.effective_transaction_timeout_ms == 9_000


def test_one_topic_name_one_key_on_every_route() -> None:
    # issue 11: "%FF" was stored literally while "%25" was decoded, so two URLs could
    # address one key; "." and "%00" were accepted as names.
    base = "/admin/v2/persistent/public/default"

    async def scenario(client: TestClient[Any, Any], app: web.Application) -> None:
        await _create_topic(client, "100%25")
        resp = await client.post(f"{base}/100%25/maxConsumers", data="7")
        assert resp.status == 204, await resp.text()
        # The same name spelled with an encoded "1": the same key.
        resp = await client.get(f"{base}/%3100%25/maxConsumers")
        assert resp.status == 200 and await resp.json() == 7
        for bad in ("x%FF", "%FF%FE", "a%00b", "a%1Fb"):
            for method in ("GET", "POST"):
                resp = await client.request(method, f"{base}/{bad}/maxConsumers", data="1")
                assert resp.status == 412, (method, bad, resp.status)
                assert (await resp.json())["reason"]
            resp = await client.get(f"/lookup/v2/topic/persistent/public/default/{bad}")
            assert resp.status == 412, (bad, resp.status)
        # Dot segments are normalized away by HTTP clients (as before Pulsar's Jetty): the
        # path no longer names a topic; whatever arrives is refused, never stored.
        for bad in ("%2E", "%2E%2E", ".", ".."):
            resp = await client.post(f"{base}/{bad}/maxConsumers", data="1")
            assert 400 <= resp.status < 500, (bad, resp.status)
        # A raw client (no normalization) sending dot tenant/namespace segments gets
        # Pulsar's 404 without the sidecar asking Kafka (chaos run 4: a 500 when it did).
        host, port = client.server.host, client.server.port
        for seg in (".", ".."):
            reader, writer = await asyncio.open_connection(host, port)
            path = f"/admin/v2/persistent/{seg}/{seg}/t/maxConsumers"
            writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
            answer = await reader.read()
            writer.close()
            assert answer.split()[1] == b"404", (seg, answer[:200])
            assert b"Namespace does not exist" in answer, answer[-200:]  # Pulsar's reason

    _serve(scenario)


def test_a_write_kafka_did_not_take_in_time_is_503_not_500() -> None:
    """The fenced writer's give-up (brokers down, no transaction coordinator) is a
    retryable unavailability: 503 with Retry-After, never 500 (issue 11's chaos soak)."""
    from broker_shim._http_errors import http_status
    from sync import FenceConfig, FencedWriter
    from sync.errors import KafkaUnavailableError, TransportError
    from sync.table._fenced_writer import Ticket

    config = FenceConfig("tid", "topic", name="policy", timeout_s=1.0)
    writer: FencedWriter[Any] = FencedWriter(MemoryTransport(), Any, config, lambda _k: None)  # type: ignore[arg-type]
    ticket: Ticket[Any] = Ticket(lambda _d: None, time.monotonic(), Any, None)  # type: ignore[arg-type]
    ticket.attempts = 2
    ticket.last_error = TransportError("init_transactions failed: KafkaError{code=_TRANSPORT}")
    err = writer._give_up(ticket)
    assert isinstance(err, KafkaUnavailableError) and isinstance(err, TransportError)
    assert http_status(err) == 503
    assert "is Kafka reachable?" in str(err)


def test_a_cache_not_ready_or_behind_a_write_is_503() -> None:
    from broker_shim._http_errors import http_status
    from sync.errors import BootstrapTimeout, CacheStateError, StateTransitionError

    # read-your-writes not reached in time: the write is in Kafka, retrying is safe
    assert http_status(BootstrapTimeout("policy cache did not reach {0: 3} within 30.0s")) == 503
    assert http_status(CacheStateError("policy cache is BOOTSTRAPPING, not READY")) == 503
    assert http_status(StateTransitionError("CLOSED -> READY")) == 500  # a bug stays a 500


def test_kafka_refusing_or_not_answering_is_503_on_rest_and_websocket() -> None:
    """A Kafka error under a request (no coordinator for a subscription's group, a broker
    handle destroyed while reading watermarks) is transient: 503 + Retry-After on REST and
    WebSocket upgrades, never 500 (issue 11's chaos soak, run 4)."""
    from broker_shim._http_errors import handshake_refusal, http_status
    from sync.errors import TransportError

    not_coordinator = TransportError(
        "read committed offsets of group 'policy-sync.sub/p.public.default.t/sub' failed: "
        "KafkaError{code=NOT_COORDINATOR,val=16}"
    )
    assert http_status(not_coordinator) == 503
    refused = handshake_refusal(not_coordinator, "Failed to subscribe")
    assert refused.status == 503 and refused.headers.get("Retry-After")


def test_a_paused_sidecar_is_503_until_its_view_caught_up() -> None:
    # issue 11 (chaos run 5): thawed after a SIGSTOP, a sidecar answered /health 200 and
    # named owners from the view it had before the pause.
    async def scenario(client: TestClient[Any, Any], app: web.Application) -> None:
        service = _cluster(app).service
        watch = service.pause_watch
        release = pause(watch)  # as if the process had not run for 30 s
        resp = await client.get("/health")
        assert resp.status == 503
        assert (await resp.json())["view"] == "STALE"
        lookup = await client.get("/lookup/v2/topic/persistent/public/default/orders")
        assert lookup.status == 503
        assert "paused" in (await lookup.json())["reason"]
        release.set()
        body = await _until_health(client, 200)
        assert body["view"] == "FRESH" and service.pause_watch.pauses == 1

    _serve(scenario)


LONG = "x" * 3000  # no Kafka topic can be named after it (249 characters at most)
#: (method, path, body): each malformed in its name, body or parameters, and each refused
#: by Pulsar (or by us, for names Kafka cannot hold) without looking anything up.
MALFORMED_WHILE_KAFKA_IS_DOWN: list[tuple[str, str, bytes | None]] = [
    ("GET", f"/admin/v2/persistent/{LONG}/{LONG}/t/maxConsumers", None),
    ("GET", f"/admin/v2/persistent/public/default/{LONG}/maxConsumers", None),
    ("DELETE", f"/admin/v2/persistent/public/default/{LONG}/maxConsumers", None),
    ("POST", f"/admin/v2/persistent/public/default/{LONG}/maxConsumers", b"5"),
    ("GET", "/admin/v2/persistent/public/default/%FF/maxConsumers", None),
    ("GET", "/admin/v2/persistent/public/default/t-partition-1/maxConsumers", None),
    ("GET", "/admin/v2/persistent/public/default/never-created/bogusPolicy", None),
    ("POST", "/admin/v2/persistent/public/default/never-created/maxConsumers", b"-5"),
    ("POST", "/admin/v2/persistent/public/default/never-created/maxConsumers", b'"x"'),
    ("POST", "/admin/v2/persistent/public/default/never-created/messageTTL", b"[]"),
    ("POST", "/admin/v2/persistent/public/default/never-created/retention", b"{"),
    ("POST", "/admin/v2/namespaces/public/never-made/messageTTL", b"-7"),
    ("POST", "/admin/v2/namespaces/public/never-made/messageTTL", b"{}"),
    ("POST", "/admin/v2/namespaces/public/never-made/bogusPolicy", b"1"),
    ("PUT", "/admin/v2/namespaces/public/%FF", None),
    ("PUT", "/admin/v2/persistent/public/default/%00", None),
    ("PUT", f"/admin/v2/persistent/public/default/{LONG}", None),
    ("PUT", "/admin/v2/persistent/public/default/p/partitions", b"0"),
    ("PUT", "/admin/v2/persistent/public/default/p/partitions", b'"x"'),
    ("POST", "/admin/v2/persistent/public/default/p/partitions", b'"x"'),
    ("GET", "/lookup/v2/topic/persistent/public/default/%FF", None),
    ("GET", f"/lookup/v2/topic/persistent/public/default/{LONG}", None),
    ("GET", "/lookup/v2/topic/bogus/public/default/t", None),
]


def test_malformed_requests_are_refused_before_any_kafka_io() -> None:
    """Kafka down (every call of the in-memory broker raises): malformed names, bodies and
    parameters still get their 4xx, so the check came before any Kafka I/O (a fresh-clone
    `make test` on a busy machine answered 503 to a 3000-character tenant: the handler
    read the registry's watermarks before it refused the name)."""

    sidecar = _sidecar()
    broker = sidecar.transport.broker  # type: ignore[attr-defined]

    async def scenario(client: TestClient[Any, Any], app: web.Application) -> None:
        broker.set_available(False)
        failures = []
        try:
            for method, path, body in MALFORMED_WHILE_KAFKA_IS_DOWN:
                headers = {"Content-Type": "application/json"} if body is not None else {}
                resp = await client.request(method, path, data=body, headers=headers)
                if not 400 <= resp.status < 500:
                    text = (await resp.text())[:120]
                    failures.append(f"{method} {path[:60]}... {resp.status} {text}")
        finally:
            broker.set_available(True)
        assert not failures, "\n".join(failures)

    _serve(scenario, sidecar)
