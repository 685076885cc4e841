"""The ownership watch: the connections to a name this sidecar no longer serves are
closed (cause UNLOADED, so that clients reconnect and are redirected).

A name moved to another owner, or unloaded and taken again here under a new ownership
term, is noticed by the periodic :meth:`OwnershipWatch.check`; the term a name is served
under is remembered when it is first used (:meth:`OwnershipWatch.note_claim`). A bundle
moving away closes its names at once, before the move completes
(:meth:`OwnershipWatch.release_blocking`, called from the ownership member's thread): the
periodic check is only a backstop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
from collections.abc import Awaitable, Callable

from sync._errors import UnavailableError
from sync.naming._names import TopicName

from ._consumer import CloseCause, CloseReason
from ._ownership import TopicOwnership
from ._topic_state import TopicState

logger = logging.getLogger(__name__)

__all__ = ["OwnershipWatch", "Unloader"]

#: Closes the connections to ``name`` of a topic (``MessagingEngine._unload``).
Unloader = Callable[[TopicState, CloseReason, TopicName], Awaitable[None]]


class OwnershipWatch:
    """Closes the connections to names served elsewhere now, or unloaded meanwhile.

    Args:
        ownership: who owns a topic.
        topics: the engine's topics loaded here (shared, read only).
        unload: closes the connections that used a name.
        closing: True while the engine shuts down (an unknown owner is then expected).
        loop: the engine's serving loop (None until it starts).
        release_wait_s: the engine's ``release_wait_s``, read each time.
    """

    def __init__(
        self,
        ownership: TopicOwnership,
        topics: dict[TopicName, TopicState],
        unload: Unloader,
        closing: Callable[[], bool],
        loop: Callable[[], asyncio.AbstractEventLoop | None],
        release_wait_s: Callable[[], float],
    ) -> None:
        self.ownership = ownership
        self._topics = topics
        self._unload = unload
        self._closing = closing
        self._loop = loop
        self._release_wait_s = release_wait_s

    async def check(self) -> None:
        """Close the connections to names served elsewhere now, or unloaded meanwhile.

        Ownership is asked by the name each client used: a base topic, or one partition
        of it (Pulsar clients look each partition up on its own, and the partitions of
        one topic may be owned by different sidecars).
        """
        for ts in list(self._topics.values()):
            names = ts.names()
            for gone in set(ts.owner_claims) - names:
                del ts.owner_claims[gone]
            for name in sorted(names, key=str):
                reason = await self.moved(ts, name)
                if reason is not None:
                    await self._unload(ts, reason, name)

    def release_blocking(self, moving: Callable[[TopicName], bool]) -> None:
        """Close, now, the connections to every name ``moving`` accepts, and wait until
        they are closed (at most ``release_wait_s``); any thread but the loop's.

        The ownership member calls this while a bundle moves away, before another sidecar
        may claim it: the topics' acknowledgements are committed and their clients told to
        reconnect first, so two sidecars never serve a partition of a subscription at once
        (the newer would deliver again, with redelivery count 0, what the older delivered
        meanwhile). The periodic ownership check is only a backstop.
        """
        loop = self._loop()
        if loop is None or self._closing() or loop.is_closed():
            return
        future = asyncio.run_coroutine_threadsafe(self.release(moving), loop)
        with contextlib.suppress(RuntimeError):
            if asyncio.get_running_loop() is loop:
                return  # called on the loop itself: it runs once this returns
        wait_s = self._release_wait_s()
        try:
            future.result(timeout=wait_s)
        except concurrent.futures.TimeoutError:
            logger.warning(
                "topics of a moving bundle not closed within %.0fs; the move goes on", wait_s
            )
        except Exception:
            logger.exception("closing the topics of a moving bundle failed")

    async def release(self, moving: Callable[[TopicName], bool]) -> None:
        """Close the connections to every name in use that ``moving`` accepts (cause
        UNLOADED: clients look the topic up again and find its new owner)."""
        reason = CloseReason(
            CloseCause.UNLOADED, "Topic ownership moved; reconnect to be redirected"
        )
        for ts in list(self._topics.values()):
            for name in sorted(ts.names(), key=str):
                if moving(name):
                    logger.info("%s is moving away: unloading it", name)
                    await self._unload(ts, reason, name)

    async def moved(self, ts: TopicState, name: TopicName) -> CloseReason | None:
        """Why the connections to ``name`` must close now (None: they stay)."""
        try:
            owner = await self.ownership.owner_of(name)
        except UnavailableError as exc:
            # The lookup service is starting, recovering or stopping: an expected
            # state (no traceback); asked again at the next check.
            level = logging.DEBUG if self._closing() else logging.WARNING
            logger.log(level, "owner of %s unknown (%s); keeping it", name, exc)
            return None
        except Exception:
            logger.exception("ownership lookup of %s failed; keeping it", name)
            return None
        if not owner.local:
            logger.info("%s is now owned by %s: unloading", name, owner.http_url)
            return CloseReason(
                CloseCause.UNLOADED, "Topic ownership moved; reconnect to be redirected"
            )
        if owner.claim is None:
            return None
        seen = ts.owner_claims.get(name)
        ts.owner_claims[name] = (owner.bundle, owner.claim)
        if seen is None or seen == (owner.bundle, owner.claim) or seen[0] != owner.bundle:
            return None  # first seen, the same term, or split into a bundle owned here too
        logger.info(
            "%s was unloaded (ownership of %s: term %s, now %s): closing its clients",
            name,
            owner.bundle,
            seen[1],
            owner.claim,
        )
        return CloseReason(CloseCause.UNLOADED, "Topic was unloaded; reconnect")

    async def note_claim(self, ts: TopicState, name: TopicName) -> None:
        """Remember the ownership term ``name`` is served under when first used, so that
        an unload between now and the next check is noticed too."""
        if name not in ts.owner_claims:
            claim = await self.claim_of(name)
            if claim is not None:
                ts.owner_claims.setdefault(name, claim)

    async def claim_of(self, topic: TopicName) -> tuple[str | None, str] | None:
        """The ownership term a topic is loaded under (None if unknown right now: the
        first ownership check records it)."""
        try:
            owner = await self.ownership.owner_of(topic)
        except Exception as exc:  # noqa: BLE001 - best effort; the periodic check retries
            logger.debug("ownership term of %s unknown: %s", topic, exc)
            return None
        if not owner.local or owner.claim is None:
            return None
        return owner.bundle, owner.claim
