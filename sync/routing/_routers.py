"""Pulsar's message routers: the model a router sees, the built-in routers, the factory
and the checked choice (see :mod:`sync.routing`)."""

from __future__ import annotations

import enum
import itertools
import operator
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from sync._errors import ConfigurationError, InvalidInputError

from ._hashes import _INT32_MAX, _TWO_31, _UINT32, java_string_hash, murmur3_32_hash

__all__ = [
    "CustomPartitionRouter",
    "HashingScheme",
    "MessageRouter",
    "MessageRoutingMode",
    "RoundRobinPartitionRouter",
    "RoutedMessage",
    "RoutingError",
    "SinglePartitionRouter",
    "TopicMetadata",
    "checked_choose",
    "make_router",
]

# --------------------------------------------------------------------------- model


class HashingScheme(enum.Enum):
    """Key hash used by the built-in routers (Pulsar ``HashingScheme``)."""

    JavaStringHash = "JavaStringHash"
    Murmur3_32Hash = "Murmur3_32Hash"

    def make_hash(self, key: str) -> int:
        """Hash ``key`` with this scheme; the result is in ``[0, 2**31)``."""
        return _HASH_FUNCTIONS[self](key)


_HASH_FUNCTIONS: dict[HashingScheme, Callable[[str], int]] = {
    HashingScheme.JavaStringHash: java_string_hash,
    HashingScheme.Murmur3_32Hash: murmur3_32_hash,
}


class MessageRoutingMode(enum.Enum):
    """How unkeyed messages are spread over partitions (Pulsar ``MessageRoutingMode``)."""

    RoundRobinPartition = "RoundRobinPartition"
    SinglePartition = "SinglePartition"
    CustomPartition = "CustomPartition"


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """What a router knows about the topic (Pulsar ``TopicMetadata``)."""

    num_partitions: int

    def __post_init__(self) -> None:
        n = self.num_partitions
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= _INT32_MAX:
            raise ConfigurationError(
                f"num_partitions must be an int in [1, {_INT32_MAX}], got {n!r}; "
                "routing needs a partitioned topic's partition count"
            )


@dataclass(frozen=True, slots=True)
class RoutedMessage:
    """The part of a message routers look at.

    ``key`` is Pulsar's partition key: when it is not ``None`` (``""`` counts as a key,
    as ``hasKey()`` does in Java) the built-in routers hash it. ``ordering_key`` is carried
    for custom routers only; Pulsar's built-in routers never read it.
    """

    key: str | None = None
    ordering_key: bytes | None = None

    @property
    def has_key(self) -> bool:
        """Whether the message has a partition key (Java ``Message.hasKey()``)."""
        return self.key is not None


@runtime_checkable
class MessageRouter(Protocol):
    """Chooses a partition for a message (Pulsar ``MessageRouter``)."""

    def choose_partition(self, msg: RoutedMessage, metadata: TopicMetadata) -> int:
        """Return the partition index for ``msg``; it must be in ``[0, num_partitions)``."""
        ...


class RoutingError(InvalidInputError):
    """A router chose a partition outside ``[0, num_partitions)``, or a custom router failed."""

    def __init__(
        self,
        message: str,
        *,
        router: object,
        partition: object = None,
        num_partitions: int | None = None,
        key: str | None = None,
    ) -> None:
        self.router = router
        self.partition = partition
        self.num_partitions = num_partitions
        self.key = key
        super().__init__(message)


def _router_name(router: object) -> str:
    return getattr(router, "__qualname__", None) or type(router).__qualname__


def _validated(router: object, partition: Any, msg: RoutedMessage, num_partitions: int) -> int:
    try:
        index = operator.index(partition)
    except TypeError:
        index = None
    if index is None or isinstance(partition, bool) or not 0 <= index < num_partitions:
        raise RoutingError(
            f"router {_router_name(router)} chose partition {partition!r} for key "
            f"{msg.key!r}, but the topic has {num_partitions} partitions (valid: 0.."
            f"{num_partitions - 1}); fix the router, answers are never wrapped modulo",
            router=router,
            partition=partition,
            num_partitions=num_partitions,
            key=msg.key,
        )
    return index


