"""The real ``pulsar-client`` against a cluster of ``broker-shim run`` processes speaking
the binary protocol: lookups redirect to the owner, and a kill -9 of the owner mid-stream
moves the topic to a live sidecar where the client carries on, losing nothing acknowledged
and getting nothing acknowledged again. Shared consumers of a partitioned topic spread
over both sidecars get every repeat marked as a redelivery, through a stop and an unload."""

from __future__ import annotations

import base64
import itertools
import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jwt
import pulsar
import pytest

from sync import TopicName, kafka_topic_of
from sync.transport import KafkaConfig, KafkaTransport, TopicSpec
from tests.integration.broker_shim.test_lookup_auth import TOKENS, call
from tests.integration.broker_shim.test_lookup_http import ShimProcess, lookups, wait_agreement
from tests.support.kafka import free_port, make_topic, wait_acks_durable
from tests.support.waits import wait_for

#: The secret key JWTs are signed with (256 bits, made here).
JWT_SECRET = b"policy-sync-test-jwt-secret-key!"

pytestmark = pytest.mark.timeout(300)


class BinaryShim(ShimProcess):
    """A sidecar process whose advertised ``pulsar://`` URL is its real binary listener.

    Its ownership session is 4 s: short enough for the kill -9 test to fail over within
    its bound, long enough that a sidecar starved of CPU on a busy machine keeps its
    bundles (at 1 s, sessions expired and bundles moved mid-test beside two CPU hogs).
    It logs at info, and the fixture prints each log's tail, shown when a test fails."""

    def __init__(
        self,
        bootstrap: str,
        cluster: str,
        broker_id: str,
        workdir: Path,
        extra: tuple[str, ...] = (),
    ) -> None:
        self.binary_port = free_port()
        super().__init__(
            bootstrap,
            cluster,
            broker_id,
            workdir,
            session_timeout_ms=4000,
            slots=16,
            # argparse keeps the last value: these override ShimProcess's placeholders
            extra=(
                "--log-level",
                "info",
                "--broker-port",
                str(self.binary_port),
                "--broker-url",
                f"pulsar://127.0.0.1:{self.binary_port}",
                *extra,
            ),
        )

    @property
    def broker_url(self) -> str:
        return f"pulsar://127.0.0.1:{self.binary_port}"


@pytest.fixture
def shims(kafka_bootstrap: str, tmp_path: Path) -> Iterator[list[BinaryShim]]:
    name = "bin" + uuid.uuid4().hex[:8]
    shims = [BinaryShim(kafka_bootstrap, name, f"b{i}", tmp_path) for i in range(2)]
    try:
        for s in shims:
            s.start()
        for s in shims:
            s.wait_ready()
        yield shims
    finally:
        for s in shims:
            s.stop()
        for s in shims:  # pytest shows this only for a failed test
            lines = s.log.read_text(errors="replace").splitlines() if s.log.exists() else []
            print(f"--- {s.log.name}, last 60 of {len(lines)} lines ---", *lines[-60:], sep="\n")


def _owners(shims: list[BinaryShim], topics: list[TopicName]) -> list[str | None]:
    _, owners = wait_agreement(shims, [str(t) for t in topics])  # type: ignore[arg-type]
    return owners


def _wait_both_own(shims: list[BinaryShim], topics: list[TopicName]) -> list[str | None]:
    """The owners of ``topics`` once both sidecars own some of them. Both being READY does
    not mean the ownership group has rebalanced to take the second one in yet (agreement
    can come first, on the first one owning every slot): 60 s is a liveness bound."""
    owners: list[str | None] = []

    def both_own() -> bool:
        owners[:] = _owners(shims, topics)
        return set(owners) == {s.broker_url for s in shims}

    wait_for(
        both_own, lambda: f"both sidecars own some topics: {owners}", timeout_s=60, interval_s=0.2
    )
    return owners


