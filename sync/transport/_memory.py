"""The in-memory twin of the Kafka transport, for fast unit tests.

It keeps what the layers above depend on: per-key partitioning with Kafka's
murmur2 partitioner, offsets with gaps after compaction and transaction markers,
read-committed visibility up to the last stable offset, producer fencing by
transactional id and epoch, and compaction that keeps the last value per key.
The contract suite in ``tests/`` runs against this and a real broker alike.

The broker and its logs are :mod:`._memory_log`, the producer :mod:`._memory_producer`,
the consumer :mod:`._memory_consumer`, consumer groups :mod:`._memory_group`; this module
has the admin client and the transport that hands them out.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping, Sequence

from sync._errors import TopicConfigurationMismatch, TransportError

from ._base import (
    GroupDescription,
    TopicDescription,
    TopicSpec,
    config_differences,
)
from ._memory_consumer import MemoryConsumer
from ._memory_group import MemoryGroupConsumer, start_offset_of
from ._memory_log import (
    MemoryBroker,
    _Partition,
    _State,
    _Topic,
)
from ._memory_producer import MemoryProducer
from ._reachability import ReachabilityConfig, ReachabilityMonitor

__all__ = ["MemoryBroker", "MemoryTransport"]


#: What a twin topic reports without being configured (Kafka's defaults for these keys).
_MEMORY_DEFAULTS: Mapping[str, str] = {
    "cleanup.policy": "delete",
    "delete.retention.ms": "86400000",
}


class MemoryAdmin:
    """Admin twin."""

    def __init__(self, broker: MemoryBroker) -> None:
        self._broker = broker

    def describe_topic(self, topic: str, timeout_s: float = 30.0) -> TopicDescription | None:
        with self._broker._lock:  # noqa: SLF001
            self._broker._check()  # noqa: SLF001
            t = self._broker._topics.get(topic)  # noqa: SLF001
            if t is None:
                return None
            return TopicDescription(topic, len(t.partitions), dict(t.config), t.topic_id, 1)

    def ensure_topic(self, spec: TopicSpec, timeout_s: float = 30.0) -> TopicDescription:
        with self._broker._lock:  # noqa: SLF001
            self._broker._check()  # noqa: SLF001
            if spec.name not in self._broker._topics:  # noqa: SLF001
                config = dict(_MEMORY_DEFAULTS)
                config.update(spec.config)
                self._broker._topics[spec.name] = _Topic(  # noqa: SLF001
                    [_Partition() for _ in range(spec.partitions)], config, str(uuid.uuid4())
                )
        desc = self.describe_topic(spec.name)
        assert desc is not None  # noqa: S101 - created above under the lock
        diff = config_differences(spec, desc.partitions, desc.config)
        if diff:
            raise TopicConfigurationMismatch(spec.name, diff)
        return desc

    def delete_topic(self, topic: str, timeout_s: float = 30.0) -> None:
        with self._broker._lock:  # noqa: SLF001
            self._broker._topics.pop(topic, None)  # noqa: SLF001

    def grow_topic(self, topic: str, partitions: int, timeout_s: float = 30.0) -> None:
        with self._broker._lock:  # noqa: SLF001
            self._broker._check()  # noqa: SLF001
            t = self._broker._topics.get(topic)  # noqa: SLF001
            if t is None:
                raise TransportError(f"grow topic {topic}: no such topic")
            if partitions < len(t.partitions):
                raise TransportError(f"grow topic {topic}: Kafka cannot shrink a topic")
            t.partitions.extend(_Partition() for _ in range(partitions - len(t.partitions)))

    def describe_group(self, group_id: str, timeout_s: float = 10.0) -> GroupDescription:
        self._broker._check()  # noqa: SLF001
        return self._broker._coordinator.describe(group_id)  # noqa: SLF001

    def list_groups(self, prefix: str = "", timeout_s: float = 30.0) -> list[str]:
        with self._broker._lock:  # noqa: SLF001
            self._broker._check()  # noqa: SLF001
            return sorted(g for g in self._broker._groups if g.startswith(prefix))  # noqa: SLF001

    def delete_group(self, group: str, timeout_s: float = 30.0) -> None:
        with self._broker._lock:  # noqa: SLF001
            self._broker._groups.pop(group, None)  # noqa: SLF001

    def list_topics(self, prefix: str = "", timeout_s: float = 30.0) -> list[str]:
        with self._broker._lock:  # noqa: SLF001
            self._broker._check()  # noqa: SLF001
            return sorted(t for t in self._broker._topics if t.startswith(prefix))  # noqa: SLF001

    def topic_overrides(self, topic: str, timeout_s: float = 30.0) -> dict[str, str] | None:
        with self._broker._lock:  # noqa: SLF001
            self._broker._check()  # noqa: SLF001
            t = self._broker._topics.get(topic)  # noqa: SLF001
            if t is None:
                return None
            return {k: v for k, v in t.config.items() if k not in _MEMORY_DEFAULTS}

    def alter_topic_config(
        self,
        topic: str,
        set_: Mapping[str, str],
        delete: Collection[str] = (),
        timeout_s: float = 30.0,
    ) -> None:
        with self._broker._lock:  # noqa: SLF001
            self._broker._check()  # noqa: SLF001
            t = self._broker._topics.get(topic)  # noqa: SLF001
            if t is None:
                raise TransportError(f"alter configs of {topic}: unknown topic")
            for k in delete:
                t.config.pop(k, None)
            t.config.update(set_)

    def list_offsets(
        self, topic: str, partitions: Sequence[int], at: int | str, timeout_s: float = 30.0
    ) -> dict[int, int]:
        with self._broker._lock:  # noqa: SLF001
            self._broker._check()  # noqa: SLF001
            t = self._broker._topic(topic)  # noqa: SLF001
            out: dict[int, int] = {}
            for p in partitions:
                part = t.partitions[p]
                if at == "earliest":
                    out[p] = part.start_offset
                elif at == "latest":
                    out[p] = part.next_offset
                else:
                    out[p] = next(
                        (
                            e.offset
                            for e in part.entries
                            if e.state is _State.COMMITTED and e.timestamp_ms >= int(at)
                        ),
                        part.next_offset,
                    )
            return out

    def group_offsets(self, group: str, topic: str, timeout_s: float = 30.0) -> dict[int, int]:
        with self._broker._lock:  # noqa: SLF001
            stored = self._broker._groups.get(group, {})  # noqa: SLF001
            return {p: o for (t, p), (o, _m) in stored.items() if t == topic}

    def alter_group_offsets(
        self, group: str, topic: str, offsets: Mapping[int, int], timeout_s: float = 30.0
    ) -> None:
        self.alter_group_positions(group, topic, {p: (o, "") for p, o in offsets.items()})

    def group_positions(
        self, group: str, topic: str, timeout_s: float = 30.0
    ) -> dict[int, tuple[int, str]]:
        with self._broker._lock:  # noqa: SLF001
            stored = self._broker._groups.get(group, {})  # noqa: SLF001
            return {p: (o, m) for (t, p), (o, m) in stored.items() if t == topic}

    def alter_group_positions(
        self,
        group: str,
        topic: str,
        positions: Mapping[int, tuple[int, str]],
        timeout_s: float = 30.0,
    ) -> None:
        with self._broker._lock:  # noqa: SLF001
            stored = self._broker._groups.setdefault(group, {})  # noqa: SLF001
            for p, (o, m) in positions.items():
                stored[(topic, p)] = (o, m)


class MemoryTransport:
    """Transport over a :class:`MemoryBroker` (a fresh one unless given)."""

    def __init__(self, broker: MemoryBroker | None = None) -> None:
        self.broker = broker or MemoryBroker()

    @property
    def description(self) -> str:
        return "memory://"

    def producer(
        self,
        *,
        transactional_id: str | None = None,
        linger_ms: float = 0,
        transaction_timeout_ms: int | None = None,
    ) -> MemoryProducer:
        return MemoryProducer(self.broker, transactional_id)

    def group_consumer(
        self,
        group_id: str,
        *,
        client_id: str | None = None,
        session_timeout_ms: int = 45_000,
        heartbeat_interval_ms: int | None = None,
        read_committed: bool = True,
        fetch_wait_max_ms: int = 100,
    ) -> MemoryGroupConsumer:
        fetcher = MemoryConsumer(self.broker, read_committed)
        return MemoryGroupConsumer(
            self.broker._coordinator,  # noqa: SLF001
            fetcher,
            group_id,
            client_id or "policy-sync",
            session_timeout_ms,
            start_offset_of(fetcher.start_offsets),
        )

    def consumer(
        self,
        *,
        read_committed: bool = True,
        fetch_wait_max_ms: int = 100,
        group_id: str | None = None,
    ) -> MemoryConsumer:
        return MemoryConsumer(self.broker, read_committed, group_id)

    def admin(self) -> MemoryAdmin:
        return MemoryAdmin(self.broker)

    def reachability(self, config: ReachabilityConfig | None = None) -> ReachabilityMonitor:
        """Probes answer while the broker is available (``broker.set_available``)."""
        broker = self.broker

        def probe(timeout_s: float) -> None:
            with broker._lock:  # noqa: SLF001
                broker._check()  # noqa: SLF001

        return ReachabilityMonitor(probe, config, what=self.description)
