"""The sidecar's cluster service (registry, ownership, lookups), kept alive.

:class:`LiveCluster` holds the current incarnation of :class:`sync.cluster.ClusterService`:
the one supervisor (:mod:`broker_shim._supervisor`) replaces a FAILED one with a fresh
incarnation, and every reader (the admin and lookup routes, /health, the binary
protocol's lookups, the messaging engine's :class:`LookupOwnership` and
:class:`LiveTopicEpochs`) reads ``live.service`` each time, so none keeps a closed one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aiohttp import web

from sync import TopicName, UnavailableError
from sync.cluster import ClusterService, MemberState, ServiceState
from sync.messaging import OwnerInfo

from ._supervisor import Backoff, supervise

__all__ = ["LiveCluster", "LiveTopicEpochs", "LookupOwnership"]


class LiveCluster:
    """The live incarnation of this sidecar's :class:`ClusterService`."""

    def __init__(self, service: ClusterService) -> None:
        self.service = service
        #: Incarnations started by the supervisor after a failure.
        self.restarts = 0
        self._release: Callable[[Callable[[TopicName], bool]], None] | None = None

    def on_release(self, hook: Callable[[Callable[[TopicName], bool]], None]) -> None:
        """Tell ``hook`` (from the ownership thread) which topics stop being served here
        when bundles move away, on this incarnation and every later one: it closes them
        before another sidecar may claim their bundles
        (:meth:`sync.cluster.ClusterService.on_release`)."""
        self._release = hook
        self.service.on_release(hook)

    def serve_with(self, app: web.Application, *, restart_backoff_s: float = 0.5) -> None:
        """Start the service with ``app``, supervise it, and leave the cluster first when
        ``app`` stops (as a Pulsar broker unloads its bundles first: the next owners claim
        them while this sidecar still closes its clients and caches).

        Call before any other start-up step is registered on ``app``: the cluster starts
        first and leaves first.
        """
        supervisor: list[asyncio.Task[None]] = []

        async def start(_app: web.Application) -> None:
            await asyncio.to_thread(self.service.start)
            backoff = Backoff(initial_s=restart_backoff_s, max_s=4.0)
            supervisor.append(asyncio.create_task(self.supervise(backoff)))

        async def leave(_app: web.Application) -> None:
            # On shutdown and again on cleanup, for a start that failed before the
            # shutdown steps (a no-op otherwise).
            for task in supervisor:
                task.cancel()
            await asyncio.to_thread(self.service.close)

        app.on_startup.append(start)
        app.on_shutdown.append(leave)
        app.on_cleanup.append(leave)

    async def supervise(self, backoff: Backoff) -> None:
        """Replace the service with a fresh incarnation whenever it (or its ownership
        member) FAILED, e.g. Kafka was unreachable at start or a process with the same
        broker id fenced this one.

        The back-off stops at 4 s: once Kafka is back, /health is 200 again within seconds,
        not after a 30 s back-off (issue 11). ``service`` is swapped before the fresh
        incarnation starts.
        """

        def failure() -> str | None:
            service = self.service
            if service.state is ServiceState.FAILED or service.member.state is MemberState.FAILED:
                return f"cluster service of {service.identity.broker_id}: " + str(
                    service.failure or service.member.failure
                )
            return None

        def healthy() -> bool:
            service = self.service
            ready = service.state is ServiceState.READY
            return ready and service.member.state is not MemberState.FAILED

        def start_fresh() -> None:
            fresh = self.service.restarted()
            if self._release is not None:
                fresh.on_release(self._release)
            self.service = fresh
            self.restarts += 1
            fresh.start()

        await supervise(
            "cluster service",
            failure=failure,
            healthy=healthy,
            close_failed=lambda: self.service.close(),
            start_fresh=start_fresh,
            backoff=backoff,
        )


class LookupOwnership:
    """This sidecar's lookups as the messaging engine's ``TopicOwnership`` (issue 5):
    a topic is local when this incarnation owns its bundle, else served at the owner's
    ``httpUrl``."""

    def __init__(self, cluster: LiveCluster) -> None:
        self.cluster = cluster

    async def owner_of(self, topic: TopicName) -> OwnerInfo:
        """The live owner of ``topic``'s bundle (claimed first if it has none).

        Raises:
            UnavailableError: not ready, no owner in time, or the bundle is moving.
            NotFoundError: the topic's namespace does not exist.
        """
        service = self.cluster.service
        service.require_ready()
        live = await service.lookups.owner_of(topic)
        local = (
            live.broker_id == service.identity.broker_id and live.incarnation == service.incarnation
        )
        term = service.lookups.claim_of(topic) if local else None
        if local and not service.member.holds(service.lookups.bundle_of(topic)):
            # Its slot is being revoked (or was lost): the bundle is on its way elsewhere.
            raise UnavailableError(
                f"Namespace bundle of {topic} is being unloaded; redo the lookup"
            )
        return OwnerInfo(
            local=local,
            http_url=live.registration.http_url,
            bundle=None if term is None else term[0],
            claim=None if term is None else str(term[1]),
        )


class LiveTopicEpochs:
    """The registry's topic epochs (:class:`sync.cluster.ClusterService`'s ``epochs``) as
    the messaging engine's ``TopicEpochStore``: durable across restarts and bundle moves."""

    def __init__(self, cluster: LiveCluster) -> None:
        self.cluster = cluster

    def current(self, topic: TopicName) -> int | None:
        """``topic``'s epoch as this sidecar's registry view has it."""
        return self.cluster.service.epochs.current(topic)

    def take(self, topic: TopicName, decide: Callable[[int | None], int]) -> int:
        """Decide and store ``topic``'s epoch through the fenced metadata writer.

        Raises:
            UnavailableError: the cluster service is not ready.
            whatever ``decide`` raises (nothing written then).
        """
        service = self.cluster.service
        service.require_ready()
        return service.epochs.take(topic, decide)