def test_lookups_redirect_to_the_owner(kafka_bootstrap: str, shims: list[BinaryShim]) -> None:
    # public/default's 4 bundles hash to 3 of the 16 slots, which all fell to one sidecar
    # in about one run of five: a namespace of 16 bundles is spread over both.
    namespace = f"public/redirect-{uuid.uuid4().hex[:8]}"
    body = json.dumps({"bundles": {"numBundles": 16}})
    assert shims[0].put(f"/admin/v2/namespaces/{namespace}", body).status == 204
    admin = KafkaTransport(KafkaConfig(kafka_bootstrap)).admin()
    topics = [TopicName.parse(f"persistent://{namespace}/t-{i}") for i in range(16)]
    for topic in topics:
        admin.ensure_topic(TopicSpec(kafka_topic_of(topic), 1))
    _wait_both_own(shims, topics)
    a = shims[0]
    client = pulsar.Client(a.broker_url, operation_timeout_seconds=30)
    try:
        for topic in topics:  # every topic through sidecar a, wherever it lives
            consumer = client.subscribe(
                str(topic), "s", initial_position=pulsar.InitialPosition.Earliest
            )
            client.create_producer(str(topic)).send(b"hello " + str(topic).encode())
            msg = consumer.receive(timeout_millis=30_000)
            assert msg.data() == b"hello " + str(topic).encode()
            consumer.acknowledge(msg)
    finally:
        client.close()


def test_kill_9_of_the_owner_mid_stream(kafka_bootstrap: str, shims: list[BinaryShim]) -> None:
    topics = [make_topic(kafka_bootstrap, 1) for _ in range(8)]
    owners = _owners(shims, topics)
    # The victim is the owner of a topic, reached through the other's service URL (a
    # fixed victim owned none of the 8 topics in some runs: bundles are not spread evenly).
    topic = topics[0]
    victim = next(s for s in shims if s.broker_url == owners[0])
    survivor = next(s for s in shims if s is not victim)
    client = pulsar.Client(survivor.broker_url, operation_timeout_seconds=30)
    try:
        producer = client.create_producer(str(topic), batching_enabled=False)
        consumer = client.subscribe(
            str(topic),
            "crash",
            consumer_type=pulsar.ConsumerType.Shared,
            initial_position=pulsar.InitialPosition.Earliest,
        )
        for i in range(20):
            producer.send(b"%d" % i)
        acked = set()
        positions: list[tuple[int, int]] = []
        for _ in range(20):
            msg = consumer.receive(timeout_millis=30_000)
            if int(msg.data()) % 4 != 3:  # keep a few unacknowledged
                consumer.acknowledge(msg)
                acked.add(msg.data())
                positions.append(
                    (max(0, msg.message_id().partition()), msg.message_id().entry_id())
                )
        wait_acks_durable(kafka_bootstrap, topic, "crash", positions)  # before the kill -9
        victim.kill()
        # The client reconnects, looks up again and lands on the survivor.
        for i in range(20, 30):
            producer.send(b"%d" % i)
        got: list[bytes] = []
        deadline = time.monotonic() + 90
        expected = {b"%d" % i for i in range(30)} - acked
        while set(got) != expected and time.monotonic() < deadline:
            try:
                msg = consumer.receive(timeout_millis=1000)
            except pulsar.Timeout:
                continue
            got.append(msg.data())
            consumer.acknowledge(msg)
        assert set(got) == expected  # nothing acknowledged lost…
        assert not set(got) & acked  # …or delivered again
        assert len(got) == len(set(got))
    finally:
        client.close()


class AuthBinaryShim(BinaryShim):
    """With ``--auth-config``: its status endpoint needs the super-user token."""

    def status(self) -> dict[str, Any] | None:
        try:
            result = call(self, "GET", "/policy-sync/v1/cluster", "t-admin")
        except OSError:
            return None
        return dict(result.json()) if result.status == 200 else None


