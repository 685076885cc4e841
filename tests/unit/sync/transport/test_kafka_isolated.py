"""librdkafka's abort is contained in the admin worker process (docs/librdkafka-abort.md).

librdkafka 2.16.0 aborts the process (``rd_kafka_enq_once_del_source_return: Assertion
'eonce->refcnt > 0' failed``) when a coordinator-routed admin request loses its broker. No
broker is needed to stand for that here: the worker is sent the SIGABRT that ``abort()``
raises, while a call waits in it. The caller must get a ``TransportError`` (as for any Kafka
failure), survive, and be served by a new worker on its next call.
"""

from __future__ import annotations

import os
import resource
import signal
import threading
from collections.abc import Iterator

import pytest

from sync._errors import TransportError
from sync.transport._base import KafkaConfig
from sync.transport._kafka_isolated import IsolatedAdmin

#: Nothing listens there: a call waits out its request timeout inside the worker.
UNREACHABLE = "127.0.0.1:9"


@pytest.fixture
def no_core_dumps() -> Iterator[None]:
    """The aborted worker (a child: it inherits the limit) leaves no core file behind."""
    soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
    resource.setrlimit(resource.RLIMIT_CORE, (0, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_CORE, (soft, hard))


@pytest.mark.usefixtures("no_core_dumps")
def test_an_aborted_admin_worker_is_a_transport_error_and_is_replaced() -> None:
    admin = IsolatedAdmin(KafkaConfig(UNREACHABLE, client_id="unit"))
    try:
        admin.start()
        first = admin._proc  # noqa: SLF001 - the worker under test
        assert first is not None
        # librdkafka's abort() while the call waits for the (unreachable) coordinator.
        abort = threading.Timer(0.5, os.kill, (first.pid, signal.SIGABRT))
        abort.start()
        try:
            with pytest.raises(TransportError, match=r"admin worker died \(exit status -6\)"):
                admin.describe_group("g", timeout_s=30)
        finally:
            abort.cancel()
        assert admin.worker_deaths == 1
        assert first.poll() == -signal.SIGABRT
        # The next call starts a new worker, which answers (here: Kafka's own failure).
        with pytest.raises(TransportError) as answered:
            admin.describe_group("g", timeout_s=0.5)
        assert "admin worker" not in str(answered.value)
        assert admin.worker_deaths == 1
        second = admin._proc  # noqa: SLF001
        assert second is not None and second.pid != first.pid and second.poll() is None
    finally:
        admin.close()
    assert second.poll() is not None  # closed with its owner


@pytest.fixture
def busy_descriptors() -> Iterator[None]:
    """Descriptors 0..~1100 taken, as in a process with many clients and connections: the
    next pipe's descriptors are past ``select()``'s limit of 1024."""
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        yield
    finally:
        for fd in held:
            os.close(fd)


@pytest.mark.usefixtures("busy_descriptors")
def test_the_worker_is_served_through_descriptors_past_1024() -> None:
    """The last full run failed with ``filedescriptor out of range in select()``."""
    admin = IsolatedAdmin(KafkaConfig(UNREACHABLE, client_id="unit"))
    try:
        admin.start()
        proc = admin._proc  # noqa: SLF001 - the worker under test
        assert proc is not None and proc.stdout is not None
        assert proc.stdout.fileno() >= 1024
        with pytest.raises(TransportError) as answered:  # Kafka's own failure, answered
            admin.describe_group("g", timeout_s=0.5)
        assert "admin worker" not in str(answered.value)
    finally:
        admin.close()
