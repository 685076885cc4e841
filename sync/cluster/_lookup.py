"""Topic lookup (Pulsar ``NamespaceService.getBrokerServiceUrlAsync``), answered locally.

topic name → namespace → bundle layout → bundle (CRC-32 of the canonical name) → the
bundle's record in the ownership view → the owner's live registration → pre-encoded
``LookupData`` JSON. Every sidecar keeps the same views (same compacted topics, read
committed), so every sidecar gives the same answer.

When the bundle has no live owner (never owned, unloaded, or its owner's incarnation left
the group), the lookup asks the bundle's slot owner to claim it and waits for the claim to
appear in the view. Concurrent lookups of one bundle share one in-flight acquisition (as
Pulsar's ``findingBundlesAuthoritative`` map does); lookups waiting for an acquisition are
limited by ``max_pending_lookups`` ("Failed due to too many pending lookup requests").
A bundle in state RELEASING is moving between owners: "Namespace bundle … is being
unloaded", which Pulsar clients retry.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sync._constants import ORDER_TOPIC_CONFIG_NAMESPACE, REGISTRY_KEY_NAMESPACE
from sync._errors import (
    BundleUnloadingError,
    NotFoundError,
    TooManyRequestsError,
    UnavailableError,
)
from sync.naming._bundles import topic_hash
from sync.naming._names import NamespaceName, TopicName, parse_topic_cached

from ._metadata import Layout, MetadataStore
from ._ownership_model import RequestOp, namespace_of_bundle
from ._ownership_table import OwnershipTable
from ._records import PERM_READ_WRITE, PERM_WRITE, BundleState, OwnershipRecord
from ._registry import BrokerRegistry, LiveBroker, service_address

logger = logging.getLogger(__name__)

__all__ = ["LookupConfig", "LookupService"]


class _LayoutChanged(UnavailableError):
    """The bundle being acquired left its namespace's layout (split): look up again."""


@dataclass(frozen=True, slots=True)
class LookupConfig:
    """Settings of the lookup service."""

    #: Lookups allowed to wait for an acquisition at once (Pulsar's default: 50000).
    max_pending_lookups: int = 50_000
    #: How long a lookup waits for an unowned bundle to be claimed.
    lookup_timeout_s: float = 10.0
    #: Re-send the claim request this often while waiting.
    request_retry_s: float = 1.0
    #: Bundles of a namespace created without a count (Pulsar's defaultNumberOfNamespaceBundles).
    default_bundles: int = 4
    #: Namespaces every sidecar creates at start if missing (Pulsar standalone's).
    default_namespaces: tuple[str, ...] = ("public/default",)


def namespace_missing(namespace: NamespaceName) -> NotFoundError:
    """Pulsar's 404 for a namespace without policies."""
    del namespace  # Pulsar's reason names no namespace
    return NotFoundError("Namespace not found")


