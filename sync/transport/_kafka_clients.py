"""Every librdkafka client we create is named after its kind and owner, and its threads are
mapped to that name (issue 11: a CPU storm in one client's ``rdk:main`` thread must be
attributable).

librdkafka names its threads ``rdk:main`` / ``rdk:broker<N>`` whatever the client, so a
hot thread in ``/proc/<pid>/task`` says nothing about which of a sidecar's dozen clients it
belongs to. Two things fix that, both here, in one place:

* :func:`client_id` gives each client ``<base>.<kind>.<owner>`` as ``client.id`` (``kind``:
  producer, txn-producer, consumer, group, admin; ``owner``: the module outside
  ``sync.transport`` that asked for the client, e.g. ``sync.table._reader``). Brokers log
  and account requests by it, and the rdkafka statistics carry it as ``client_id``.
* :func:`created` builds the client with the threads it starts recorded: ``rd_kafka_new``
  starts the client's ``rdk:main`` (and its bootstrap brokers' threads) before it returns,
  so the threads that appear while it runs are that client's. Client creation is
  serialised by a lock so two clients built at once cannot claim each other's threads
  (creation is rare: a few dozen per sidecar life). The mapping is logged once per client
  (``kafka client <id> (pid P): threads tid=comm ...``) and kept in
  :func:`client_threads` for in-process tools.

``tests/repro/thread_storm.py`` reads those log lines to name the client of a hot thread.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from ._kafka_log import ConnectionFailureFilter

logger = logging.getLogger(__name__)
#: librdkafka's own log lines go through Python logging, not straight to stderr (a client's
#: reconnect failures: one WARNING a minute, see :mod:`._kafka_log`).
RDKAFKA_LOG = logging.getLogger("sync.librdkafka")
RDKAFKA_LOG.addFilter(ConnectionFailureFilter())

__all__ = ["client_id", "client_threads", "created", "fetched"]

_T = TypeVar("_T")
_TASKS = "/proc/self/task"
_lock = threading.Lock()
#: tid -> client id of every librdkafka thread seen at a client's creation.
_threads: dict[int, str] = {}
#: Modules that build clients on someone else's behalf (never named as the owner).
_PLUMBING = ("sync.transport", "confluent_kafka", "contextlib", "functools", "threading")


def _owner() -> str:
    """The module, outside the transport, that asked for the client."""
    frame = sys._getframe(1)  # noqa: SLF001 - the only way to name a caller cheaply
    while frame is not None:
        module = str(frame.f_globals.get("__name__", ""))
        if module and not module.startswith(_PLUMBING):
            return module
        frame = frame.f_back  # type: ignore[assignment]
    return "unknown"


def client_id(base: str, kind: str, owner: str | None = None) -> str:
    """``<base>.<kind>.<owner>``: the ``client.id`` of one librdkafka client."""
    return f"{base}.{kind}.{owner or _owner()}"


def _rdk_threads() -> dict[int, str]:
    out: dict[int, str] = {}
    try:
        tids = os.listdir(_TASKS)
    except OSError:  # not Linux: nothing to map
        return out
    for tid in tids:
        try:
            with open(f"{_TASKS}/{tid}/comm", encoding="utf-8") as fh:
                comm = fh.read().strip()
        except OSError:
            continue
        if comm.startswith("rdk:"):
            out[int(tid)] = comm
    return out


def created(name: str, build: Callable[[], _T]) -> _T:
    """``build()`` (which creates the librdkafka client named ``name``), recording and
    logging the threads it started."""
    with _lock:
        before = _rdk_threads()
        client = build()
        new = {tid: comm for tid, comm in _rdk_threads().items() if tid not in before}
        # A tid is reused only after its thread ended: forget what ended.
        for tid in [t for t in _threads if t not in before]:
            del _threads[tid]
        for tid in new:
            _threads[tid] = name
    logger.info(
        "kafka client %s (pid %d): threads %s",
        name,
        os.getpid(),
        " ".join(f"{tid}={comm}" for tid, comm in sorted(new.items())) or "none",
    )
    return client


def client_threads() -> dict[int, str]:
    """tid -> client id of the librdkafka threads recorded at client creation."""
    with _lock:
        return dict(_threads)


def fetched(consumer: Any, max_messages: int, timeout_s: float) -> list[Any]:
    """What a librdkafka consumer has fetched, up to ``max_messages``: at once if any is
    ready, else the first record within ``timeout_s`` plus what came with it (librdkafka's
    batch consume waits for the whole timeout unless the batch fills, which would add the
    timeout to every tailing read; poll() returns on arrival). Raises what librdkafka
    raises: the caller translates it."""
    batch: list[Any] = consumer.consume(num_messages=max_messages, timeout=0)
    if batch:
        return batch
    first = consumer.poll(timeout_s)
    if first is None:
        return []
    batch = [first]
    if max_messages > 1:
        batch.extend(consumer.consume(num_messages=max_messages - 1, timeout=0))
    return batch