def test_connect_and_lookup_check_tokens_and_roles(kafka_bootstrap: str, tmp_path: Path) -> None:
    tenant = "bin" + uuid.uuid4().hex[:6]
    config = tmp_path / "auth.json"
    config.write_text(
        json.dumps(
            {
                "tokens": TOKENS,
                "tokenSecretKey": "data:;base64," + base64.b64encode(JWT_SECRET).decode(),
                "superUserRoles": ["admin"],
                "tenants": {tenant: {"adminRoles": ["alice"], "lookupRoles": ["bob"]}},
            }
        )
    )
    shim = AuthBinaryShim(
        kafka_bootstrap, "au" + uuid.uuid4().hex[:6], "b0", tmp_path,
        extra=("--auth-config", str(config)),
    )  # fmt: skip
    shim.start()
    try:
        shim.wait_ready()
        # Pulsar: the tenant first (a super-user's job), then its admin makes the namespace.
        assert call(shim, "PUT", f"/admin/v2/tenants/{tenant}", "t-admin", "{}").status == 204
        ns = f"/admin/v2/namespaces/{tenant}/ns"
        assert call(shim, "PUT", ns, "t-alice").status == 204
        topic = TopicName.parse(f"persistent://{tenant}/ns/t-{uuid.uuid4().hex[:6]}")
        KafkaTransport(KafkaConfig(kafka_bootstrap)).admin().ensure_topic(
            TopicSpec(kafka_topic_of(topic), 1)
        )
        # no token: CONNECT is refused (AuthenticationError) and nothing is served
        anonymous = pulsar.Client(shim.broker_url, operation_timeout_seconds=10)
        with pytest.raises(pulsar.PulsarException):
            anonymous.create_producer(str(topic), send_timeout_millis=2000)
        anonymous.close()
        # a valid token without a role on the tenant: the lookup is refused
        eve = pulsar.Client(
            shim.broker_url,
            authentication=pulsar.AuthenticationToken("t-eve"),
            operation_timeout_seconds=10,
        )
        with pytest.raises(pulsar.PulsarException):
            eve.create_producer(str(topic), send_timeout_millis=2000)
        eve.close()
        # bob may look the tenant's topics up, but produces and consumes only once the
        # tenant's admin granted him those permissions (Pulsar's AuthorizationError before)
        bob = pulsar.Client(
            shim.broker_url,
            authentication=pulsar.AuthenticationToken("t-bob"),
            operation_timeout_seconds=30,
        )
        try:
            with pytest.raises(pulsar.AuthorizationError):
                bob.create_producer(str(topic), send_timeout_millis=2000)
            grant = f"{ns}/permissions/bob"
            assert call(shim, "POST", grant, "t-alice", '["consume"]').status == 204
            consumer = bob.subscribe(str(topic), "s0")  # consume alone: still no producer
            consumer.close()
            with pytest.raises(pulsar.AuthorizationError):
                bob.create_producer(str(topic), send_timeout_millis=2000)
            assert call(shim, "POST", grant, "t-alice", '["produce", "consume"]').status == 204
            consumer = bob.subscribe(
                str(topic), "s", initial_position=pulsar.InitialPosition.Earliest
            )
            bob.create_producer(str(topic)).send(b"authorized")
            assert consumer.receive(timeout_millis=30_000).data() == b"authorized"
        finally:
            bob.close()
        # a JWT signed with the secret key, as `pulsar tokens create --subject bob` makes:
        # its subject is the role; an expired one is refused at CONNECT
        expired = jwt.encode({"sub": "bob", "exp": 1}, JWT_SECRET, algorithm="HS256")
        late = pulsar.Client(
            shim.broker_url,
            authentication=pulsar.AuthenticationToken(expired),
            operation_timeout_seconds=10,
        )
        with pytest.raises(pulsar.PulsarException):
            late.create_producer(str(topic), send_timeout_millis=2000)
        late.close()
        valid = jwt.encode({"sub": "bob"}, JWT_SECRET, algorithm="HS256")
        bob_jwt = pulsar.Client(
            shim.broker_url,
            authentication=pulsar.AuthenticationToken(valid),
            operation_timeout_seconds=30,
        )
        try:
            consumer = bob_jwt.subscribe(
                str(topic), "s-jwt", initial_position=pulsar.InitialPosition.Earliest
            )
            bob_jwt.create_producer(str(topic)).send(b"by jwt")
            got = [consumer.receive(timeout_millis=30_000).data() for _ in range(2)]
            assert got == [b"authorized", b"by jwt"]
        finally:
            bob_jwt.close()
    finally:
        shim.stop()