def checked_choose(router: MessageRouter, msg: RoutedMessage, metadata: TopicMetadata) -> int:
    """Ask ``router`` for a partition and refuse an answer outside ``[0, num_partitions)``.

    This is the check Pulsar's ``PartitionedProducerImpl`` applies to every answer of
    every router ("Illegal partition index chosen by the message routing policy"); a
    producer should route every message through it.

    Raises:
        RoutingError: the answer is not an int in ``[0, metadata.num_partitions)``.
    """
    return _validated(router, router.choose_partition(msg, metadata), msg, metadata.num_partitions)


# --------------------------------------------------------------------------- routers


def _scheme(value: HashingScheme | str) -> HashingScheme:
    try:
        return HashingScheme(value)
    except ValueError as exc:
        raise ConfigurationError(
            f"unknown hashing scheme {value!r}; use one of "
            f"{', '.join(s.value for s in HashingScheme)}"
        ) from exc


def _system_millis() -> int:
    # Java Clock.systemUTC().millis(): wall-clock milliseconds since the epoch.
    return time.time_ns() // 1_000_000


def _check_int(name: str, value: object, low: int, high: int = _INT32_MAX) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigurationError(f"{name} must be an int in [{low}, {high}], got {value!r}")
    return value


class RoundRobinPartitionRouter:
    """Pulsar's default router (``RoundRobinPartitionMessageRouterImpl``).

    * keyed message: ``signSafeMod(hash(key), n)``;
    * unkeyed, batching enabled: ``signSafeMod(now_ms / partitionSwitchMs + startIdx, n)``,
      so all messages of one switch interval share a partition and batch together;
    * unkeyed, batching disabled: a shared counter that starts at ``startIdx``, taken
      modulo ``n`` (it wraps at 2**31 like Java's ``int``).

    ``partitionSwitchMs`` is ``max(1, (frequency * batchingMaxPublishDelayMicros) // 1000)``
    with Pulsar's defaults ``frequency = 10`` and a 1 ms delay, hence 10 ms. Pass
    ``partition_switch_ms`` instead to give the value directly, as the Java constructor
    takes it.

    Args:
        hashing_scheme: key hash; Pulsar's client default is ``JavaStringHash``.
        batching_enabled: whether the producer batches (Pulsar default ``True``).
        batching_max_publish_delay_ms: ``batchingMaxPublishDelay``, at least 1 (default 1).
        partition_switch_frequency: ``roundRobinRouterBatchingPartitionSwitchFrequency``,
            at least 1 (default 10).
        partition_switch_ms: the switch interval itself; excludes the two options above.
        start_index: ``startPtnIdx``. ``None`` draws a random start once, here; Pulsar
            draws it from ``[0, n)``, and since only its value modulo ``n`` matters a draw
            from ``[0, 2**31 - 1)`` spreads producers the same way without knowing ``n``.
        clock: returns the current time in milliseconds (Java ``Clock.millis()``);
            defaults to the wall clock. Inject one to make routing deterministic.

    Thread-safe: the unbatched counter is an ``itertools.count``, whose ``next`` is atomic
    under the GIL.
    """

    __slots__ = (
        "_clock",
        "_counter",
        "_hash",
        "_start",
        "_switch_ms",
        "batching_enabled",
        "hashing_scheme",
    )

    def __init__(
        self,
        hashing_scheme: HashingScheme | str = HashingScheme.JavaStringHash,
        *,
        batching_enabled: bool = True,
        batching_max_publish_delay_ms: int | None = None,
        partition_switch_frequency: int | None = None,
        partition_switch_ms: int | None = None,
        start_index: int | None = None,
        clock: Callable[[], int] | None = None,
    ) -> None:
        self.hashing_scheme = _scheme(hashing_scheme)
        self._hash = _HASH_FUNCTIONS[self.hashing_scheme]
        self.batching_enabled = bool(batching_enabled)
        if partition_switch_ms is not None:
            if batching_max_publish_delay_ms is not None or partition_switch_frequency is not None:
                raise ConfigurationError(
                    "give either partition_switch_ms or batching_max_publish_delay_ms/"
                    "partition_switch_frequency, not both"
                )
            # The Java constructor clamps with Math.max(1, partitionSwitchMs).
            switch_ms = max(
                1, _check_int("partition_switch_ms", partition_switch_ms, -(2**63), 2**63 - 1)
            )
        else:
            delay_ms = _check_int(
                "batching_max_publish_delay_ms",
                1 if batching_max_publish_delay_ms is None else batching_max_publish_delay_ms,
                1,
            )
            frequency = _check_int(
                "partition_switch_frequency",
                10 if partition_switch_frequency is None else partition_switch_frequency,
                1,
            )
            # PartitionedProducerImpl passes TimeUnit.MICROSECONDS.toMillis(frequency *
            # batchingMaxPublishDelayMicros); with a whole-millisecond delay that is exact.
            switch_ms = frequency * delay_ms
        self._switch_ms = switch_ms
        if start_index is None:
            # Load spreading only, not security: Pulsar uses ThreadLocalRandom here too.
            start_index = random.randrange(_INT32_MAX)  # noqa: S311
        self._start = _check_int("start_index", start_index, -_TWO_31)
        self._counter = itertools.count(self._start)
        self._clock: Callable[[], int] = _system_millis if clock is None else clock

    @property
    def start_index(self) -> int:
        """The start partition index (``startPtnIdx``)."""
        return self._start

    @property
    def partition_switch_ms(self) -> int:
        """Milliseconds an unkeyed batching producer stays on one partition."""
        return self._switch_ms

    def choose_partition(self, msg: RoutedMessage, metadata: TopicMetadata) -> int:
        """Choose the partition for ``msg`` as Pulsar's round-robin router does."""
        n = metadata.num_partitions
        key = msg.key
        if key is not None:
            return self._hash(key) % n
        if self.batching_enabled:
            now = self._clock()
            # Java long division truncates toward zero.
            slot = now // self._switch_ms if now >= 0 else -(-now // self._switch_ms)
            return (slot + self._start) % n
        # AtomicIntegerFieldUpdater.getAndIncrement: a Java int, wrapping at 2**31.
        return (((next(self._counter) + _TWO_31) & _UINT32) - _TWO_31) % n

    def __repr__(self) -> str:
        return (
            f"RoundRobinPartitionRouter(hashing_scheme={self.hashing_scheme.value}, "
            f"batching_enabled={self.batching_enabled}, "
            f"partition_switch_ms={self._switch_ms}, start_index={self._start})"
        )


