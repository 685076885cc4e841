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

from sync._errors import TransportError
from sync.transport._kafka_controller import ControllerGuard


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
