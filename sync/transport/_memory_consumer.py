"""The in-memory twin's consumer: assignment, read-committed fetches up to the last
stable offset, pause/resume, committed offsets with metadata."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from sync._errors import TransportError

from ._base import (
    OFFSET_BEGINNING,
    Message,
)
from ._memory_log import (
    OFFSET_METADATA_MAX_BYTES,
    MemoryBroker,
    _MemMessage,
    _Partition,
    _State,
    _Topic,
)

__all__ = ["MemoryConsumer"]


class MemoryConsumer:
    """Consumer twin with manual assignment (and, with a group id, group commits)."""

    def __init__(
        self, broker: MemoryBroker, read_committed: bool, group_id: str | None = None
    ) -> None:
        self._broker = broker
        self._read_committed = read_committed
        self._group_id = group_id
        self._topic_name: str | None = None
        self._positions: dict[int, int] = {}
        self._paused: set[int] = set()

    def assign(self, topic: str, offsets: Mapping[int, int]) -> None:
        with self._broker._lock:  # noqa: SLF001
            t = self._broker._topic(topic)  # noqa: SLF001
            self._topic_name = topic
            self._positions = {
                p: (t.partitions[p].start_offset if o == OFFSET_BEGINNING else o)
                for p, o in offsets.items()
            }

    def _visible_end(self, part: _Partition) -> int:
        return part.last_stable() if self._read_committed else part.next_offset

    def _collect(self, t: _Topic, limit: int) -> list[Message]:
        out: list[Message] = []
        assert self._topic_name is not None  # noqa: S101 - set by assign()
        for p, pos in self._positions.items():
            if p in self._paused:
                continue
            part = t.partitions[p]
            end = self._visible_end(part)
            for e in part.entries:
                if len(out) >= limit:
                    break
                if e.offset < pos or e.offset >= end:
                    continue
                if e.state is _State.COMMITTED or (
                    not self._read_committed and e.state is not _State.MARKER
                ):
                    out.append(_MemMessage(self._topic_name, p, e))
                self._positions[p] = e.offset + 1
            if len(out) < limit and self._positions[p] < end:
                self._positions[p] = end  # skip gaps left by compaction and markers
        return out

    def consume(self, max_messages: int, timeout_s: float) -> Sequence[Message]:
        if self._topic_name is None:
            return []
        deadline = time.monotonic() + timeout_s
        b = self._broker
        with b._lock:  # noqa: SLF001
            while True:
                b._check()  # noqa: SLF001
                out = self._collect(b._topic(self._topic_name), max_messages)  # noqa: SLF001
                remaining = deadline - time.monotonic()
                if out or remaining <= 0:
                    return out
                b._lock.wait(remaining)  # noqa: SLF001

    def positions(self, topic: str, partitions: Sequence[int]) -> dict[int, int]:
        return {p: self._positions.get(p, -1001) for p in partitions}

    def end_offsets(self, topic: str, partitions: Sequence[int]) -> dict[int, int]:
        with self._broker._lock:  # noqa: SLF001
            self._broker._check()  # noqa: SLF001
            t = self._broker._topic(topic)  # noqa: SLF001
            return {p: self._visible_end(t.partitions[p]) for p in partitions}

    def start_offsets(self, topic: str, partitions: Sequence[int]) -> dict[int, int]:
        with self._broker._lock:  # noqa: SLF001
            t = self._broker._topic(topic)  # noqa: SLF001
            return {p: t.partitions[p].start_offset for p in partitions}

    def pause(self, topic: str, partitions: Sequence[int]) -> None:
        with self._broker._lock:  # noqa: SLF001
            self._paused.update(partitions)

    def resume(self, topic: str, partitions: Sequence[int]) -> None:
        with self._broker._lock:  # noqa: SLF001
            self._paused.difference_update(partitions)
            self._broker._lock.notify_all()  # noqa: SLF001

    def _require_group(self, what: str) -> str:
        if self._group_id is None:
            raise TransportError(f"{what} needs a consumer created with a group_id")
        return self._group_id

    def committed(
        self, topic: str, partitions: Sequence[int], timeout_s: float = 10.0
    ) -> dict[int, tuple[int, str] | None]:
        group = self._require_group("committed()")
        with self._broker._lock:  # noqa: SLF001
            self._broker._check()  # noqa: SLF001
            offsets = self._broker._groups.get(group, {})  # noqa: SLF001
            return {p: offsets.get((topic, p)) for p in partitions}

    def commit(
        self, topic: str, offsets: Mapping[int, tuple[int, str]], timeout_s: float = 10.0
    ) -> None:
        group = self._require_group("commit()")
        with self._broker._lock:  # noqa: SLF001
            self._broker._check()  # noqa: SLF001
            t = self._broker._topic(topic)  # noqa: SLF001
            for p, (offset, metadata) in offsets.items():
                if not 0 <= p < len(t.partitions):
                    raise TransportError(f"commit to unknown partition {topic}[{p}]")
                if len(metadata.encode("utf-8")) > OFFSET_METADATA_MAX_BYTES:
                    # Kafka: OFFSET_METADATA_TOO_LARGE (offset.metadata.max.bytes).
                    raise TransportError(
                        f"commit of {topic}[{p}]@{offset} for group {group!r} failed: "
                        "Broker: Offset metadata string too large"
                    )
            stored = self._broker._groups.setdefault(group, {})  # noqa: SLF001
            for p, (offset, metadata) in offsets.items():
                stored[(topic, p)] = (offset, metadata)

    def close(self) -> None:
        self._topic_name = None