class SinglePartitionRouter:
    """Pulsar's ``SinglePartitionMessageRouterImpl``.

    A keyed message goes to ``signSafeMod(hash(key), n)``; every unkeyed message goes to
    one fixed partition. Pulsar draws that partition at random from ``[0, n)`` when the
    producer is created; with ``partition_index=None`` this router draws it the same way
    on its first unkeyed message (when ``n`` is first known) and keeps it. A given
    ``partition_index`` is returned as is, like Java, so ``checked_choose`` refuses it if
    the topic has fewer partitions.
    """

    __slots__ = ("_hash", "_lock", "_partition_index", "hashing_scheme")

    def __init__(
        self,
        hashing_scheme: HashingScheme | str = HashingScheme.JavaStringHash,
        *,
        partition_index: int | None = None,
    ) -> None:
        self.hashing_scheme = _scheme(hashing_scheme)
        self._hash = _HASH_FUNCTIONS[self.hashing_scheme]
        if partition_index is not None:
            _check_int("partition_index", partition_index, 0)
        self._partition_index = partition_index
        self._lock = threading.Lock()

    @property
    def partition_index(self) -> int | None:
        """The partition for unkeyed messages; ``None`` until first drawn."""
        return self._partition_index

    def choose_partition(self, msg: RoutedMessage, metadata: TopicMetadata) -> int:
        """Choose the partition for ``msg`` as Pulsar's single-partition router does."""
        key = msg.key
        if key is not None:
            return self._hash(key) % metadata.num_partitions
        index = self._partition_index
        if index is None:
            with self._lock:
                if self._partition_index is None:
                    # Load spreading only, not security (Pulsar: ThreadLocalRandom).
                    self._partition_index = random.randrange(metadata.num_partitions)  # noqa: S311
                index = self._partition_index
        return index

    def __repr__(self) -> str:
        return (
            f"SinglePartitionRouter(hashing_scheme={self.hashing_scheme.value}, "
            f"partition_index={self._partition_index})"
        )


