"""Concurrent admin writers: two through the REST API, one through ``policyctl``.

All three write the same keys, each its own field, so their read-modify-writes of one
record race: a lost update shows as a field whose final value is older than its last
acknowledged write. Values only grow per (key, field); a write that failed may still have
landed, so the final value must be the last acknowledged one or one attempted after it.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass, field

from ._world import WRITE_NAMESPACE, World
from .procs import BIN

#: (REST policy path, TopicPolicies field) of each writer; None path: policyctl
WRITERS: tuple[tuple[str | None, str], ...] = (
    ("maxConsumers", "maxConsumerPerTopic"),
    ("maxProducers", "maxProducerPerTopic"),
    (None, "messageTTLInSeconds"),
)


def key_topic(i: int) -> str:
    return f"persistent://{WRITE_NAMESPACE}/k{i}"


@dataclass
class FieldLog:
    """What one writer did to one field of one key."""

    acked: int | None = None
    #: values attempted without an acknowledgement after the last acknowledged one
    unacked_after: set[int] = field(default_factory=set)


@dataclass
class WriterStats:
    name: str
    acked: int = 0
    failed: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    log: dict[tuple[int, str], FieldLog] = field(default_factory=dict)
    #: REST answers 5xx other than 503 with Retry-After: a valid write must never get one
    #: (a sidecar that cannot write now says so with 503 and when to retry)
    bad_5xx: list[str] = field(default_factory=list)

    def record(self, key: int, fld: str, value: int, ok: bool, why: str = "") -> None:
        entry = self.log.setdefault((key, fld), FieldLog())
        if ok:
            self.acked += 1
            entry.acked = value
            entry.unacked_after.clear()
        else:
            self.failed += 1
            entry.unacked_after.add(value)
            self.errors[why] = self.errors.get(why, 0) + 1


class Writer:
    def __init__(self, world: World, index: int) -> None:
        self.world = world
        self.path, self.field = WRITERS[index]
        self.rng = world.rng(f"writer-{index}")
        name = f"rest:{self.path}" if self.path else "policyctl"
        self.stats = WriterStats(name)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self) -> None:
        self._thread.join(180)

    def _run(self) -> None:
        value = 0
        while not self.world.stop.is_set():
            value += 1
            key = self.rng.randrange(self.world.config.keys)
            ok, why = self._rest(key, value) if self.path else self._policyctl(key, value)
            self.stats.record(key, self.field, value, ok, why)
            if not ok:
                self.world.sleep(0.2)
            elif self.path:
                self.world.sleep(self.rng.uniform(0.02, 0.1))

    def _rest(self, key: int, value: int) -> tuple[bool, str]:
        sidecar = self.world.pick(self.rng)
        url = f"{sidecar.url}/admin/v2/{key_topic(key).replace('://', '/')}/{self.path}"
        req = urllib.request.Request(  # noqa: S310 - loopback
            url, data=json.dumps(value).encode(), method="POST",
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
        try:
            # 60 s: the Pulsar admin client's default read timeout; a sidecar's own write
            # deadline is 30 s, plus the hop to the fence holder.
            with urllib.request.urlopen(req, timeout=60) as resp:  # noqa: S310
                return resp.status == 204, f"HTTP {resp.status}"
        except urllib.error.HTTPError as err:
            reason = err.read()[:90].decode(errors="replace")
            if err.code >= 500 and (err.code != 503 or not err.headers.get("Retry-After")):
                retry = "" if err.headers.get("Retry-After") else " (no Retry-After)"
                self.stats.bad_5xx.append(
                    f"{self.world.now():.1f}s POST {url.split('/admin/v2/', 1)[-1]}: "
                    f"{err.code}{retry} {reason}"
                )
            return False, f"HTTP {err.code} {reason}"
        except OSError as exc:
            return False, type(exc).__name__

    def _policyctl(self, key: int, value: int) -> tuple[bool, str]:
        env = dict(os.environ, KAFKA_BOOTSTRAP_SERVERS=self.world.cluster.bootstrap)
        doc = json.dumps({self.field: value})
        try:
            out = subprocess.run(  # noqa: S603 - our own program
                [str(BIN / "policyctl"), "set", key_topic(key), "--json", doc],
                capture_output=True, text=True, env=env, timeout=90, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return False, "policyctl timeout"
        if out.returncode == 0:
            return True, ""
        lines = out.stderr.strip().splitlines()
        why = lines[-1][:160] if lines else "no message"
        return False, f"policyctl exit {out.returncode}: {why}"


def lost_writes(
    writers: list[Writer], final: dict[int, dict[str, object]]
) -> list[str]:
    """Every (key, field) whose final value is neither its last acknowledged write nor a
    value attempted after it."""
    lost = []
    for writer in writers:
        for (key, fld), entry in sorted(writer.stats.log.items()):
            if entry.acked is None:
                continue
            got = final.get(key, {}).get(fld)
            if got != entry.acked and got not in entry.unacked_after:
                lost.append(f"{key_topic(key)} {fld}: final {got!r}, last acked {entry.acked}")
    return lost