def _spread_topic(
    shims: list[BinaryShim], namespace: str, partitions: int
) -> tuple[TopicName, BinaryShim, BinaryShim, set[int]]:
    """A name for a partitioned topic whose partitions both sidecars own some of:
    ``(topic, owner of the base name, the other sidecar, the partitions the other owns)``.
    Each partition is placed on its own (its name is hashed), so names are tried until one
    spreads (a 90 s liveness bound)."""
    deadline = time.monotonic() + 90
    for i in itertools.count():
        topic = TopicName.parse(f"persistent://{namespace}/t-{i}")
        names = [TopicName.parse(f"{topic}-partition-{p}") for p in range(partitions)]
        owners = _owners(shims, [*names, topic])
        if set(owners[:-1]) == {s.broker_url for s in shims}:
            base_owner = next(s for s in shims if s.broker_url == owners[-1])
            other = next(s for s in shims if s is not base_owner)
            return (
                topic,
                base_owner,
                other,
                {p for p, url in enumerate(owners[:-1]) if url == other.broker_url},
            )
        assert time.monotonic() < deadline, owners
    raise AssertionError("unreachable")


def _shared(client: pulsar.Client, topic: TopicName, name: str) -> pulsar.Consumer:
    """A Shared consumer of subscription ``s`` on ``topic``."""
    return client.subscribe(
        str(topic), "s", consumer_type=pulsar.ConsumerType.Shared, consumer_name=name
    )


class _Deliveries:
    """Every delivery to a set of consumers, in order: payload and redelivery count."""

    def __init__(self, consumers: list[pulsar.Consumer]) -> None:
        self.consumers = consumers
        self.log: list[tuple[bytes, int]] = []
        #: payload -> (Kafka partition, offset) of every message received
        self.where: dict[bytes, tuple[int, int]] = {}
        self.acked: set[bytes] = set()
        #: payload -> how many deliveries there were when Kafka was seen to hold its ack
        self.durable: dict[bytes, int] = {}

    def receive_until(
        self, done: Callable[[], bool], ack: Callable[[bytes], bool] = lambda _p: True
    ) -> None:
        """Receive from every consumer, acknowledging what ``ack`` accepts, until ``done``
        (a 120 s liveness bound)."""
        deadline = time.monotonic() + 120
        while not done():
            assert time.monotonic() < deadline, f"{len(self.seen())} distinct messages received"
            for consumer in self.consumers:
                try:
                    msg = consumer.receive(timeout_millis=100)
                except pulsar.Timeout:
                    continue
                self.log.append((msg.data(), msg.redelivery_count()))
                where = msg.message_id()
                self.where[msg.data()] = (where.partition(), where.entry_id())
                if ack(msg.data()):
                    consumer.acknowledge(msg)
                    self.acked.add(msg.data())

    def seen(self) -> Counter[bytes]:
        return Counter(payload for payload, _ in self.log)

    def repeats(self) -> list[tuple[bytes, int]]:
        """The deliveries of a message received before."""
        seen: set[bytes] = set()
        out = []
        for payload, count in self.log:
            if payload in seen:
                out.append((payload, count))
            seen.add(payload)
        return out

    def after_durable_ack(self) -> list[bytes]:
        """The messages delivered again after Kafka was seen to hold their ack. (An ack
        still on its way when the consumer is moved may be lost, as in Pulsar: its
        message comes again, as a redelivery.)"""
        log = self.log
        return [p for i, (p, _) in enumerate(log) if i >= self.durable.get(p, len(log))]

    def wait_durable(self, kafka_bootstrap: str, topic: TopicName, subscription: str) -> None:
        """Wait until Kafka holds every acknowledgement so far (a 60 s liveness bound)."""
        acked = [self.where[p] for p in self.acked]
        wait_acks_durable(kafka_bootstrap, topic, subscription, acked)
        for payload in self.acked:
            self.durable.setdefault(payload, len(self.log))


