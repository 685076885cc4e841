"""What a geo fault run checks after the heal (docs/geo-design.md §5).

- **Nothing acknowledged is lost**: every acknowledged token is in a committed record of its
  origin cluster's ``policy-sync-global-events``, under its key.
- **One outcome**: the expected state is last writer wins over both origin topics, folded by
  the one rule (:class:`sync.geo.GlobalTable` reading each origin, merged with
  :meth:`sync.geo.LwwTable.offer`), and every sidecar of both clusters reports its digest
  (``global.digest`` of ``/policy-sync/v1/digest``); each key's winner is at least every
  acknowledged write of the key.
- **The bound**: the time from the start of the heal until all four digests became equal to
  the expected one (polled every 100 ms from the heal on), a liveness figure, not a speed target.
- **Duplicates**: event ids MirrorMaker 2 copied more than once into a mirror (after a kill
  it re-copies from its last flushed offsets); counted, they must not change the outcome.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from sync import Codec, Policies
from sync.constants import GLOBAL_EVENTS_TOPIC, HEADER_EVENT_ID, SIDECAR_DIGEST_PATH
from sync.geo import GlobalTable, LwwTable, mirror_topic, policies_digest, policy_decoder, stamp_of
from sync.transport import KafkaConfig, KafkaTransport, Message, Transport

from ._cluster import CLUSTERS, GeoCluster
from ._load import VALUE_FIELD, Write, key_of

logger = logging.getLogger(__name__)

PARTITIONS = 4


def scan(transport: Transport, topic: str, timeout_s: float = 60.0) -> Iterator[Message]:
    """Every committed record of ``topic`` now, from its log start."""
    consumer = transport.consumer(read_committed=True)
    parts = list(range(PARTITIONS))
    try:
        consumer.assign(topic, consumer.start_offsets(topic, parts))
        end = consumer.end_offsets(topic, parts)
        deadline = time.monotonic() + timeout_s
        idle = 0
        while time.monotonic() < deadline:
            batch = consumer.consume(500, 0.5)
            yield from batch
            idle = 0 if batch else idle + 1
            positions = consumer.positions(topic, parts)
            if all(positions.get(p, -1) >= o for p, o in end.items() if o > 0) or idle >= 6:
                return
        raise AssertionError(f"{topic} not read to its end {end} within {timeout_s:.0f}s")
    finally:
        consumer.close()


@dataclass(frozen=True)
class Found:
    """Where a token was found in its origin topic."""

    key: str
    where: str
    stamp_key: tuple[int, bytes, str]


def tokens_in_origin(bootstrap: str, cluster: str) -> dict[tuple[str, int], Found]:
    """(key, token) -> its record in ``cluster``'s own global topic (committed records
    only). Keyed by both: a token is unique in one load, whose keys are its own."""
    decode = policy_decoder(Codec())
    out: dict[tuple[str, int], Found] = {}
    for msg in scan(KafkaTransport(KafkaConfig(bootstrap)), GLOBAL_EVENTS_TOPIC):
        key, stamp = msg.key(), stamp_of(msg)
        if key is None or stamp is None or stamp.cluster != cluster:
            continue
        try:
            policies = decode(key, msg.value())
        except Exception as exc:  # noqa: BLE001 - other tests' raw records are not policies
            logger.debug(
                "not a policy at %s[%s]@%s: %s", msg.topic(), msg.partition(), msg.offset(), exc
            )
            continue
        if policies is not None and VALUE_FIELD in policies:
            where = f"{msg.topic()}[{msg.partition()}]@{msg.offset()}"
            text = key.decode("utf-8", "replace")
            out[text, int(policies[VALUE_FIELD])] = Found(text, where, stamp.order_key())
    return out


def mirror_duplicates(bootstrap: str, origin: str, prefix: str) -> int:
    """Event ids of the load (keys holding ``prefix``) seen more than once in the mirror of
    ``origin`` at ``bootstrap``: how many extra copies MirrorMaker 2 made."""
    seen: Counter[bytes] = Counter()
    for msg in scan(KafkaTransport(KafkaConfig(bootstrap)), mirror_topic(origin)):
        key = msg.key() or b""
        if prefix.encode() not in key:
            continue
        for name, raw in msg.headers() or ():
            if name == HEADER_EVENT_ID and raw is not None:
                seen[bytes(raw)] += 1
    return sum(n - 1 for n in seen.values() if n > 1)


class Expected:
    """The expected global table: each origin topic read by its own :class:`GlobalTable`
    (no mirrors), merged by the one rule."""

    def __init__(self, geo: GeoCluster) -> None:
        decode = policy_decoder(Codec())
        self.tables = [
            GlobalTable(KafkaTransport(KafkaConfig(geo.endpoints[c].bootstrap)), c, [], decode)
            for c in CLUSTERS
        ]

    def __enter__(self) -> Expected:
        for table in self.tables:
            table.start()
        for table in self.tables:
            table.wait_ready(120)
        return self

    def __exit__(self, *exc: object) -> None:
        for table in self.tables:
            table.close()

    def merged(self, timeout_s: float = 30.0) -> LwwTable[Policies]:
        """Both origins read to their current ends, folded into one table."""
        merged: LwwTable[Policies] = LwwTable()
        for table in self.tables:
            table.readers[0].sync(timeout_s)
            for key, version in table.table.items():
                merged.offer(key, version.stamp, version.value)
        return merged


def global_digest(url: str) -> str | None:
    """A sidecar's ``global.digest`` (None: it does not answer 200 now)."""
    try:
        with urllib.request.urlopen(url + SIDECAR_DIGEST_PATH, timeout=10) as resp:  # noqa: S310
            return str(json.loads(resp.read())["global"]["digest"])
    except (urllib.error.URLError, OSError, KeyError, ValueError):
        return None


