"""The real assigned consumer: confluent-kafka's ``Consumer`` behind the seam's
``Consumer`` protocol (manual assignment, positions, watermarks, group commits)."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any, cast

from confluent_kafka import (
    Consumer as _RdConsumer,
)
from confluent_kafka import (
    KafkaError,
    KafkaException,
    TopicPartition,
)

from sync._errors import (
    TransportError,
)

from ._base import (
    KafkaConfig,
    Message,
)
from ._kafka_clients import RDKAFKA_LOG, client_id, created, fetched
from ._kafka_failures import (
    transient,
    translate,
)

logger = logging.getLogger(__name__)

__all__ = ["KafkaConsumer"]


class KafkaConsumer:
    """confluent-kafka consumer used with manual assignment only (never joins a group).

    With a ``group_id`` its commits go to that group (a "simple" consumer group: no
    members, no generations), which is how subscriptions keep their positions.
    """

    def __init__(
        self,
        config: KafkaConfig,
        read_committed: bool,
        fetch_wait_max_ms: int,
        group_id: str | None = None,
    ) -> None:
        name = client_id(config.client_id, "consumer")
        conf: dict[str, Any] = {
            "bootstrap.servers": config.bootstrap_servers,
            "client.id": name,
            # Required by librdkafka even for assign(); never joins since we never subscribe.
            "group.id": group_id if group_id is not None else f"{config.client_id}.unused",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_committed" if read_committed else "read_uncommitted",
            "fetch.wait.max.ms": fetch_wait_max_ms,
            "auto.offset.reset": "earliest",
            # Bootstrap reads whole compacted logs; large fetches keep librdkafka ahead of Python.
            "fetch.max.bytes": 16 * 1024 * 1024,
            "max.partition.fetch.bytes": 4 * 1024 * 1024,
            "queued.max.messages.kbytes": 16384,  # per partition
            "logger": RDKAFKA_LOG,
        }
        conf.update(config.extra)
        self._group_id = group_id
        self._consumer = created(name, lambda: _RdConsumer(conf))

    def assign(self, topic: str, offsets: Mapping[int, int]) -> None:
        try:
            self._consumer.assign([TopicPartition(topic, p, o) for p, o in offsets.items()])
        except (KafkaException, RuntimeError) as exc:  # RuntimeError: the consumer is closed
            raise _consume_error(exc, f"assign {topic}") from exc

    def consume(self, max_messages: int, timeout_s: float) -> Sequence[Message]:
        """Wait up to ``timeout_s`` for the first record, then take what is already fetched."""
        try:
            batch = fetched(self._consumer, max_messages, timeout_s)
        except (KafkaException, RuntimeError) as exc:  # RuntimeError: the consumer is closed
            raise _consume_error(exc, "consume") from exc
        for msg in batch:
            if msg.error() is not None:
                return self._drop_errors(batch)
        return cast(Sequence[Message], batch)

    def _drop_errors(self, batch: list[Any]) -> list[Message]:
        kept: list[Message] = []
        for msg in batch:
            err = msg.error()
            if err is None:
                kept.append(msg)
            elif err.fatal():
                raise TransportError(f"consumer failed: {err.str()}")
            elif err.code() != KafkaError._PARTITION_EOF:  # noqa: SLF001 - public constant
                logger.warning(
                    "consume error on %s[%s]: %s", msg.topic(), msg.partition(), err.str()
                )
        return kept

    def positions(self, topic: str, partitions: Sequence[int]) -> dict[int, int]:
        tps = self._consumer.position([TopicPartition(topic, p) for p in partitions])
        return {tp.partition: tp.offset for tp in tps}

    def _watermarks(self, topic: str, partitions: Sequence[int]) -> dict[int, tuple[int, int]]:
        out: dict[int, tuple[int, int]] = {}
        for p in partitions:
            deadline = time.monotonic() + 15.0
            while True:
                try:
                    low, high = self._consumer.get_watermark_offsets(
                        TopicPartition(topic, p), timeout=10, cached=False
                    )
                    break
                except KafkaException as exc:
                    if not transient(exc) or time.monotonic() > deadline:
                        raise translate(exc, f"watermarks of {topic}[{p}]") from exc
                    # Leader moves (broker loss, new topic): refresh metadata, then retry.
                    logger.info("watermarks of %s[%d]: %s; retrying", topic, p, exc)
                    try:
                        self._consumer.list_topics(topic, timeout=5)
                    except KafkaException:
                        logger.debug("metadata refresh failed", exc_info=True)
                    time.sleep(0.2)
            out[p] = (int(low), int(high))
        return out

    def end_offsets(self, topic: str, partitions: Sequence[int]) -> dict[int, int]:
        # With isolation.level=read_committed librdkafka's ListOffsets returns the
        # last stable offset, which is what a read-committed reader can reach.
        return {p: hw for p, (_, hw) in self._watermarks(topic, partitions).items()}

    def start_offsets(self, topic: str, partitions: Sequence[int]) -> dict[int, int]:
        return {p: lo for p, (lo, _) in self._watermarks(topic, partitions).items()}

    def pause(self, topic: str, partitions: Sequence[int]) -> None:
        if partitions:
            self._consumer.pause([TopicPartition(topic, p) for p in partitions])

    def resume(self, topic: str, partitions: Sequence[int]) -> None:
        if partitions:
            self._consumer.resume([TopicPartition(topic, p) for p in partitions])

    def _require_group(self, what: str) -> str:
        if self._group_id is None:
            raise TransportError(f"{what} needs a consumer created with a group_id")
        return self._group_id

    def committed(
        self, topic: str, partitions: Sequence[int], timeout_s: float = 10.0
    ) -> dict[int, tuple[int, str] | None]:
        group = self._require_group("committed()")
        try:
            tps = self._consumer.committed(
                [TopicPartition(topic, p) for p in partitions], timeout=timeout_s
            )
        except KafkaException as exc:
            raise translate(exc, f"read committed offsets of group {group!r}") from exc
        out: dict[int, tuple[int, str] | None] = {}
        for tp in tps:
            if tp.error is not None:
                raise TransportError(
                    f"read committed offset of {topic}[{tp.partition}] for group {group!r} "
                    f"failed: {tp.error}"
                )
            out[tp.partition] = None if tp.offset < 0 else (tp.offset, tp.metadata or "")
        return out

    def commit(
        self, topic: str, offsets: Mapping[int, tuple[int, str]], timeout_s: float = 10.0
    ) -> None:
        group = self._require_group("commit()")
        if not offsets:
            return
        tps = [
            TopicPartition(topic, p, offset, metadata=metadata)
            for p, (offset, metadata) in offsets.items()
        ]
        try:
            result = self._consumer.commit(offsets=tps, asynchronous=False)
        except KafkaException as exc:
            raise translate(exc, f"commit offsets of group {group!r} on {topic}") from exc
        for tp in result or ():
            if tp.error is not None:
                raise TransportError(
                    f"commit of {topic}[{tp.partition}]@{tp.offset} for group {group!r} "
                    f"failed: {tp.error}"
                )

    def close(self) -> None:
        self._consumer.close()


def _consume_error(exc: Exception, what: str) -> TransportError:
    """A librdkafka error of a consumer call as the seam's error (callers catch
    :class:`TransportError`, never confluent-kafka's own exceptions)."""
    if isinstance(exc, KafkaException):
        return translate(exc, what)
    return TransportError(f"{what}: {exc}")
