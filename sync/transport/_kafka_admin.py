"""The real admin client: confluent-kafka's ``AdminClient`` behind the seam's ``Admin``
protocol (topics, configs, offsets, groups), controller calls through the guard and
coordinator calls in an isolated worker process."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, TypeVar, cast

from confluent_kafka import (
    KafkaError,
    KafkaException,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
)
from confluent_kafka.admin._listoffsets import OffsetSpec
from confluent_kafka.admin._resource import ResourceType
from confluent_kafka.cimpl import NewPartitions, NewTopic

from sync._errors import (
    TopicConfigurationMismatch,
    TransportError,
)

from ._base import (
    GroupDescription,
    KafkaConfig,
    TopicDescription,
    TopicSpec,
    config_differences,
)
from ._kafka_clients import RDKAFKA_LOG, client_id, created
from ._kafka_controller import ControllerGuard
from ._kafka_failures import (
    has_code,
    timed_out,
    translate,
    waited_for_controller,
)
from ._kafka_isolated import IsolatedAdmin

logger = logging.getLogger(__name__)

__all__ = ["KafkaAdmin"]

_T = TypeVar("_T")
#: Longest single attempt of a read-only controller call (a call that was already waiting
#: when its controller died is retried through the guard instead of waiting it out).
_CONTROLLER_READ_ATTEMPT_S = 10.0
#: Longest single attempt of a fan-out call (ListConsumerGroups): one that was already
#: waiting when a broker died spins until its attempt ends, then goes through the guard.
_FANOUT_ATTEMPT_S = 5.0


class KafkaAdmin:
    """Topic administration through confluent-kafka's AdminClient."""

    def __init__(self, config: KafkaConfig) -> None:
        name = client_id(config.client_id, "admin")
        conf: dict[str, Any] = {
            "bootstrap.servers": config.bootstrap_servers,
            "client.id": name,
            # The controller guard asks Metadata about topics that may not exist yet.
            "allow.auto.create.topics": False,
            "logger": RDKAFKA_LOG,
        }
        conf.update(config.extra)
        self._admin = created(name, lambda: AdminClient(conf))
        self._config = config
        #: Controller-routed calls first check their controller is reachable (see module).
        self._controller = ControllerGuard(self._admin)
        #: Coordinator-routed calls go through a worker process (see _kafka_isolated).
        self._isolated: IsolatedAdmin | None = None

    def _via_controller(
        self,
        what: str,
        topic: str | None,
        timeout_s: float,
        call: Callable[[float], _T],
        *,
        read_only: bool,
    ) -> _T:
        """Run one controller-routed call (``call(request_timeout_s)``) only while the
        controller librdkafka will wait for is reachable (see ``_kafka_controller``).

        A read-only call that still timed out waiting for the controller (it died
        meanwhile) is retried through the guard within ``timeout_s``; a write is not
        retried here (its caller decides). KafkaException propagates to the caller.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            with self._controller.reachable(topic, deadline, what):
                remaining = max(0.1, deadline - time.monotonic())
                attempt = min(remaining, _CONTROLLER_READ_ATTEMPT_S) if read_only else remaining
                try:
                    return call(attempt)
                except KafkaException as exc:
                    if not (read_only and waited_for_controller(exc)):
                        raise
                    if time.monotonic() >= deadline:
                        raise

    def _metadata(self, topic: str | None, timeout_s: float) -> Any:
        # Under the guard's lock: the response names a (random) controller for librdkafka.
        with self._controller.lock:
            return self._admin.list_topics(topic, timeout=timeout_s)

    def describe_topic(self, topic: str, timeout_s: float = 30.0) -> TopicDescription | None:
        try:
            desc = self._via_controller(
                f"describe topic {topic}",
                topic,
                timeout_s,
                lambda t: self._admin.describe_topics(TopicCollection([topic]), request_timeout=t)[
                    topic
                ].result(),
                read_only=True,
            )
        except KafkaException as exc:
            if has_code(exc, KafkaError.UNKNOWN_TOPIC_OR_PART):
                return None
            raise translate(exc, f"describe topic {topic}") from exc
        try:
            entries = self._describe_configs(topic, timeout_s)
        except KafkaException as exc:
            if has_code(exc, KafkaError.UNKNOWN_TOPIC_OR_PART):
                return None  # deleted between the two requests
            raise translate(exc, f"describe configs of {topic}") from exc
        config = {name: str(entry.value) for name, entry in entries.items()}
        return TopicDescription(
            name=topic,
            partitions=len(desc.partitions),
            config=config,
            topic_id=str(desc.topic_id),
            replication_factor=len(desc.partitions[0].replicas) if desc.partitions else -1,
        )

    def _describe_configs(self, topic: str, timeout_s: float) -> dict[str, Any]:
        resource = ConfigResource(ResourceType.TOPIC, topic)
        return cast(
            dict[str, Any],
            self._via_controller(
                f"describe configs of {topic}",
                topic,
                timeout_s,
                lambda t: self._admin.describe_configs([resource], request_timeout=t)[
                    resource
                ].result(),
                read_only=True,
            ),
        )

    def ensure_topic(self, spec: TopicSpec, timeout_s: float = 30.0) -> TopicDescription:
        existing = self.describe_topic(spec.name, timeout_s)
        if existing is None:
            new = NewTopic(
                spec.name,
                num_partitions=spec.partitions,
                replication_factor=spec.replication_factor,
                config=dict(spec.config),
            )
            try:
                self._via_controller(
                    f"create topic {spec.name}",
                    spec.name,
                    timeout_s,
                    lambda t: self._admin.create_topics([new], request_timeout=t)[
                        spec.name
                    ].result(),
                    read_only=False,
                )
                logger.info("created topic %s with %d partitions", spec.name, spec.partitions)
            except KafkaException as exc:
                if not has_code(exc, KafkaError.TOPIC_ALREADY_EXISTS):
                    raise translate(exc, f"create topic {spec.name}") from exc
            existing = self._wait_described(spec.name, timeout_s)
        diff = config_differences(spec, existing.partitions, existing.config)
        if diff:
            raise TopicConfigurationMismatch(spec.name, diff)
        return existing

    def _wait_described(self, topic: str, timeout_s: float) -> TopicDescription:
        """Wait until a new topic is visible and every partition has a leader."""
        deadline = time.monotonic() + timeout_s
        while True:
            desc = self.describe_topic(topic, timeout_s)
            if desc is not None and self._leaders_ready(topic):
                return desc
            if time.monotonic() > deadline:
                raise TransportError(f"topic {topic!r} was created but never became available")
            time.sleep(0.05)

    def _leaders_ready(self, topic: str) -> bool:
        meta = self._metadata(topic, 5)
        tmeta = meta.topics.get(topic)
        if tmeta is None or tmeta.error is not None or not tmeta.partitions:
            return False
        return all(pm.leader >= 0 and pm.error is None for pm in tmeta.partitions.values())

    def delete_topic(self, topic: str, timeout_s: float = 30.0) -> None:
        try:
            self._via_controller(
                f"delete topic {topic}",
                topic,
                timeout_s,
                lambda t: self._admin.delete_topics([topic], request_timeout=t)[topic].result(),
                read_only=False,
            )
        except KafkaException as exc:
            raise translate(exc, f"delete topic {topic}") from exc

    def _coordinator_calls(self) -> IsolatedAdmin:
        if self._isolated is None:
            self._isolated = IsolatedAdmin(self._config)
        return self._isolated

    def grow_topic(self, topic: str, partitions: int, timeout_s: float = 30.0) -> None:
        new = NewPartitions(topic, partitions)
        try:
            self._via_controller(
                f"grow topic {topic}",
                topic,
                timeout_s,
                lambda t: self._admin.create_partitions([new], request_timeout=t)[topic].result(),
                read_only=False,
            )
        except KafkaException as exc:
            raise translate(exc, f"grow topic {topic} to {partitions} partitions") from exc
        deadline = time.monotonic() + timeout_s
        while True:
            desc = self.describe_topic(topic, timeout_s)
            if desc is not None and desc.partitions >= partitions and self._leaders_ready(topic):
                return
            if time.monotonic() > deadline:
                raise TransportError(f"topic {topic!r} did not reach {partitions} partitions")
            time.sleep(0.05)

    def warm_up(self) -> None:
        """Start the worker process of group calls now (see :class:`IsolatedAdmin`)."""
        self._coordinator_calls().start()

    def describe_group(self, group_id: str, timeout_s: float = 10.0) -> GroupDescription:
        # Never in this process: librdkafka aborts it if the coordinator dies meanwhile.
        return self._coordinator_calls().describe_group(group_id, timeout_s)

    def list_groups(self, prefix: str = "", timeout_s: float = 30.0) -> list[str]:
        """Every consumer group whose id starts with ``prefix``.

        ListConsumerGroups asks every broker and waits for each one to be up, busy-waiting
        inside librdkafka while one is dead (issue 11, chaos run 5): it starts only while
        every broker the metadata names is reachable (``ControllerGuard.every_broker``),
        in attempts of at most ``_FANOUT_ATTEMPT_S``. A listing that missed a broker is an
        error, never a shorter list (a caller could take a group for gone).
        """
        what = "list consumer groups"
        deadline = time.monotonic() + timeout_s
        while True:
            with self._controller.every_broker(deadline, what):
                attempt = min(max(0.1, deadline - time.monotonic()), _FANOUT_ATTEMPT_S)
                try:
                    listing = self._admin.list_consumer_groups(request_timeout=attempt).result()
                except KafkaException as exc:
                    if timed_out(exc) and time.monotonic() < deadline:
                        continue
                    raise translate(exc, what) from exc
            errors = list(listing.errors or ())
            if not errors:
                return sorted(g.group_id for g in listing.valid if g.group_id.startswith(prefix))
            if time.monotonic() >= deadline or not all(map(timed_out, errors)):
                raise TransportError(
                    f"{what}: {len(errors)} broker(s) did not answer ({errors[0]}); "
                    "the listing would be incomplete"
                )

    def delete_group(self, group: str, timeout_s: float = 30.0) -> None:
        self._coordinator_calls().delete_group(group, timeout_s)

    def close(self) -> None:
        """Stop the coordinator-call worker, if one was started."""
        if self._isolated is not None:
            self._isolated.close()
            self._isolated = None

    def list_topics(self, prefix: str = "", timeout_s: float = 30.0) -> list[str]:
        try:
            meta = self._metadata(None, timeout_s)
        except KafkaException as exc:
            raise translate(exc, "list topics") from exc
        return sorted(t for t in meta.topics if t.startswith(prefix))

    def topic_overrides(self, topic: str, timeout_s: float = 30.0) -> dict[str, str] | None:
        try:
            entries = self._describe_configs(topic, timeout_s)
        except KafkaException as exc:
            if has_code(exc, KafkaError.UNKNOWN_TOPIC_OR_PART):
                return None
            raise translate(exc, f"describe configs of {topic}") from exc
        dynamic = ConfigSource.DYNAMIC_TOPIC_CONFIG.value
        return {
            name: str(entry.value)
            for name, entry in entries.items()
            if entry.source == dynamic and entry.value is not None
        }

    def alter_topic_config(
        self,
        topic: str,
        set_: Mapping[str, str],
        delete: Collection[str] = (),
        timeout_s: float = 30.0,
    ) -> None:
        if not set_ and not delete:
            return
        entries = [
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in set_.items()
        ] + [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in delete]
        resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
        try:
            self._via_controller(
                f"alter configs of {topic}",
                topic,
                timeout_s,
                lambda t: self._admin.incremental_alter_configs([resource], request_timeout=t)[
                    resource
                ].result(),
                read_only=False,
            )
        except KafkaException as exc:
            raise translate(exc, f"alter configs of {topic}") from exc

    def list_offsets(
        self, topic: str, partitions: Sequence[int], at: int | str, timeout_s: float = 30.0
    ) -> dict[int, int]:
        if at == "earliest":
            spec = OffsetSpec.earliest()  # type: ignore[no-untyped-call]
        elif at == "latest":
            spec = OffsetSpec.latest()  # type: ignore[no-untyped-call]
        elif isinstance(at, int):
            spec = OffsetSpec.for_timestamp(at)
        else:
            raise ValueError(f"list_offsets: at must be earliest, latest or a timestamp: {at!r}")
        request = {TopicPartition(topic, p): spec for p in partitions}
        if not request:
            return {}
        try:
            futures = self._admin.list_offsets(request, request_timeout=timeout_s)
            found = {tp.partition: f.result().offset for tp, f in futures.items()}
        except KafkaException as exc:
            raise translate(exc, f"list offsets of {topic}") from exc
        if isinstance(at, int) and any(o < 0 for o in found.values()):
            ends = self.list_offsets(topic, [p for p, o in found.items() if o < 0], "latest")
            found.update(ends)  # no record that recent: the end
        return found

    def group_offsets(self, group: str, topic: str, timeout_s: float = 30.0) -> dict[int, int]:
        return {p: o for p, (o, _m) in self.group_positions(group, topic, timeout_s).items()}

    def group_positions(
        self, group: str, topic: str, timeout_s: float = 30.0
    ) -> dict[int, tuple[int, str]]:
        # ListConsumerGroupOffsets is coordinator-routed: never in this process
        # (librdkafka aborts it if the coordinator dies meanwhile; see _kafka_isolated).
        return self._coordinator_calls().group_positions(group, topic, timeout_s)

    def alter_group_offsets(
        self, group: str, topic: str, offsets: Mapping[int, int], timeout_s: float = 30.0
    ) -> None:
        self.alter_group_positions(group, topic, {p: (o, "") for p, o in offsets.items()})

    def alter_group_positions(
        self,
        group: str,
        topic: str,
        positions: Mapping[int, tuple[int, str]],
        timeout_s: float = 30.0,
    ) -> None:
        if not positions:
            return
        # AlterConsumerGroupOffsets is coordinator-routed too: in the worker process.
        self._coordinator_calls().alter_group_positions(group, topic, positions, timeout_s)