class DigestPoller:
    """Polls every sidecar's global digest every ``poll_s`` in a thread, from :meth:`start`
    (the start of the heal) on, and remembers when the digests last changed."""

    def __init__(self, sidecars: Sequence[str], poll_s: float = 0.1) -> None:
        self.sidecars = list(sidecars)
        self.poll_s = poll_s
        self._latest: tuple[float, tuple[str | None, ...]] = (0.0, ())
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="geo-digests", daemon=True)

    def start(self) -> DigestPoller:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def latest(self) -> tuple[float, tuple[str | None, ...]]:
        """(when the digests became what they are, what they are)."""
        with self._lock:
            return self._latest

    def _run(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            seen = tuple(global_digest(u) for u in self.sidecars)
            with self._lock:
                if seen != self._latest[1]:
                    self._latest = (now, seen)
            self._stop.wait(self.poll_s)


@dataclass(frozen=True)
class Convergence:
    """When all sidecars reported the expected digest (and kept it), counted from the heal."""

    bound_s: float
    digest: str
    merged: LwwTable[Policies]


def converge(
    poller: DigestPoller,
    expected: Callable[[], LwwTable[Policies]],
    healed_at: float,
    ceiling_s: float,
) -> Convergence:
    """Wait until every sidecar's global digest equals ``expected()``'s; the bound is when
    they became so (the poller's record), from ``healed_at``. Fails after ``ceiling_s``
    (a liveness bound) naming what each reported."""
    while True:
        merged = expected()
        target = policies_digest(merged)
        since, digests = poller.latest()
        if digests and all(d == target for d in digests):
            return Convergence(since - healed_at, target, merged)
        if time.monotonic() - healed_at > ceiling_s:
            raise AssertionError(
                f"sidecars' global digests {list(digests)} never all equal the expected "
                f"{target} within {ceiling_s:.0f}s of the heal"
            )
        time.sleep(0.2)


def lost_writes(
    geo: GeoCluster, acknowledged: Sequence[Write], merged: LwwTable[Policies]
) -> list[str]:
    """Acknowledged writes missing from their origin topic (or under another key), or whose
    key's winner is older than them: each a line saying which."""
    problems: list[str] = []
    for cluster in CLUSTERS:
        found = tokens_in_origin(geo.endpoints[cluster].bootstrap, cluster)
        for w in (w for w in acknowledged if w.cluster == cluster):
            key = key_of(w.topic)
            record = found.get((key, w.token))
            if record is None:
                problems.append(f"acknowledged {w} is not in {cluster}'s global topic")
                continue
            winner = merged.version(key)
            if winner is None or winner.stamp.order_key() < record.stamp_key:
                problems.append(f"{key}: winner {winner} is older than acknowledged {record}")
    return problems
