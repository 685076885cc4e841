"""The real ``pulsar-client`` against a cluster of ``broker-shim run`` processes speaking
the binary protocol: lookups redirect to the owner, and a kill -9 of the owner mid-stream
moves the topic to a live sidecar where the client carries on, losing nothing acknowledged
and getting nothing acknowledged again."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

from sync import TopicName, kafka_topic_of
from sync.transport import KafkaConfig, KafkaTransport, TopicSpec
from tests.integration._binary_harness import make_topic
from tests.integration.broker_shim.test_lookup_auth import TOKENS, call
from tests.integration.broker_shim.test_lookup_http import ShimProcess, wait_agreement
from tests.kafka_broker import free_port

pytestmark = pytest.mark.timeout(300)


class BinaryShim(ShimProcess):
    """A sidecar process whose advertised ``pulsar://`` URL is its real binary listener."""

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
            session_timeout_ms=1000,
            slots=16,
            # argparse keeps the last value: these override ShimProcess's placeholders
            extra=(
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


def _owners(shims: list[BinaryShim], topics: list[TopicName]) -> list[str | None]:
    _, owners = wait_agreement(shims, [str(t) for t in topics])  # type: ignore[arg-type]
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
    # Both sidecars being READY does not mean the ownership group has rebalanced to take
    # the second one in yet (agreement can come first, on the first one owning all 16
    # slots): wait until both own some, as a liveness bound.
    deadline = time.monotonic() + 60
    owners = _owners(shims, topics)
    while set(owners) != {s.broker_url for s in shims}:
        assert time.monotonic() < deadline, owners  # both own some
        time.sleep(0.2)
        owners = _owners(shims, topics)
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
        for _ in range(20):
            msg = consumer.receive(timeout_millis=30_000)
            if int(msg.data()) % 4 != 3:  # keep a few unacknowledged
                consumer.acknowledge(msg)
                acked.add(msg.data())
        time.sleep(1.0)  # > the 100 ms commit interval: the acks are durable
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


def test_connect_and_lookup_check_tokens_and_roles(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    tenant = "bin" + uuid.uuid4().hex[:6]
    config = tmp_path / "auth.json"
    config.write_text(
        json.dumps(
            {
                "tokens": TOKENS,
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
        # bob may look the tenant's topics up: he produces and consumes
        bob = pulsar.Client(
            shim.broker_url,
            authentication=pulsar.AuthenticationToken("t-bob"),
            operation_timeout_seconds=30,
        )
        try:
            consumer = bob.subscribe(
                str(topic), "s", initial_position=pulsar.InitialPosition.Earliest
            )
            bob.create_producer(str(topic)).send(b"authorized")
            assert consumer.receive(timeout_millis=30_000).data() == b"authorized"
        finally:
            bob.close()
    finally:
        shim.stop()
