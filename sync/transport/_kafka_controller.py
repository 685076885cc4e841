"""Controller-routed Admin API calls without librdkafka's busy wait on a dead controller.

librdkafka (2.16.0, the newest in a confluent-kafka release) sends ``CreateTopics``,
``DeleteTopics``, ``CreatePartitions``, ``DescribeTopics``, ``DescribeConfigs`` and
``IncrementalAlterConfigs`` to the broker its last Metadata response named controller
(``rk_controllerid``; a KRaft broker names a random live broker). If that broker is down,
the admin worker waits for it to come UP by registering for *any* broker state change
(``rd_kafka_broker_controller_async``); every lookup asks the dead broker's thread to
connect again, which changes its state, which wakes the waiter: the ``rdk:main`` and
``rdk:broker<N>`` threads wake each other ~50,000 times a second each, for the whole
request timeout, and the next call does the same, because nothing refreshes the
controller id while it is merely down (only an unknown one triggers a refresh). Under
traffic (describe_topic / topic_overrides called every few hundred ms) that is a
permanent storm while the broker is down: docs/librdkafka-abort.md ("CPU storm"),
reproducer ``tests/repro/broker_kill_storm.py``. No librdkafka setting changes it
(``reconnect.backoff.ms``, ``topic.metadata.refresh.interval.ms``,
``socket.connection.setup.timeout.ms`` measured).

:class:`ControllerGuard` never lets such a call start while the controller it would wait
for is unreachable. Measured (Kafka 4.1.1 KRaft, 3 brokers): every
Metadata response names a *random* live-registered broker as controller — also a broker
killed 30 s earlier — and librdkafka takes that id from *any* Metadata response, including
the ones DescribeTopics itself returns. So, one call at a time per client (a lock), right
before the call: ask for Metadata (which sets librdkafka's controller id), check that the
broker it names accepts a TCP connection (a positive check is trusted for
``_VERIFIED_FOR_S``), and ask again, backing off, until a reachable controller is named or
the caller's deadline passes (:class:`~sync._errors.TransportError`, as any Kafka failure).
A controller that dies after the check can still make that one call spin until its
timeout; read-only calls are therefore made in attempts of at most 10 s.

The same wait exists for the one *fan-out* call we make, ``ListConsumerGroups``
(``KafkaAdmin.list_groups``): librdkafka sends one ``ListGroups`` to every broker the
Metadata names and waits for each to come UP in the same way (chaos run 5, found with
``tests/repro/thread_storm.py``: the messaging engine's admin client, ``rdk:main``
~51,000 wakeups/s against ``rdk:broker1`` while broker 1 was dead, its Python caller in
``list_groups``). :meth:`ControllerGuard.every_broker` starts such a call only once fresh
Metadata names brokers that all accept a TCP connection; a call that was already waiting
when a broker died is bounded by short attempts (``KafkaAdmin``).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from confluent_kafka import KafkaException

from sync._errors import TransportError

logger = logging.getLogger(__name__)

__all__ = ["FANOUT_METADATA_TOPIC", "ControllerGuard"]

#: The topic a fan-out call's Metadata request asks about (any answer lists every broker;
#: the admin client never auto-creates it).
FANOUT_METADATA_TOPIC = "__consumer_offsets"

#: How long a successful reachability check of the controller is trusted.
_VERIFIED_FOR_S = 1.0
#: TCP connect timeout of one check.
_PROBE_TIMEOUT_S = 1.0
#: Back-off between Metadata refreshes while no reachable controller is named.
_FIRST_DELAY_S = 0.05
_MAX_DELAY_S = 1.0


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=_PROBE_TIMEOUT_S):
            return True
    except OSError:
        return False


class ControllerGuard:
    """Serialises one AdminClient's controller-routed calls and starts each one only
    while the controller librdkafka will send it to is reachable."""

    def __init__(self, admin: Any) -> None:
        self._admin = admin
        #: Held from the Metadata refresh to the end of the call: another Metadata
        #: response in between could name another (dead) controller.
        self.lock = threading.RLock()
        #: (host, port) -> monotonic time until which it counts as reachable.
        self._verified: dict[tuple[str, int], float] = {}
        #: Metadata requests that named an unreachable controller (for tests and docs).
        self.unreachable_named = 0

    def _reachable(self, host: str, port: int) -> bool:
        now = time.monotonic()
        if self._verified.get((host, port), 0.0) > now:
            return True
        if _reachable(host, port):
            self._verified[(host, port)] = now + _VERIFIED_FOR_S
            return True
        self._verified.pop((host, port), None)
        return False

    @contextmanager
    def reachable(self, topic: str | None, deadline: float, what: str) -> Iterator[None]:
        """Hold the client's controller calls for the ``with`` block, entered only once
        the controller named by a fresh Metadata response (about ``topic``) is reachable."""
        if not self.lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            raise TransportError(f"{what}: timed out waiting for this client's other calls")
        try:
            self._settle(topic, deadline, what)
            yield
        finally:
            self.lock.release()

    @contextmanager
    def every_broker(self, deadline: float, what: str) -> Iterator[None]:
        """Hold the client's guarded calls for the ``with`` block, entered only once every
        broker named by a fresh Metadata response is reachable (for a fan-out call that
        waits for each of them)."""
        if not self.lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            raise TransportError(f"{what}: timed out waiting for this client's other calls")
        try:
            self._settle_all(deadline, what)
            yield
        finally:
            self.lock.release()

    def _settle_all(self, deadline: float, what: str) -> None:
        def dead_brokers(metadata: Any) -> str | None:
            brokers = metadata.brokers
            dead = sorted(
                node for node, b in brokers.items() if not self._reachable(b.host, b.port)
            )
            if brokers and not dead:
                return None
            return ", ".join(map(str, dead)) or "all (metadata named none)"

        self._wait_until(
            FANOUT_METADATA_TOPIC,
            deadline,
            what,
            dead_brokers,
            lambda missing: f"Kafka broker(s) {missing} unreachable",
        )

    def _settle(self, topic: str | None, deadline: float, what: str) -> None:
        def dead_controller(metadata: Any) -> str | None:
            # Any live broker answers; the response also sets librdkafka's controller id,
            # the one the call will wait for.
            node = metadata.controller_id
            broker = metadata.brokers.get(node) if node is not None and node >= 0 else None
            if broker is not None and self._reachable(broker.host, broker.port):
                return None
            return f"broker {node}"

        self._wait_until(
            topic,
            deadline,
            what,
            dead_controller,
            lambda named: f"no reachable Kafka controller (last named: {named})",
        )

    def _wait_until(
        self,
        topic: str | None,
        deadline: float,
        what: str,
        unreachable: Callable[[Any], str | None],
        refusal: Callable[[str], str],
    ) -> None:
        """Ask for fresh Metadata (about ``topic``), backing off, until ``unreachable``
        names nothing; at the deadline raise ``TransportError`` with ``refusal(last)``."""
        delay = _FIRST_DELAY_S
        last = "none"
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TransportError(
                    f"{what}: {refusal(last)}; not waiting for it inside librdkafka"
                )
            try:
                metadata = self._admin.list_topics(topic, timeout=max(0.1, min(remaining, 5.0)))
            except KafkaException as exc:
                last = f"unknown (metadata failed: {exc})"
            else:
                found = unreachable(metadata)
                if found is None:
                    return
                last = found
                self.unreachable_named += 1
                logger.debug("%s: metadata named unreachable %s", what, last)
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, _MAX_DELAY_S)
