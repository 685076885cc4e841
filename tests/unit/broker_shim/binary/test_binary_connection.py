"""The binary connection's state machine, over loopback TCP and the in-memory transport."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from broker_shim.binary import BinaryConfig, BinaryServer
from broker_shim.binary import PulsarApi_pb2 as api
from broker_shim.binary._framing import encode_command
from sync.messaging import MessagingEngine
from sync.transport import MemoryTransport

_T = api.BaseCommand
URL = "pulsar://127.0.0.1:6650"


def _cmd(kind: api.BaseCommand.Type, **fields: object) -> bytes:
    cmd = _T(type=kind)
    name = {
        _T.CONNECT: "connect",
        _T.PING: "ping",
        _T.LOOKUP: "lookupTopic",
        _T.PARTITIONED_METADATA: "partitionMetadata",
        _T.PRODUCER: "producer",
    }.get(kind)
    if name is not None:
        sub = getattr(cmd, name)
        sub.SetInParent()
        for k, v in fields.items():
            setattr(sub, k, v)
    return encode_command(cmd)


def _connect(version: int = 21) -> bytes:
    return _cmd(_T.CONNECT, client_version="test", protocol_version=version)


class Peer:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def send(self, data: bytes) -> None:
        self.writer.write(data)

    async def recv(self, timeout_s: float = 5.0) -> api.BaseCommand | None:
        """The next command, or None once the server closed the connection."""
        try:
            header = await asyncio.wait_for(self.reader.readexactly(4), timeout_s)
            body = await self.reader.readexactly(struct.unpack(">I", header)[0])
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        cmd = _T()
        cmd.ParseFromString(body[4 : 4 + struct.unpack_from(">I", body)[0]])
        return cmd


@contextlib.asynccontextmanager
async def serving(
    advertised_url: str = URL,
    *,
    engine: MessagingEngine | None = None,
    advertised_url_tls: str | None = None,
    keepalive_s: float = 0.3,
) -> AsyncIterator[BinaryServer]:
    """A listener over ``engine`` (default: one on the in-memory transport, without
    policies)."""
    srv = BinaryServer(
        engine or MessagingEngine(MemoryTransport(), lambda: None),
        cluster=lambda: None,
        advertised_url=advertised_url,
        advertised_url_tls=advertised_url_tls,
        producer_name_prefix="t",
        config=BinaryConfig(keepalive_s=keepalive_s, protocol_version=21),
    )
    await srv.start()
    try:
        yield srv
    finally:
        await srv.close()


async def _open(server: BinaryServer) -> Peer:
    assert server.port is not None
    return Peer(*await asyncio.open_connection("127.0.0.1", server.port))


def run(coro: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(coro(), 30))


def test_connect_negotiates_the_lower_version_then_serves() -> None:
    async def scenario() -> None:
        async with serving() as srv:
            peer = await _open(srv)
            peer.send(_connect(version=15))
            answer = await peer.recv()
            assert answer is not None and answer.type == _T.CONNECTED
            assert answer.connected.protocol_version == 15
            # At most what a topic takes by default (every chunk of a large message fits).
            assert answer.connected.max_message_size == 1_000_000
            peer.send(_cmd(_T.PING))
            pong = await peer.recv()
            assert pong is not None and pong.type == _T.PONG
            peer.send(_cmd(_T.LOOKUP, topic="persistent://public/default/x", request_id=7))
            lookup = await peer.recv()
            assert lookup is not None
            resp = lookup.lookupTopicResponse
            assert (resp.request_id, resp.brokerServiceUrl, resp.authoritative) == (7, URL, True)
            assert resp.response == api.CommandLookupTopicResponse.Connect
            peer.send(
                _cmd(_T.PARTITIONED_METADATA, topic="persistent://public/default/x", request_id=8)
            )
            meta = await peer.recv()
            assert meta is not None and meta.partitionMetadataResponse.partitions == 0
            peer.send(_cmd(_T.LOOKUP, topic="persistent://a/b/c/d/e", request_id=9))
            bad = await peer.recv()
            assert bad is not None
            assert bad.lookupTopicResponse.response == api.CommandLookupTopicResponse.Failed
            assert bad.lookupTopicResponse.error == api.InvalidTopicName
            peer.send(
                _cmd(
                    _T.PRODUCER, topic="persistent://public/default/x", producer_id=1, request_id=10
                )  # fmt: skip
            )
            refused = await peer.recv()
            assert refused is not None and refused.type == _T.ERROR
            assert refused.error.request_id == 10
            assert refused.error.error == api.ServiceNotReady  # no policies loaded: fail closed

    run(scenario)


@pytest.mark.parametrize(
    "first",
    [
        _cmd(_T.PING),  # anything before CONNECT
        _cmd(_T.LOOKUP, topic="persistent://public/default/x", request_id=1),
    ],
)
def test_commands_before_connect_close_the_connection(first: bytes) -> None:
    async def scenario() -> None:
        async with serving() as srv:
            peer = await _open(srv)
            peer.send(first)
            assert await peer.recv() is None
            other = await _open(srv)  # the server keeps serving others
            other.send(_connect())
            answer = await other.recv()
            assert answer is not None and answer.type == _T.CONNECTED

    run(scenario)


@pytest.mark.parametrize(
    "second",
    [_connect(), encode_command(_T(type=_T.NEW_TXN)), encode_command(_T(type=_T.SUCCESS))],
)
def test_second_connect_and_unsupported_commands_close_the_connection(second: bytes) -> None:
    async def scenario() -> None:
        async with serving() as srv:
            peer = await _open(srv)
            peer.send(_connect())
            answer = await peer.recv()
            assert answer is not None and answer.type == _T.CONNECTED
            peer.send(second)
            assert await peer.recv() is None

    run(scenario)


def test_the_server_pings_and_drops_a_silent_peer() -> None:
    async def scenario() -> None:
        async with serving() as srv:
            peer = await _open(srv)
            peer.send(_connect())
            answer = await peer.recv()
            assert answer is not None and answer.type == _T.CONNECTED
            ping = await peer.recv()  # idle for one keepalive interval
            assert ping is not None and ping.type == _T.PING
            assert await peer.recv() is None  # no answer for two intervals: dropped
            assert srv.trace.sent_counts["PING"] >= 1

    run(scenario)


def test_a_peer_that_never_connects_is_dropped() -> None:
    async def scenario() -> None:
        async with serving() as srv:
            peer = await _open(srv)
            assert await peer.recv() is None  # nothing but the close

    run(scenario)


@pytest.mark.parametrize(
    ("advertised", "proxy"),
    [
        ("pulsar://127.0.0.1:6650", True),
        ("pulsar://127.0.0.2:6650", True),
        ("pulsar://localhost:6650", True),
        ("pulsar://[::1]:6650", True),
        ("pulsar://10.1.2.3:6650", False),
        ("pulsar://no-such-host.invalid:6650", False),
    ],
)
def test_standalone_connect_proxies_through_the_service_url_when_advertising_loopback(
    advertised: str, proxy: bool
) -> None:
    """Pulsar's ``shouldRedirectThroughServiceUrl``: a standalone broker (no cluster
    registry) whose advertised address is a loopback one answers Connect with
    ``proxy_through_service_url``, so the client keeps using the address it came by."""

    async def scenario() -> None:
        async with serving(advertised) as srv:
            peer = await _open(srv)
            peer.send(_connect())
            assert (await peer.recv()) is not None
            peer.send(_cmd(_T.LOOKUP, topic="persistent://public/default/x", request_id=3))
            answer = await peer.recv()
            assert answer is not None
            resp = answer.lookupTopicResponse
            assert resp.response == api.CommandLookupTopicResponse.Connect
            assert resp.brokerServiceUrl == advertised
            assert resp.proxy_through_service_url is proxy

    run(scenario)


@pytest.mark.parametrize(
    ("headers", "producer", "sequence"),
    [
        ([("__pulsar.producer", b"alice"), ("__pulsar.seq", b"41"), ("p", b"v")], "alice", 41),
        ([("p", b"v")], "policy-sync", 9),  # a plain Kafka record: defaults
        (None, "policy-sync", 9),
        ([("__pulsar.producer", b"bob"), ("__pulsar.seq", b"junk")], "bob", 9),
    ],
)
def test_message_metadata_gives_back_producer_sequence_and_publish_time(
    headers: list[tuple[str, bytes]] | None, producer: str, sequence: int
) -> None:
    from broker_shim.binary import parse_frame
    from broker_shim.binary._commands import message_frame as _message_frame
    from sync.messaging import Delivery, MessageId
    from sync.messaging._cursor import Entry

    entry = Entry(0, 9, "k", b"x", headers, 1_700_000_000_123)
    delivery = Delivery(MessageId(-1, 9), entry, 0)
    frame = parse_frame(_message_frame(5, delivery)[4:])
    assert frame.metadata is not None
    assert frame.metadata.producer_name == producer
    assert frame.metadata.sequence_id == sequence
    assert frame.metadata.publish_time == 1_700_000_000_123
    assert {kv.key: kv.value for kv in frame.metadata.properties} == {
        k: v.decode() for k, v in headers or [] if not k.startswith("__pulsar.")
    }
    assert frame.payload == b"x"


async def _subscribed(srv: BinaryServer, topic: str) -> Peer:
    """A connected peer with consumer 1 subscribed to ``topic`` from the earliest message
    (Exclusive, subscription ``s``), 10 permits given."""
    peer = await _open(srv)
    peer.send(_connect())
    assert (await peer.recv()) is not None
    sub = _T(type=_T.SUBSCRIBE)
    sub.subscribe.topic = topic
    sub.subscribe.subscription = "s"
    sub.subscribe.subType = api.CommandSubscribe.Exclusive
    sub.subscribe.consumer_id = 1
    sub.subscribe.request_id = 1
    sub.subscribe.initialPosition = api.CommandSubscribe.Earliest
    peer.send(encode_command(sub))
    answer = await peer.recv()
    assert answer is not None and answer.type == _T.SUCCESS, answer
    flow = _T(type=_T.FLOW)
    flow.flow.consumer_id = 1
    flow.flow.messagePermits = 10
    peer.send(encode_command(flow))
    return peer


async def _entry_ids(peer: Peer, count: int) -> list[int]:
    """The entry ids of the next ``count`` MESSAGE frames the peer receives."""
    got: list[int] = []
    while len(got) < count:
        cmd = await peer.recv(timeout_s=10)
        assert cmd is not None, "connection dropped"
        if cmd.type == _T.MESSAGE:
            got.append(cmd.message.message_id.entryId)
    return got


@contextlib.asynccontextmanager
async def _engine_with(topic: str, values: list[bytes]) -> AsyncIterator[MessagingEngine]:
    """An engine on the in-memory transport whose ``topic`` holds ``values``."""
    from sync import PolicyService, TopicName, kafka_topic_of
    from sync.transport import TopicSpec

    transport = MemoryTransport()
    kafka = kafka_topic_of(TopicName.parse(topic))
    transport.admin().ensure_topic(TopicSpec(kafka, 1))
    producer = transport.producer()
    for value in values:
        producer.produce(kafka, None, value, partition=0)
    producer.flush(5)
    svc = PolicyService(transport).start(timeout_s=10)
    engine = MessagingEngine(transport, lambda: svc)
    await engine.start()
    try:
        yield engine
    finally:
        await engine.close()
        svc.close()


def test_an_ack_of_the_position_before_the_first_entry_keeps_the_connection() -> None:
    """The Java client acks a batch's first message cumulatively as the id before it
    (entry id -1, ``2**64 - 1`` on the wire) when batch-index acks are off: nothing is
    acknowledged, the ACK is answered, and the connection and the consumer go on (it
    was dropped, failing the reader's next request, once in three runs on a busy
    machine)."""
    topic = "persistent://public/default/before-first"

    async def scenario() -> None:
        async with (
            _engine_with(topic, [b"a", b"b"]) as engine,
            serving(engine=engine, keepalive_s=5) as srv,
        ):
            peer = await _subscribed(srv, topic)
            assert await _entry_ids(peer, 2) == [0, 1]
            ack = _T(type=_T.ACK)
            ack.ack.consumer_id = 1
            ack.ack.ack_type = api.CommandAck.Cumulative
            ack.ack.message_id.add(ledgerId=0, entryId=(1 << 64) - 1)
            ack.ack.request_id = 5
            peer.send(encode_command(ack))
            answer = await peer.recv()
            assert answer is not None and answer.type == _T.ACK_RESPONSE, answer
            assert not answer.ackResponse.HasField("error")
            last = _T(type=_T.GET_LAST_MESSAGE_ID)
            last.getLastMessageId.consumer_id = 1
            last.getLastMessageId.request_id = 6
            peer.send(encode_command(last))
            answer = await peer.recv()
            assert answer is not None, "connection dropped"
            assert answer.type == _T.GET_LAST_MESSAGE_ID_RESPONSE, answer
            response = answer.getLastMessageIdResponse
            assert response.last_message_id.entryId == 1
            # nothing was acknowledged: the mark-delete position is before the first
            assert response.consumer_mark_delete_position.entryId == (1 << 64) - 1

    run(scenario)


def test_a_record_no_message_can_be_made_of_is_skipped_not_wedging_the_consumer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stored record whose MESSAGE cannot be built is counted, acknowledged and skipped;
    the records after it still reach the consumer."""
    from broker_shim.binary import _commands as commands
    from sync import TopicName
    from sync.messaging import Delivery

    build = commands.message_frame

    def poisoned(consumer_id: int, delivery: Delivery) -> bytes:
        if delivery.entry.payload == b"poison":
            raise ValueError("Value out of range")
        return build(consumer_id, delivery)

    monkeypatch.setattr(commands, "message_frame", poisoned)
    topic = TopicName.parse("persistent://public/default/poison")

    async def scenario() -> None:
        async with (
            _engine_with(str(topic), [b"a", b"poison", b"b"]) as engine,
            serving(engine=engine, keepalive_s=5) as srv,
        ):
            await _read_past_the_poison(srv, topic)

    async def _read_past_the_poison(srv: BinaryServer, topic: TopicName) -> None:
        peer = await _subscribed(srv, str(topic))
        assert await _entry_ids(peer, 2) == [0, 2]
        assert srv.trace.unreadable_count == 1

    run(scenario)