def test_a_message_delivered_again_is_marked_redelivered(
    kafka_bootstrap: str, shims: list[BinaryShim]
) -> None:
    """Two Shared consumers of one subscription on a partitioned topic whose partitions
    live on both sidecars: while nothing moves, each message is delivered once; when the
    sidecar owning some partitions stops, and when every bundle is unloaded, what comes
    again comes with ``redelivery_count`` >= 1 (what the consumers held unacknowledged
    does), and nothing whose acknowledgement was committed comes again."""
    namespace = f"public/redeliver-{uuid.uuid4().hex[:8]}"
    body = json.dumps({"bundles": {"numBundles": 16}})
    assert shims[0].put(f"/admin/v2/namespaces/{namespace}", body).status == 204
    # The survivor owns the base name too: a sidecar judging ownership by the base name
    # (which no client looks up) would keep its subscription loaded through the move.
    topic, survivor, victim, moving = _spread_topic(shims, namespace, 4)
    path = "/admin/v2/" + str(topic).replace("://", "/") + "/partitions"
    assert survivor.put(path, "4").status == 204
    batches = [[b"%d" % i for i in range(start, start + n)] for start, n in
               ((0, 400), (400, 100), (500, 100), (600, 100))]  # fmt: skip
    kept = {p for p in batches[1] + batches[2] if int(p) % 4 == 3}  # unacknowledged at first

    def send(producer: pulsar.Producer, payloads: list[bytes]) -> None:
        for i, payload in enumerate(payloads):  # half of them keyed, as a mixed workload
            producer.send_async(payload, None, partition_key=f"k{i % 7}" if i % 2 else None)
        producer.flush()

    consuming = pulsar.Client(survivor.broker_url, operation_timeout_seconds=30)
    producing = pulsar.Client(victim.broker_url, operation_timeout_seconds=30)
    try:
        got = _Deliveries([_shared(consuming, topic, f"c{i}") for i in range(2)])

        def ack_once(payload: bytes) -> bool:  # a kept one when it comes again
            return payload not in kept or got.seen()[payload] > 1

        def received(payloads: list[bytes]) -> Callable[[], bool]:
            return lambda: got.seen().keys() >= set(payloads)

        def again(payloads: set[bytes]) -> Callable[[], bool]:
            return lambda: all(got.seen()[p] >= 2 for p in payloads)

        producer = producing.create_producer(str(topic))  # batching, as by default
        send(producer, batches[0])
        got.receive_until(received(batches[0]))
        send(producer, batches[1])
        got.receive_until(received(batches[1]), ack=ack_once)
        producer.close()
        before_move = got.repeats()
        got.wait_durable(kafka_bootstrap, topic, "s")
        # A move: the consumers of the victim's partitions reconnect and land on the
        # survivor, which delivers again what they held there unacknowledged.
        victim.stop()
        held = {p for p in kept & set(batches[1]) if got.where[p][0] in moving}
        send(producer := consuming.create_producer(str(topic)), batches[2])
        got.receive_until(lambda: received(batches[2])() and again(held)(), ack=ack_once)
        got.wait_durable(kafka_bootstrap, topic, "s")
        # Every bundle unloaded: all consumers reconnect (to the survivor, which claims
        # the bundles again); what they held unacknowledged comes again.
        assert survivor.put_retrying(f"/admin/v2/namespaces/{namespace}/unload").status == 204
        send(producer, batches[3])
        got.receive_until(lambda: received(batches[3])() and again(kept)(), ack=ack_once)
    finally:
        consuming.close()
        producing.close()
    repeats = got.repeats()
    unmarked = [payload for payload, count in repeats if count == 0]
    assert not unmarked, (
        f"{len(unmarked)} of {len(repeats)} repeated deliveries had redelivery count 0, "
        f"e.g. {sorted(unmarked, key=int)[:10]}"
    )
    assert not before_move, f"{len(before_move)} repeats while nothing moved: {before_move[:10]}"
    late = sorted(set(got.after_durable_ack()), key=int)
    assert not late, f"{len(late)} messages delivered after their ack was committed: {late}"


class _Publisher:
    """Sends numbered messages through one producer from a thread until stopped."""

    def __init__(self, client: pulsar.Client, topic: TopicName) -> None:
        self.producer = client.create_producer(str(topic), batching_enabled=False)
        self.sent: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        for i in itertools.count():
            if self._stop.wait(0.005):
                return
            payload = b"%d" % i
            self.producer.send(payload)
            self.sent.append(payload)

    def __enter__(self) -> _Publisher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        self.producer.close()