class LookupService:
    """Answers "who serves this topic?" from the local views."""

    def __init__(
        self,
        store: MetadataStore,
        registry: BrokerRegistry,
        ownership: OwnershipTable,
        request: Callable[[RequestOp, str], None],
        config: LookupConfig | None = None,
    ) -> None:
        self.config = config or LookupConfig()
        self.store = store
        self.registry = registry
        self.ownership = ownership
        self._request = request
        self._layouts = store.layouts  # the dict object the reader thread keeps current
        self._rows = ownership.table
        self._inflight: dict[str, asyncio.Future[LiveBroker]] = {}
        self._events: dict[str, asyncio.Event] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self.pending = 0
        self.acquisitions = 0
        self.rejected = 0
        #: Ownership records applied to the local view (any bundle), for metrics.
        self.ownership_changes = 0
        ownership.table.add_listener(self._on_ownership)
        registry.on_change(self._on_registry)
        store.watch(self._on_metadata)

    # -- wake-ups from the reader threads ------------------------------------------------
    def _wake(self, bundle: str | None) -> None:
        loop = self._loop
        if loop is None or not self._events:
            return
        if bundle is None:
            events = list(self._events.copy().values())  # copy(): atomic under the GIL
        else:
            event = self._events.get(bundle)
            events = [] if event is None else [event]
        for event in events:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:
                return  # the loop is closed: nobody is waiting any more

    def _on_ownership(self, key: str, old: object, new: object) -> None:
        self.ownership_changes += 1  # only the table's reader thread writes it
        self._wake(key)

    def _on_registry(self) -> None:
        self._wake(None)

    def _on_metadata(self, key: str) -> None:
        if key.startswith(REGISTRY_KEY_NAMESPACE):
            self._wake(None)  # a split: waiters re-check that their bundle still exists

    # -- the hot path (no awaits) --------------------------------------------------------
    def layout(self, namespace: NamespaceName) -> Layout:
        """The namespace's bundles.

        Raises:
            NotFoundError: the namespace does not exist.
        """
        layout = self._layouts.get(namespace)
        if layout is None:
            raise namespace_missing(namespace)
        return layout

    def bundle_of(self, topic: TopicName) -> str:
        """``<tenant>/<namespace>/<range>`` of the bundle serving ``topic``.

        Raises:
            NotFoundError: the topic's namespace does not exist.
        """
        layout = self._layouts.get(topic.namespace_name)
        if layout is None:
            raise namespace_missing(topic.namespace_name)
        return layout.names[layout.index_of(topic_hash(topic))]

    def owner(self, bundle: str) -> LiveBroker | None:
        """The live owner of ``bundle``, or None if it has none right now.

        Raises:
            BundleUnloadingError: the bundle is moving to a new owner.
        """
        record = self._rows.get(bundle)
        if record is None:
            return None
        if record.state is BundleState.OWNED:
            live = self.registry.live.get(record.broker)
            if live is not None and live.incarnation == record.incarnation:
                return live
            return None
        if record.state is BundleState.RELEASING:
            raise BundleUnloadingError(f"Namespace bundle {bundle} is being unloaded")
        return None

    def lookup_now(self, topic: str | TopicName, listener: str | None = None) -> bytes | None:
        """LookupData JSON if the topic's bundle has a live owner now, else None.

        Raises:
            InvalidTopicNameError: ``topic`` is not a valid name.
            NotFoundError: its namespace does not exist.
            BundleUnloadingError: its bundle is moving.
        """
        name = parse_topic_cached(topic) if isinstance(topic, str) else topic
        live = self.owner(self.bundle_of(name))
        return None if live is None else live.lookup_data(listener)

    # -- waiting for an owner ------------------------------------------------------------
    async def lookup(self, topic: TopicName, listener: str | None = None) -> bytes:
        """Pulsar ``LookupData`` JSON of the broker serving ``topic``, claiming its bundle
        for a live broker first if it has none.

        Raises:
            NotFoundError: the namespace does not exist.
            BundleUnloadingError: the bundle is moving (retry).
            TooManyRequestsError: too many lookups are already waiting.
            UnavailableError: no broker claimed the bundle in time.
        """
        if topic.namespace_name not in self._layouts:
            await self.refresh()  # created through another sidecar a moment ago?
        return (await self.owner_of(topic)).lookup_data(listener)

    async def owner_of(self, topic: TopicName) -> LiveBroker:
        """The live owner of ``topic``'s bundle, claiming the bundle first if needed
        (looked up again if a split replaces the bundle meanwhile)."""
        for _ in range(5):
            bundle = self.bundle_of(topic)
            live = self.owner(bundle)
            if live is not None:
                return live
            try:
                return await self.acquire(bundle, str(topic))
            except _LayoutChanged:
                continue
        raise UnavailableError(
            f"the bundles of {topic.namespace_name} kept changing while looking up {topic}; retry"
        )

    async def refresh(self) -> None:
        """Wait until the registry view holds every committed write (one end-offsets query):
        read-your-writes for metadata written through another sidecar."""
        await asyncio.to_thread(self.store.table.sync, self.config.lookup_timeout_s)

    async def partitions_fresh(self, topic: TopicName) -> int:
        """:meth:`partitions`, re-checked on a synced view when the topic is unknown."""
        count = self.partitions(topic)
        if count == 0 and not topic.is_partition:
            await self.refresh()
            count = self.partitions(topic)
        return count

    async def layout_fresh(self, namespace: NamespaceName) -> Layout:
        """:meth:`layout`, re-checked on a synced view when the namespace is unknown."""
        if namespace not in self._layouts:
            await self.refresh()
        return self.layout(namespace)

    async def acquire(self, bundle: str, what: str | None = None) -> LiveBroker:
        """Wait until ``bundle`` has a live owner, asking its slot owner to claim it.

        Every caller counts against ``max_pending_lookups`` while it waits; callers for
        the same bundle share one acquisition.
        """
        if self.pending >= self.config.max_pending_lookups:
            self.rejected += 1
            raise TooManyRequestsError("Failed due to too many pending lookup requests")
        self._loop = asyncio.get_running_loop()
        future = self._inflight.get(bundle)
        if future is None:
            future = asyncio.ensure_future(self._acquire(bundle, what or bundle))
            self._inflight[bundle] = future
            future.add_done_callback(lambda f: self._acquired(bundle, f))
            self.acquisitions += 1
        self.pending += 1
        try:
            return await asyncio.shield(future)
        finally:
            self.pending -= 1

    def _acquired(self, bundle: str, future: asyncio.Future[LiveBroker]) -> None:
        self._inflight.pop(bundle, None)
        if not future.cancelled():
            # Every waiter may have gone (their requests ended, a shutdown): the shared
            # acquisition's outcome is then nobody's, and not an unretrieved error.
            future.exception()

    async def _acquire(self, bundle: str, what: str) -> LiveBroker:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.lookup_timeout_s
        event = self._events.setdefault(bundle, asyncio.Event())
        last_sent: float | None = None
        try:
            while True:
                event.clear()
                if not self._in_layout(bundle):
                    raise _LayoutChanged(bundle)
                live = self.owner(bundle)
                if live is not None:
                    return live
                now = loop.time()
                if last_sent is None or now - last_sent >= self.config.request_retry_s:
                    self._request(RequestOp.ACQUIRE, bundle)
                    last_sent = now
                remaining = deadline - now
                if remaining <= 0:
                    raise UnavailableError(
                        f"No broker was available to own {what} (bundle {bundle}): no live "
                        f"broker claimed it within {self.config.lookup_timeout_s:.1f}s"
                    )
                try:
                    async with asyncio.timeout(min(remaining, self.config.request_retry_s)):
                        await event.wait()
                except TimeoutError:
                    pass
        finally:
            if self._events.get(bundle) is event:
                del self._events[bundle]

    def _in_layout(self, bundle: str) -> bool:
        namespace = namespace_of_bundle(bundle)
        layout = None if namespace is None else self._layouts.get(namespace)
        return layout is not None and layout.contains(bundle)

    # -- partitions and routes ---------------------------------------------------------
    def partitions(self, topic: TopicName) -> int:
        """Pulsar's partitioned metadata: N for a partitioned topic, else 0."""
        if topic.is_partition:
            return 0
        record = self.store.topic(topic)
        return 0 if record is None else record.partitions

    def queue_topics(self, topic: TopicName) -> list[TopicName]:
        """The topics that carry ``topic``'s queues: its partitions, or itself."""
        n = self.partitions(topic)
        return [topic.partition(i) for i in range(n)] if n > 0 else [topic]

    async def route(self, topic: TopicName) -> dict[str, Any]:
        """RocketMQ ``TopicRouteData`` of a created topic (claims unowned bundles first).

        A queue is one Pulsar partition; queues are grouped by the broker name of their
        bundle's owner; ``perm`` is 6 (read-write) or 4 once that broker name's write
        permission was wiped; ``orderTopicConf`` comes from the ``ORDER_TOPIC_CONFIG`` KV
        namespace.

        Raises:
            NotFoundError: the topic was not created through the admin API.
        """
        record = self.store.topic(topic)
        if record is None:
            raise NotFoundError(
                f"No topic route info in name server for the topic: {topic}; create it "
                f"with PUT /admin/v2/{topic.rest_path}/partitions"
            )
        queues: dict[str, int] = {}
        brokers: dict[str, dict[str, Any]] = {}
        for part in self.queue_topics(topic):
            reg = (await self.owner_of(part)).registration
            queues[reg.broker_name] = queues.get(reg.broker_name, 0) + 1
            entry = brokers.setdefault(
                reg.broker_name,
                {"cluster": reg.cluster, "brokerName": reg.broker_name, "brokerAddrs": {}},
            )
            entry["brokerAddrs"][str(reg.replica_id)] = service_address(reg)
        cluster = self.registry.cluster
        queue_datas = []
        for name, count in sorted(queues.items()):
            perm = self.registry.perm(cluster, name)
            queue_datas.append(
                {
                    "brokerName": name,
                    "readQueueNums": count,
                    "writeQueueNums": count if perm & PERM_WRITE else 0,
                    "perm": perm,
                    "topicSysFlag": 0,
                }
            )
        order = self.store.kv.get(ORDER_TOPIC_CONFIG_NAMESPACE, {}).get(topic.canonical)
        return {
            "orderTopicConf": order,
            "queueDatas": queue_datas,
            "brokerDatas": [brokers[name] for name in sorted(brokers)],
            "filterServerTable": {},
        }

    def topics_on(self, broker_name: str) -> list[str]:
        """Created topics with at least one queue owned by ``broker_name`` right now."""
        found: list[str] = []
        for canonical in sorted(self.store.topics):
            topic = parse_topic_cached(canonical)
            for part in self.queue_topics(topic):
                try:
                    live = self.owner(self.bundle_of(part))
                except (NotFoundError, BundleUnloadingError):
                    continue
                if live is not None and live.registration.broker_name == broker_name:
                    found.append(canonical)
                    break
        return found

    def claim_of(self, topic: TopicName) -> tuple[str, int] | None:
        """The current ownership term of ``topic``'s bundle: ``(bundle, version)`` of its
        OWNED record, None while it has no owner. The version grows on every unload and
        move; a split gives the topic another bundle."""
        bundle = self.bundle_of(topic)
        record = self._rows.get(bundle)
        if record is None or record.state is not BundleState.OWNED:
            return None
        return bundle, record.version

    def bundle_records(self, namespace: NamespaceName | None = None) -> dict[str, OwnershipRecord]:
        """Ownership records of current bundles (all namespaces, or one)."""
        out: dict[str, OwnershipRecord] = {}
        layouts = (
            [self.layout(namespace)] if namespace is not None else list(self._layouts.values())
        )
        for layout in layouts:
            for name in layout.names:
                record = self._rows.get(name)
                if record is not None:
                    out[name] = record
        return out


#: Read-write, for callers that need the constant.
DEFAULT_PERM = PERM_READ_WRITE
