"""Coordinator-routed Admin API calls in a disposable worker process.

librdkafka (up to at least 2.16.0, the one in confluent-kafka 2.16.1) aborts the whole
process with ``rdkafka_queue.h:1086: rd_kafka_enq_once_del_source_return: Assertion
'eonce->refcnt > 0' failed`` when a coordinator-routed Admin request
(``DescribeConsumerGroups``, ``DeleteGroups``, ``ListConsumerGroupOffsets``,
``AlterConsumerGroupOffsets``) fails to be sent because the
coordinator's connection just dropped, e.g. the broker was killed: the error path in
``rd_kafka_admin_coord_request()`` frees the request's ``eonce`` while its caller still
uses it (upstream librdkafka PR #5397, unreleased). ``tests/repro/librdkafka_abort.py``
reproduces it in the first broker kill; docs/librdkafka-abort.md has the details.

No Python code can catch an ``abort()``. So these calls run in a child process that owns
its own AdminClient and answers one JSON line per request on stdout: when librdkafka kills
it, the caller gets a :class:`TransportError` (like any other Kafka failure) and the next
call starts a fresh worker. The child exits by itself when its stdin closes, i.e. when the
parent process is gone, so it never outlives the sidecar.
"""

from __future__ import annotations

import json
import logging
import os
import select
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from sync._errors import TransportError

from ._base import GroupDescription, GroupMember, KafkaConfig

logger = logging.getLogger(__name__)

__all__ = ["IsolatedAdmin"]

#: Extra seconds the caller waits beyond the request's own timeout before it gives the
#: worker up for hung and replaces it.
_GRACE_S = 10.0
#: What a worker needs before its first answer (interpreter, confluent-kafka import).
_START_S = 30.0
#: How long a worker that stopped answering may take to exit before it counts as hung.
_REAP_S = 1.0


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        try:
            proc.stdin.close()  # type: ignore[union-attr]
            proc.wait(2.0)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()


class IsolatedAdmin:
    """``describe_group``/``delete_group`` through a worker process (thread-safe)."""

    def __init__(self, config: KafkaConfig) -> None:
        self._config = config
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._finalizer: Callable[[], object] | None = None
        #: Workers lost to a crash or hang (for tests and metrics).
        self.worker_deaths = 0

    # -- the calls ------------------------------------------------------------------------
    def describe_group(self, group_id: str, timeout_s: float = 10.0) -> GroupDescription:
        """The group's state and members (``Dead`` with no members if unknown).

        Raises:
            TransportError: Kafka failed, or the worker died doing it.
        """
        raw = self._call({"op": "describe_group", "group": group_id, "timeout_s": timeout_s})
        members = tuple(
            GroupMember(
                member_id=m["member_id"],
                client_id=m["client_id"],
                host=m["host"],
                assignment={t: tuple(ps) for t, ps in m["assignment"].items()},
            )
            for m in raw["members"]
        )
        return GroupDescription(raw["group_id"], raw["state"], members)

    def delete_group(self, group: str, timeout_s: float = 30.0) -> None:
        """Delete a consumer group (no error if it does not exist)."""
        self._call({"op": "delete_group", "group": group, "timeout_s": timeout_s})

    def group_positions(
        self, group: str, topic: str, timeout_s: float = 30.0
    ) -> dict[int, tuple[int, str]]:
        """``(offset, metadata)`` per partition of ``topic`` the group committed
        (``{}`` for an unknown group)."""
        raw = self._call(
            {"op": "group_positions", "group": group, "topic": topic, "timeout_s": timeout_s}
        )
        return {int(p): (int(o), str(m)) for p, (o, m) in raw.items()}

    def alter_group_positions(
        self,
        group: str,
        topic: str,
        positions: Mapping[int, tuple[int, str]],
        timeout_s: float = 30.0,
    ) -> None:
        """Set the group's committed ``(offset, metadata)`` per partition of ``topic``."""
        self._call(
            {
                "op": "alter_group_positions",
                "group": group,
                "topic": topic,
                "positions": {str(p): [o, m] for p, (o, m) in positions.items()},
                "timeout_s": timeout_s,
            }
        )

    def start(self) -> None:
        """Start the worker now, so the first call does not wait for it (a new Python
        process takes 0.5 s of CPU, seconds of wall time on a loaded machine).

        Raises:
            TransportError: the worker did not start.
        """
        with self._lock:
            self._worker()

    def close(self) -> None:
        """Stop the worker (a later call starts a new one)."""
        with self._lock:
            self._drop()

    # -- internals ---------------------------------------------------------------------
    def _call(self, request: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            proc = self._worker()
            assert proc.stdin is not None and proc.stdout is not None  # noqa: S101
            limit = float(request["timeout_s"]) + _GRACE_S
            try:
                proc.stdin.write(json.dumps(request).encode("utf-8") + b"\n")
                proc.stdin.flush()
                line = self._read_line(proc, limit)
            except (OSError, ValueError) as exc:
                line = b""
                logger.debug("admin worker pipe failed: %s", exc)
            if not line:
                try:
                    # A worker that aborted has closed its stdout an instant before the
                    # kernel lets us reap it: wait for its status, or it reads as "hung".
                    code: int | None = proc.wait(_REAP_S)
                except subprocess.TimeoutExpired:
                    code = None
                self._drop()
                self.worker_deaths += 1
                what = "hung" if code is None else f"died (exit status {code})"
                logger.warning(
                    "Kafka admin worker %s during %s %s; a new one starts with the next call",
                    what,
                    request["op"],
                    request.get("group"),
                )
                raise TransportError(
                    f"{request['op']} {request.get('group')!r} failed: the admin worker {what} "
                    "(librdkafka aborts on coordinator loss; see docs/librdkafka-abort.md)"
                )
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise TransportError(answer["error"])
        result: dict[str, Any] = answer["ok"]
        return result

    @staticmethod
    def _read_line(proc: subprocess.Popen[bytes], limit_s: float) -> bytes:
        assert proc.stdout is not None  # noqa: S101
        deadline = time.monotonic() + limit_s
        fd = proc.stdout.fileno()
        # poll(), not select(): a process with many clients and connections has
        # descriptors past select()'s 1024 ("filedescriptor out of range in select()").
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        chunks: list[bytes] = []
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return b""
            if not poller.poll(remaining * 1000):
                return b""
            chunk = os.read(fd, 65536)
            if not chunk:
                return b""
            chunks.append(chunk)
            if chunk.endswith(b"\n"):
                return b"".join(chunks)

    def _worker(self) -> subprocess.Popen[bytes]:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        self._drop()
        config = {
            "bootstrap.servers": self._config.bootstrap_servers,
            "client.id": f"{self._config.client_id}.admin-worker",
            # Quiet: its connection errors are the parent's TransportErrors already.
            "log_level": 2,
            **{k: v for k, v in self._config.extra.items()},
        }
        proc = subprocess.Popen(  # noqa: S603 - our own interpreter and module
            [sys.executable, "-m", "sync.transport._admin_worker", json.dumps(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,  # librdkafka's assertion text goes to our stderr/log
            bufsize=0,
            start_new_session=False,
        )
        hello = self._read_line(proc, _START_S)
        if hello.strip() != b'{"ready": true}':
            _stop(proc)
            raise TransportError("the Kafka admin worker did not start")
        self._proc = proc
        self._finalizer = weakref.finalize(self, _stop, proc)
        return proc

    def _drop(self) -> None:
        if self._finalizer is not None:
            self._finalizer()  # stops the process once
            self._finalizer = None
        elif self._proc is not None:
            _stop(self._proc)
        self._proc = None