def _moved_to(
    joining: BinaryShim, asked: BinaryShim, names: list[str], probes: list[str], got: _Deliveries
) -> list[str]:
    """Receive (acknowledging) until ``joining`` owns some of ``names`` (returned), or
    has owned some of ``probes`` for 5 s without any of ``names`` (empty: its slots hold
    none of them; its takeover claims within a second of its first claim)."""
    moved: list[str] = []
    polled = [0.0, 0.0]  # the last poll; when the joiner was first seen owning a probe

    def owns() -> bool:  # polled at most twice a second
        now = time.monotonic()
        if now - polled[0] >= 0.5:
            polled[0] = now
            urls = lookups(asked, names)
            moved[:] = [n for n, u in zip(names, urls, strict=True) if u == joining.broker_url]
            if not polled[1] and joining.broker_url in lookups(asked, probes):
                polled[1] = now
        return bool(moved) or bool(polled[1] and now - polled[1] > 5)

    got.receive_until(owns)
    return moved


def test_a_consumer_joining_while_partitions_move_gets_no_unmarked_repeat(
    kafka_bootstrap: str, shims: list[BinaryShim], tmp_path: Path
) -> None:
    """A third sidecar joins while messages flow: some partitions move to it, and a new
    Shared consumer subscribes through it as soon as it owns one. The old owner must stop
    serving a moving partition before the new owner may claim it (Pulsar closes a bundle's
    topics before it gives the bundle up): were both to serve it, the newer one would hand
    out again, with ``redelivery_count`` 0, what the older one delivered meanwhile."""
    namespace = f"public/join-{uuid.uuid4().hex[:8]}"
    body = json.dumps({"bundles": {"numBundles": 64}})
    assert shims[0].put(f"/admin/v2/namespaces/{namespace}", body).status == 204
    topic = TopicName.parse(f"persistent://{namespace}/t")
    names = [str(TopicName.parse(f"{topic}-partition-{p}")) for p in range(16)]
    probes = [f"persistent://{namespace}/probe-{i}" for i in range(32)]
    path = "/admin/v2/" + str(topic).replace("://", "/") + "/partitions"
    assert shims[0].put(path, "16").status == 204
    _owners(shims, [TopicName.parse(n) for n in names])  # every partition claimed
    consuming = pulsar.Client(shims[0].broker_url, operation_timeout_seconds=30)
    producing = pulsar.Client(shims[1].broker_url, operation_timeout_seconds=30)
    joiners: list[BinaryShim] = []
    clients = [consuming, producing]
    try:
        got = _Deliveries([_shared(consuming, topic, f"c{i}") for i in range(2)])
        with _Publisher(producing, topic) as publisher:
            got.receive_until(lambda: len(got.seen()) >= 200)
            moved: list[str] = []
            for attempt in range(4):  # the joiner's slots may hold no partition of ours
                joining = BinaryShim(kafka_bootstrap, shims[0].cluster, f"j{attempt}", tmp_path)
                joiners.append(joining)
                joining.start()
                moved = _moved_to(joining, shims[0], names, probes, got)
                if moved:
                    break
                joining.stop()
            assert moved, "no partition moved to a joining sidecar in 4 joins"
            late = pulsar.Client(joining.broker_url, operation_timeout_seconds=30)
            clients.append(late)
            got.consumers.append(_shared(late, topic, "c-late"))
            # Well past the old owners' periodic ownership check (5 s): ~1,500 messages.
            mark = len(got.seen())
            got.receive_until(lambda: len(got.seen()) >= mark + 1500)
        got.receive_until(lambda: got.seen().keys() >= set(publisher.sent))
    finally:
        for client in clients:
            client.close()
        for joiner in joiners:
            joiner.stop()
    repeats = got.repeats()
    unmarked = [payload for payload, count in repeats if count == 0]
    assert not unmarked, (
        f"{len(unmarked)} of {len(repeats)} repeated deliveries had redelivery count 0 "
        f"({len(moved)} partitions moved), e.g. {sorted(unmarked, key=int)[:10]}"
    )