def test_tls_listener_serves_beside_the_plain_one_and_checks_certificates(
    tmp_path: Path,
) -> None:
    """``pulsar+ssl://``: a client trusting the CA connects and looks up (the answer
    carries the TLS URL); one that does not trust it fails the handshake; with client
    certificates required, a client without one is refused and one with a trusted one is
    served. The plain listener serves as before."""
    from broker_shim._tls import TlsSettings
    from tests.support.tls import make_tls_files

    files = make_tls_files(tmp_path)
    tls_url = "pulsar+ssl://127.0.0.1:6651"

    async def exchange(port: int, ctx: ssl.SSLContext | None) -> api.BaseCommand | None:
        peer = Peer(*await asyncio.open_connection("127.0.0.1", port, ssl=ctx))
        try:
            peer.send(_connect())
            connected = await peer.recv()
            if connected is None:
                return None
            assert connected.type == _T.CONNECTED
            peer.send(_cmd(_T.LOOKUP, topic="persistent://public/default/x", request_id=3))
            return await peer.recv()
        finally:
            peer.writer.close()

    def client(*, trusted: bool = True, cert: bool = False) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(files.ca) if trusted else None)
        if cert:
            ctx.load_cert_chain(files.client_cert, files.client_key)
        return ctx

    async def scenario(settings: TlsSettings) -> None:
        async with serving(advertised_url_tls=tls_url, keepalive_s=5) as srv:
            await srv.start(tls=settings.server_context())
            assert srv.port is not None and srv.tls_port is not None
            answer = await exchange(srv.port, None)
            assert answer is not None and answer.lookupTopicResponse.brokerServiceUrl == URL
            if settings.require_client_cert:
                try:  # TLS 1.3: the client learns it at its first read, not in the handshake
                    refused = await exchange(srv.tls_port, client())
                except (ssl.SSLError, ConnectionError):
                    refused = None
                assert refused is None
                answer = await exchange(srv.tls_port, client(cert=True))
            else:
                answer = await exchange(srv.tls_port, client())
            assert answer is not None
            resp = answer.lookupTopicResponse
            assert (resp.brokerServiceUrl, resp.brokerServiceUrlTls) == (URL, tls_url)
            with pytest.raises(ssl.SSLCertVerificationError):
                await exchange(srv.tls_port, client(trusted=False))

    asyncio.run(asyncio.wait_for(scenario(TlsSettings(files.cert, files.key)), 30))
    required = TlsSettings(files.cert, files.key, files.ca, require_client_cert=True)
    asyncio.run(asyncio.wait_for(scenario(required), 30))


