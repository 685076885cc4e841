"""A seeded, bounded global write load on both clusters (docs/geo-design.md §5).

Per cluster one writer thread, about ``rate`` global writes a second through the cluster's
sidecars' admin REST (``POST …/maxConsumers?isGlobal=true``, ten writes on one sidecar,
then ten on the next), half to keys both clusters write (``shared``), half to keys only
this cluster writes. Every value is a unique token (the policy's integer), so each write
can be found in the topics afterwards. A write is *acknowledged* when the REST call
answered 2xx; anything else (an error status, a timeout, no connection) is not.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from sync import PolicyTarget, TopicName

from ._cluster import CLUSTERS, GeoCluster

logger = logging.getLogger(__name__)

NAMESPACE = "geo/ns"
#: The policy field a token is written to (REST ``maxConsumers``).
VALUE_FIELD = "maxConsumerPerTopic"
VALUE_REST = "maxConsumers"
#: Tokens of cluster i are i * TOKEN_BLOCK + n (n < TOKEN_BLOCK): unique in one load.
TOKEN_BLOCK = 10_000_000
#: Writes on one sidecar before the writer moves to the cluster's next one.
WRITES_PER_SIDECAR = 10


@dataclass(frozen=True)
class LoadConfig:
    """How much to write: ``rate`` writes/s per cluster, to ``shared`` keys of both and
    ``own`` keys per cluster; ``seed`` picks keys; ``timeout_s`` bounds one REST call."""

    seed: int
    tag: str
    rate: float = 20.0
    shared: int = 20
    own: int = 10
    #: Longer than a sidecar's write deadline (30 s), so its answer (503) is seen.
    timeout_s: float = 45.0


@dataclass(frozen=True)
class Write:
    """One REST write: where, which key (topic), which token, how it ended."""

    cluster: str
    sidecar: str
    topic: str
    token: int
    status: int  # 0: no answer (timeout, refused connection)
    at: float

    @property
    def acknowledged(self) -> bool:
        return 200 <= self.status < 300


@dataclass
class _Writer:
    cluster: str
    index: int
    writes: list[Write] = field(default_factory=list)


def topic_names(config: LoadConfig) -> dict[str, list[str]]:
    """The topics (keys) each cluster writes: the shared ones and its own."""
    shared = [f"{config.tag}-shared-{i:02d}" for i in range(config.shared)]
    return {c: shared + [f"{config.tag}-{c}-{i:02d}" for i in range(config.own)] for c in CLUSTERS}


def key_of(topic: str) -> str:
    """The global table's key of a topic of the load's namespace."""
    name = TopicName.parse(f"persistent://{NAMESPACE}/{topic}")
    return PolicyTarget.for_topic(name, is_global=True).key


def _call(method: str, url: str, body: object, timeout_s: float) -> int:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(  # noqa: S310 - loopback URLs built here
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as resp:  # noqa: S310
            resp.read()
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        exc.read()
        return int(exc.code)
    except (urllib.error.URLError, OSError):
        return 0


class GlobalLoad:
    """The load's writer threads (:meth:`start`, :meth:`stop`) and what they wrote."""

    def __init__(self, geo: GeoCluster, config: LoadConfig) -> None:
        self.geo = geo
        self.config = config
        self.topics = topic_names(config)
        self._writers = [_Writer(c, i + 1) for i, c in enumerate(CLUSTERS)]
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def create_topics(self) -> None:
        """Create every topic of the load in each cluster that writes it (as namespace
        replication creates a topic everywhere), a few at a time (the sidecar commits
        concurrent metadata writes together)."""
        urls = [
            f"{self.geo.endpoints[cluster].sidecars[0]}/admin/v2/persistent/{NAMESPACE}/{topic}"
            for cluster, topics in self.topics.items()
            for topic in topics
        ]
        with ThreadPoolExecutor(max_workers=8) as pool:
            answers = list(pool.map(lambda url: (url, _call("PUT", url, None, 30.0)), urls))
        for url, status in answers:
            if status not in (204, 409):
                raise AssertionError(f"creating {url}: HTTP {status}")

    def start(self) -> GlobalLoad:
        for writer in self._writers:
            thread = threading.Thread(
                target=self._run, args=(writer,), name=f"geo-load-{writer.cluster}", daemon=True
            )
            thread.start()
            self._threads.append(thread)
        return self

    def halt(self) -> None:
        """Write nothing more (a call under way still ends: see :meth:`join`)."""
        self._stop.set()

    def stop(self) -> None:
        """Stop writing; returns once every thread's last call has ended."""
        self.halt()
        for thread in self._threads:
            thread.join(self.config.timeout_s + 30)
            if thread.is_alive():
                raise AssertionError(f"{thread.name} did not stop")

    def _run(self, writer: _Writer) -> None:
        config = self.config
        rng = random.Random(f"{config.seed}-{writer.cluster}")
        sidecars = self.geo.endpoints[writer.cluster].sidecars
        shared, own = (
            self.topics[writer.cluster][: config.shared],
            self.topics[writer.cluster][config.shared :],
        )
        interval = 1.0 / config.rate
        next_at = time.monotonic()
        n = 0
        while not self._stop.is_set():
            topic = rng.choice(shared if n % 2 == 0 else own)
            sidecar = sidecars[(n // WRITES_PER_SIDECAR) % len(sidecars)]
            token = writer.index * TOKEN_BLOCK + n
            url = f"{sidecar}/admin/v2/persistent/{NAMESPACE}/{topic}/{VALUE_REST}?isGlobal=true"
            status = _call("POST", url, token, config.timeout_s)
            writer.writes.append(
                Write(writer.cluster, sidecar, topic, token, status, time.monotonic())
            )
            n += 1
            next_at += interval
            now = time.monotonic()
            if next_at < now - 1.0:  # fell behind (an outage): do not burst to catch up
                next_at = now
            self._stop.wait(max(0.0, next_at - now))

    @property
    def writes(self) -> list[Write]:
        return [w for writer in self._writers for w in writer.writes]

    def acknowledged(self) -> list[Write]:
        return [w for w in self.writes if w.acknowledged]

    def counts(self) -> dict[str, dict[str, int]]:
        """Per cluster: writes tried, acknowledged, and refused or unanswered."""
        out: dict[str, dict[str, int]] = {}
        for writer in self._writers:
            acked = sum(w.acknowledged for w in writer.writes)
            out[writer.cluster] = {
                "tried": len(writer.writes),
                "acknowledged": acked,
                "failed": len(writer.writes) - acked,
            }
        return out


def statuses(writes: Sequence[Write]) -> dict[int, int]:
    """How many writes ended with each status (0: no answer)."""
    out: dict[int, int] = {}
    for w in writes:
        out[w.status] = out.get(w.status, 0) + 1
    return dict(sorted(out.items()))
