"""Following the policies of the topics served here: their limits read from the policy
cache, and re-applied when the cache reports a change to a key that concerns a live
topic (its own, its global twin or its namespace's), periodically, and when the sidecar
replaced its policy service.

What a change does to the live connections is the engine's (``apply``: see
``_live_limits``); this module only decides when to read the limits again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from sync import CacheState, PolicyService, PolicyTarget
from sync._constants import GLOBAL_KEY_PREFIX, NAMESPACE_KEY_PREFIX
from sync._errors import CacheStateError
from sync.naming._names import TopicName
from sync.policy._policies import Policies

from ._config import MessagingConfig
from ._policy import TopicLimits
from ._topic_state import TopicState

logger = logging.getLogger(__name__)

__all__ = ["PolicyFollower"]


class PolicyFollower:
    """Reads the topics' limits and re-applies them when their policies change.

    Args:
        policies: returns the current policy service (or None while starting).
        topics: the engine's topics loaded here (shared, read only).
        config: the engine's settings, read each time.
        loop: the engine's serving loop (None until it starts).
        apply: makes new limits a topic's limits (on the loop).
    """

    def __init__(
        self,
        policies: Callable[[], PolicyService | None],
        topics: dict[TopicName, TopicState],
        config: Callable[[], MessagingConfig],
        loop: Callable[[], asyncio.AbstractEventLoop | None],
        apply: Callable[[TopicState, TopicLimits], None],
    ) -> None:
        self._policies = policies
        self._topics = topics
        self._config = config
        self._loop = loop
        self._apply = apply
        self._service: PolicyService | None = None
        self._remove_listener: Callable[[], None] | None = None
        self._live_keys: frozenset[str] = frozenset()

    def read_limits(self, topic: TopicName) -> TopicLimits:
        """The topic's messaging limits from the effective policies, right now.

        Raises:
            CacheStateError: no policy service, or its cache is not READY (fail closed).
        """
        svc = self._policies()
        if svc is None:
            raise CacheStateError("policy cache is STARTING, not READY; retry shortly")
        state = svc.cache.state
        if state is not CacheState.READY:
            raise CacheStateError(f"policy cache is {state.value}, not READY; retry shortly")
        policies: Policies = svc.applied(topic.base)
        return TopicLimits.from_policies(
            policies, default_max_message_size=self._config().default_max_message_size
        )

    def _listener(self, key: str, _value: Policies | None) -> None:
        # Cache listener thread: forward only keys that concern a live topic.
        loop = self._loop()
        if key in self._live_keys and loop is not None:
            try:
                loop.call_soon_threadsafe(self._key_changed, key)
            except RuntimeError:  # the loop is closed
                pass

    def update_live_keys(self) -> None:
        """The topic table changed: listen to the keys of the topics loaded now."""
        keys: set[str] = set()
        for topic in self._topics:
            keys.add(topic.canonical)
            keys.add(GLOBAL_KEY_PREFIX + topic.canonical)
            keys.add(f"{NAMESPACE_KEY_PREFIX}{topic.tenant}/{topic.namespace}")
        self._live_keys = frozenset(keys)

    def _key_changed(self, key: str) -> None:
        try:
            target = PolicyTarget.from_key(key)
        except Exception:
            return
        for ts in list(self._topics.values()):
            if target.topic is None:
                hit = (ts.topic.tenant, ts.topic.namespace) == (target.tenant, target.namespace)
            else:
                hit = ts.topic == target.topic
            if hit:
                self.refresh(ts)

    def refresh(self, ts: TopicState) -> None:
        """Re-read the topic's policies and apply them to its live connections."""
        try:
            limits = self.read_limits(ts.topic)
        except CacheStateError:
            return  # keep enforcing the last known policies
        except Exception:
            logger.exception("reading policies of %s failed", ts.topic)
            return
        self._apply(ts, limits)

    async def refresh_all(self) -> None:
        """Re-read the policies of every topic loaded here (the periodic re-read)."""
        for ts in list(self._topics.values()):
            self.refresh(ts)

    async def follow_service(self) -> None:
        """Listen to the current policy service (the sidecar may have restarted it)."""
        svc = self._policies()
        if svc is self._service:
            return
        self.stop()
        self._service = svc
        if svc is not None:
            self._remove_listener = svc.add_listener(self._listener)
        await self.refresh_all()

    def stop(self) -> None:
        """Stop listening to the policy service's changes."""
        if self._remove_listener is not None:
            self._remove_listener()
            self._remove_listener = None