def test_tls_settings_refuse_unusable_files(tmp_path: Path) -> None:
    from broker_shim._tls import TlsSettings
    from sync.errors import ConfigurationError
    from tests.support.tls import make_tls_files

    files = make_tls_files(tmp_path)
    with pytest.raises(ConfigurationError, match="--tls-cert-file"):
        TlsSettings(tmp_path / "missing.pem", files.key).server_context()
    with pytest.raises(ConfigurationError, match="--tls-cert-file"):
        TlsSettings(files.cert, files.client_key).server_context()  # not its key
    with pytest.raises(ConfigurationError, match="needs --tls-trust-cert-file"):
        TlsSettings(files.cert, files.key, require_client_cert=True)


def test_a_lookup_for_a_listener_name_not_advertised_fails_as_pulsars() -> None:
    """Pulsar (``NamespaceService``): a listener name the broker does not advertise fails
    the lookup with ServiceNotReady, "the broker do not have NAME listener"; without a
    name the lookup answers as before."""

    async def scenario() -> None:
        async with serving() as srv:
            peer = await _open(srv)
            peer.send(_connect())
            assert (await peer.recv()) is not None
            topic = "persistent://public/default/x"
            peer.send(_cmd(_T.LOOKUP, topic=topic, request_id=1, advertised_listener_name="ext"))
            answer = await peer.recv()
            assert answer is not None
            resp = answer.lookupTopicResponse
            assert resp.response == api.CommandLookupTopicResponse.Failed
            assert resp.error == api.ServiceNotReady
            assert resp.message == "the broker do not have ext listener"
            peer.send(_cmd(_T.LOOKUP, topic=topic, request_id=2))
            answer = await peer.recv()
            assert answer is not None
            assert answer.lookupTopicResponse.response == api.CommandLookupTopicResponse.Connect

    run(scenario)
