"""The controller guard (``sync.transport._kafka_controller``): a controller-routed admin
call starts only once fresh Metadata names a controller that accepts connections.

The AdminClient is a stand-in that answers ``list_topics`` with scripted controller ids;
reachability is real: a listening loopback socket, or a port nothing listens on.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from confluent_kafka import KafkaError, KafkaException

from sync._errors import TransportError
from sync.transport import KafkaConfig, KafkaTransport
from sync.transport._kafka_admin import KafkaAdmin
from sync.transport._kafka_controller import FANOUT_METADATA_TOPIC, ControllerGuard


@dataclass
class _Broker:
    host: str
    port: int


@dataclass
class _Metadata:
    controller_id: int
    brokers: dict[int, _Broker]


@dataclass
class _Admin:
    """Answers each Metadata request with the next scripted controller id (last repeats)."""

    brokers: dict[int, _Broker]
    script: list[int]
    asked: list[str | None] = field(default_factory=list)

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> _Metadata:
        self.asked.append(topic)
        node = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        return _Metadata(node, self.brokers)


@pytest.fixture
def live() -> Iterator[_Broker]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    yield _Broker("127.0.0.1", server.getsockname()[1])
    server.close()


@pytest.fixture
def dead() -> _Broker:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nothing listens there any more: connection refused
    return _Broker("127.0.0.1", port)


def test_call_runs_at_once_when_the_named_controller_is_reachable(live: _Broker) -> None:
    admin = _Admin({1: live}, [1])
    guard = ControllerGuard(admin)
    ran = []
    with guard.reachable("t", time.monotonic() + 5, "describe topic t"):
        ran.append(True)
    assert ran == [True]
    assert admin.asked == ["t"]  # fresh Metadata about the topic right before the call
    assert guard.unreachable_named == 0


def test_metadata_is_asked_again_until_a_reachable_controller_is_named(
    live: _Broker, dead: _Broker
) -> None:
    admin = _Admin({1: dead, 2: live}, [1, 1, 2])
    guard = ControllerGuard(admin)
    with guard.reachable(None, time.monotonic() + 30, "create topic t"):
        pass
    assert len(admin.asked) == 3
    assert guard.unreachable_named == 2


def test_no_reachable_controller_fails_at_the_deadline_without_calling(dead: _Broker) -> None:
    admin = _Admin({1: dead}, [1])
    guard = ControllerGuard(admin)
    ran = []
    with pytest.raises(TransportError, match="no reachable Kafka controller.*broker 1"):
        with guard.reachable("t", time.monotonic() + 0.5, "describe topic t"):
            ran.append(True)
    assert ran == []
    assert guard.unreachable_named >= 1


def test_a_controller_unknown_to_the_metadata_counts_as_unreachable(live: _Broker) -> None:
    admin = _Admin({2: live}, [-1, 7, 2])  # no controller, then one not in the broker list
    guard = ControllerGuard(admin)
    with guard.reachable("t", time.monotonic() + 30, "alter configs of t"):
        pass
    assert len(admin.asked) == 3


# -- fan-out calls (ListConsumerGroups): every broker must be reachable -------------------


def test_every_broker_waits_until_all_named_brokers_are_reachable(
    live: _Broker, dead: _Broker
) -> None:
    admin = _Admin({1: dead, 2: live}, [2])
    guard = ControllerGuard(admin)
    ran = []
    with pytest.raises(TransportError, match=r"broker\(s\) 1 unreachable"):
        with guard.every_broker(time.monotonic() + 0.5, "list consumer groups"):
            ran.append(True)
    assert ran == []
    assert admin.asked[0] == FANOUT_METADATA_TOPIC  # never all topics' metadata
    admin.brokers = {2: live, 3: live}  # broker 1 fenced out of the metadata
    with guard.every_broker(time.monotonic() + 5, "list consumer groups"):
        ran.append(True)
    assert ran == [True]


class _Listing:
    def __init__(self, valid: list[str], errors: list[object]) -> None:
        self.valid = [type("G", (), {"group_id": g})() for g in valid]
        self.errors = errors


class _Future:
    def __init__(self, value: _Listing) -> None:
        self.value = value

    def result(self) -> _Listing:
        return self.value


@dataclass
class _FanoutAdmin(_Admin):
    """Also answers ListConsumerGroups with scripted listings."""

    listings: list[_Listing] = field(default_factory=list)
    fanouts: list[float] = field(default_factory=list)

    def list_consumer_groups(self, request_timeout: float) -> _Future:
        self.fanouts.append(request_timeout)
        return _Future(self.listings.pop(0) if len(self.listings) > 1 else self.listings[0])


def _kafka_admin(fake: _FanoutAdmin) -> KafkaAdmin:
    admin = KafkaTransport(KafkaConfig("127.0.0.1:9", client_id="unit")).admin()
    admin._admin = fake  # type: ignore[assignment]  # noqa: SLF001 - librdkafka's replaced
    admin._controller = ControllerGuard(fake)  # noqa: SLF001
    return admin


def test_list_groups_never_starts_the_fanout_while_a_broker_is_dead(
    live: _Broker, dead: _Broker
) -> None:
    """Chaos run 5: ListConsumerGroups waiting for a dead broker spun rdk:main at
    ~51,000 wakeups/s for the whole outage; the call must not even start."""
    fake = _FanoutAdmin({1: dead, 2: live, 3: live}, [2], listings=[_Listing(["a"], [])])
    admin = _kafka_admin(fake)
    with pytest.raises(TransportError, match=r"broker\(s\) 1 unreachable"):
        admin.list_groups("", timeout_s=0.5)
    assert fake.fanouts == []
    fake.brokers = {2: live, 3: live}
    assert admin.list_groups("", timeout_s=5) == ["a"]
    assert fake.fanouts and max(fake.fanouts) <= 5.0  # bounded attempts


def test_list_groups_with_a_broker_missing_is_an_error_not_a_shorter_list(live: _Broker) -> None:
    timed_out = KafkaException(KafkaError(KafkaError._TIMED_OUT, "ListGroups timed out"))  # noqa: SLF001
    refused = KafkaException(KafkaError(KafkaError.CLUSTER_AUTHORIZATION_FAILED, "denied"))
    fake = _FanoutAdmin(
        {1: live}, [1], listings=[_Listing(["a"], [timed_out]), _Listing(["a", "b"], [])]
    )
    admin = _kafka_admin(fake)
    assert admin.list_groups("", timeout_s=5) == ["a", "b"]  # a timeout is retried
    assert len(fake.fanouts) == 2
    fake.listings = [_Listing(["a"], [refused])]
    with pytest.raises(TransportError, match="listing would be incomplete"):
        admin.list_groups("", timeout_s=5)


def test_list_groups_reads_the_bare_kafka_errors_of_a_listing(live: _Broker) -> None:
    """ListConsumerGroupsResult.errors holds KafkaError objects, not exceptions: the
    timeout check raised AttributeError on them (seen while brokers were killed)."""
    timed_out = KafkaError(KafkaError._TIMED_OUT, "ListGroups timed out")  # noqa: SLF001
    refused = KafkaError(KafkaError.CLUSTER_AUTHORIZATION_FAILED, "denied")
    fake = _FanoutAdmin(
        {1: live}, [1], listings=[_Listing(["a"], [timed_out]), _Listing(["a", "b"], [])]
    )
    admin = _kafka_admin(fake)
    assert admin.list_groups("", timeout_s=5) == ["a", "b"]  # a timeout is retried
    fake.listings = [_Listing(["a"], [refused])]
    with pytest.raises(TransportError, match="listing would be incomplete"):
        admin.list_groups("", timeout_s=5)