class CustomPartitionRouter:
    """Wraps a user router and checks every answer (``MessageRoutingMode.CustomPartition``).

    ``router`` is a :class:`MessageRouter` or a plain callable ``(msg, metadata) -> int``.
    An answer outside ``[0, num_partitions)``, a non-int answer or an exception from the
    user router raises :class:`RoutingError` naming the router.
    """

    __slots__ = ("_choose", "router")

    def __init__(
        self, router: MessageRouter | Callable[[RoutedMessage, TopicMetadata], int]
    ) -> None:
        if isinstance(router, MessageRouter):
            self._choose: Callable[[RoutedMessage, TopicMetadata], int] = router.choose_partition
        elif callable(router):
            self._choose = router
        else:
            raise ConfigurationError(
                f"custom router {router!r} has no choose_partition(msg, metadata) method "
                "and is not callable"
            )
        self.router = router

    def choose_partition(self, msg: RoutedMessage, metadata: TopicMetadata) -> int:
        """Ask the user router, then refuse an answer outside ``[0, num_partitions)``."""
        try:
            partition = self._choose(msg, metadata)
        except Exception as exc:
            raise RoutingError(
                f"custom router {_router_name(self.router)} failed for key {msg.key!r}: "
                f"{exc!r}; fix the router",
                router=self.router,
                num_partitions=metadata.num_partitions,
                key=msg.key,
            ) from exc
        return _validated(self.router, partition, msg, metadata.num_partitions)

    def __repr__(self) -> str:
        return f"CustomPartitionRouter({self.router!r})"


_ROUND_ROBIN_OPTIONS = frozenset(
    {
        "batching_enabled",
        "batching_max_publish_delay_ms",
        "partition_switch_frequency",
        "partition_switch_ms",
        "start_index",
        "clock",
    }
)
_SINGLE_OPTIONS = frozenset({"partition_index"})


def make_router(
    mode: MessageRoutingMode | str | None = None,
    hashing_scheme: HashingScheme | str = HashingScheme.JavaStringHash,
    custom: MessageRouter | Callable[[RoutedMessage, TopicMetadata], int] | None = None,
    **options: Any,
) -> MessageRouter:
    """Build the router a Pulsar producer would use for ``mode``.

    Mode resolution follows ``ProducerBuilderImpl.setMessageRoutingMode``: no mode and no
    custom router means ``RoundRobinPartition``; no mode with a custom router means
    ``CustomPartition``; ``CustomPartition`` needs a custom router and the other modes
    refuse one. ``options`` go to the router's constructor
    (:class:`RoundRobinPartitionRouter` or :class:`SinglePartitionRouter`); unknown ones are
    refused.

    Raises:
        ConfigurationError: unknown mode, scheme or option, or mode and ``custom`` disagree.
    """
    scheme = _scheme(hashing_scheme)
    if mode is None:
        resolved = (
            MessageRoutingMode.RoundRobinPartition
            if custom is None
            else MessageRoutingMode.CustomPartition
        )
    else:
        try:
            resolved = MessageRoutingMode(mode)
        except ValueError as exc:
            raise ConfigurationError(
                f"unknown message routing mode {mode!r}; use one of "
                f"{', '.join(m.value for m in MessageRoutingMode)}"
            ) from exc
    if resolved is MessageRoutingMode.CustomPartition:
        if custom is None:
            raise ConfigurationError(
                "mode CustomPartition needs a custom router: pass custom=<router>"
            )
        if options:
            raise ConfigurationError(
                f"mode CustomPartition takes no options, got {', '.join(sorted(options))}"
            )
        return CustomPartitionRouter(custom)
    if custom is not None:
        raise ConfigurationError(
            f"a custom router needs mode CustomPartition, not {resolved.value}; "
            "drop the mode or set it to CustomPartition"
        )
    allowed = (
        _ROUND_ROBIN_OPTIONS
        if resolved is MessageRoutingMode.RoundRobinPartition
        else _SINGLE_OPTIONS
    )
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise ConfigurationError(
            f"unknown option(s) {', '.join(unknown)} for mode {resolved.value}; "
            f"allowed: {', '.join(sorted(allowed))}"
        )
    if resolved is MessageRoutingMode.RoundRobinPartition:
        return RoundRobinPartitionRouter(scheme, **options)
    return SinglePartitionRouter(scheme, **options)
