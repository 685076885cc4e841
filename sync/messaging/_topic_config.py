"""The topic config reconciler: policies that live in the Kafka topic's own configuration.

Which policy maps to which Kafka topic config (``None``: the per-topic override is removed
and the broker default applies again):

======================== ====================== ==============================================
policy                   Kafka topic config     mapping
======================== ====================== ==============================================
retentionPolicies        ``retention.ms``       minutes × 60 000; ``-1`` infinite; ``0`` none
  .retentionTimeInMinutes
retentionPolicies        ``retention.bytes``    MB × 1 MiB per partition; ``-1`` infinite;
  .retentionSizeInMB                            ``0`` none
maxMessageSize           ``max.message.bytes``  size + 16 KiB record overhead, only above
                                                Kafka's default (1 048 588): smaller sizes are
                                                enforced by the engine per send, because a
                                                smaller Kafka limit refuses whole batches
persistence              ``min.insync.replicas`` the ack quorum (write quorum and ensemble must
                                                not exceed the topic's replication factor:
                                                refused when written, see ``_policy_rules``)
======================== ====================== ==============================================

Pulsar keeps a message for the retention time *after* every subscription acknowledged it,
and never deletes unacknowledged messages for retention; Kafka deletes a segment once it
is older (or the partition larger) than the limit, acknowledged or not. Retention ``0``
(Pulsar: delete as soon as acknowledged) has no Kafka equivalent and keeps the broker
default. The reconciler runs in every sidecar and applies a topic's config only where the
topic's bundle is owned (``TopicOwnership``): on every change of these policies of the
topic, of its global policies or of its namespace (a write of any other policy wakes
nothing), and by a periodic sweep over every mapped Kafka topic
(which also repairs a config changed behind its back, and applies what changed while no
sidecar owned the bundle).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

from sync import CacheState, PolicyService, PolicyTarget
from sync._errors import InvalidTopicNameError, NotFoundError
from sync.naming._kafka_names import kafka_topic_of, pulsar_topic_of
from sync.naming._names import TopicName
from sync.transport import Admin, Transport

from ._ownership import TopicOwnership

logger = logging.getLogger(__name__)

__all__ = [
    "KAFKA_DEFAULT_MAX_MESSAGE_BYTES",
    "MANAGED_KEYS",
    "RECORD_OVERHEAD_BYTES",
    "TopicConfigReconciler",
    "desired_topic_config",
]

#: The Kafka topic configs the reconciler owns (every other key is left alone).
MANAGED_KEYS: Final = (
    "retention.ms",
    "retention.bytes",
    "max.message.bytes",
    "min.insync.replicas",
)
#: The policies that map to a Kafka topic config (see the table above).
CONFIG_POLICIES: Final = ("retentionPolicies", "maxMessageSize", "persistence")
#: Kafka's default ``max.message.bytes`` (a record batch, after compression).
KAFKA_DEFAULT_MAX_MESSAGE_BYTES: Final = 1_048_588
#: Room for the key, the properties (headers) and the batch header of a maximal message.
RECORD_OVERHEAD_BYTES: Final = 16_384
_MINUTE_MS: Final = 60_000
_MB: Final = 1024 * 1024
#: Back-off of a topic whose ownership is not known yet: first retry, doubling, cap.
RETRY_FIRST_S: Final = 0.2
RETRY_MAX_S: Final = 10.0


def desired_topic_config(policies: Mapping[str, Any]) -> dict[str, str | None]:
    """Every managed key's wanted per-topic value (``None``: no override), from effective
    policies."""
    out: dict[str, str | None] = dict.fromkeys(MANAGED_KEYS)
    retention = policies.get("retentionPolicies")
    if retention:
        minutes = int(retention.get("retentionTimeInMinutes") or 0)
        size_mb = int(retention.get("retentionSizeInMB") or 0)
        if minutes != 0:
            out["retention.ms"] = "-1" if minutes < 0 else str(minutes * _MINUTE_MS)
        if size_mb != 0:
            out["retention.bytes"] = "-1" if size_mb < 0 else str(size_mb * _MB)
    size = int(policies.get("maxMessageSize") or 0)
    if size > 0 and size + RECORD_OVERHEAD_BYTES > KAFKA_DEFAULT_MAX_MESSAGE_BYTES:
        out["max.message.bytes"] = str(size + RECORD_OVERHEAD_BYTES)
    persistence = policies.get("persistence")
    if persistence:
        ack = int(persistence.get("bookkeeperAckQuorum") or 0)
        if ack > 0:
            out["min.insync.replicas"] = str(ack)
    return out


def _plan(
    desired: Mapping[str, str | None], overrides: Mapping[str, str]
) -> tuple[dict[str, str], list[str]]:
    set_ = {k: v for k, v in desired.items() if v is not None and overrides.get(k) != v}
    delete = [k for k, v in desired.items() if v is None and k in overrides]
    return set_, delete


PolicySource = Callable[[], PolicyService | None]


class TopicConfigReconciler:
    """Keeps the Kafka topic config of every locally owned topic equal to its policies.

    Args:
        transport: the Kafka seam (its admin client alters configs).
        policies: returns the current policy service (or None while starting).
        ownership: whether a topic's bundle is owned here.
        sweep_s: period of the full sweep over every mapped Kafka topic.
    """

    def __init__(
        self,
        transport: Transport,
        policies: PolicySource,
        ownership: TopicOwnership,
        *,
        sweep_s: float = 30.0,
    ) -> None:
        self._transport = transport
        self._policies = policies
        self._ownership = ownership
        self._sweep_s = sweep_s
        self._admin: Admin | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: set[str] = set()
        #: topic -> (failed attempts in a row, monotonic time of the next try)
        self._retry: dict[TopicName, tuple[int, float]] = {}
        self._wake = asyncio.Event()
        self._service: PolicyService | None = None
        self._remove_listener: Callable[[], None] | None = None
        self._task: asyncio.Task[None] | None = None
        #: topic -> the desired config last found (or made) equal to Kafka's: a policy
        #: write that leaves it unchanged costs no admin call (the sweep still verifies).
        self._verified: dict[TopicName, dict[str, str | None]] = {}
        #: key -> its own config policies as last seen changing (cache listener thread):
        #: a change of any other policy cannot change a topic config and wakes nothing.
        self._config_of_key: dict[str, tuple[Any, ...]] = {}
        #: How many config changes were applied (for tests and metrics).
        self.applied = 0

    async def start(self) -> None:
        """Start reconciling (call on the serving event loop)."""
        self._loop = asyncio.get_running_loop()
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="topic-config-reconciler")

    async def close(self) -> None:
        """Stop reconciling."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._remove_listener is not None:
            self._remove_listener()
            self._remove_listener = None

    def _listener(self, key: str, value: Mapping[str, Any] | None) -> None:
        # Cache listener thread.
        loop = self._loop
        if loop is None:
            return
        config = () if value is None else tuple(value.get(name) for name in CONFIG_POLICIES)
        if self._config_of_key.get(key) == config:
            return  # e.g. a maxConsumers write: no topic config can change
        self._config_of_key[key] = config
        try:
            loop.call_soon_threadsafe(self._key_changed, key)
        except RuntimeError:  # the loop is closed
            pass

    def _key_changed(self, key: str) -> None:
        self._pending.add(key)
        self._wake.set()

    def _admin_client(self) -> Admin:
        if self._admin is None:
            self._admin = self._transport.admin()
        return self._admin

    async def _run(self) -> None:
        last_sweep = 0.0
        while True:
            try:
                svc = self._policies()
                if svc is not self._service:
                    if self._remove_listener is not None:
                        self._remove_listener()
                        self._remove_listener = None
                    self._service = svc
                    self._config_of_key = {}
                    if svc is not None:
                        self._remove_listener = svc.cache.add_listener(self._listener)
                    last_sweep = 0.0
                if svc is not None and svc.cache.state is CacheState.READY:
                    await self._changed()
                    if time.monotonic() - last_sweep >= self._sweep_s:
                        last_sweep = time.monotonic()
                        for topic in await self.mapped_topics(""):
                            if self._pending:  # a write waits for no sweep
                                await self._changed()
                            await self.reconcile(topic, verify=True)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("topic config reconciler failed; continuing")
            self._wake.clear()
            # asyncio.timeout, not wait_for: Python 3.11's wait_for swallows a cancel
            # that arrives as the event is set, and close() then waited forever.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._next_wait()):
                    await self._wake.wait()

    def _next_wait(self) -> float:
        """Seconds until the earliest retry is due (at most 1 s, the idle poll)."""
        if not self._retry:
            return 1.0
        due = min(at for _, at in self._retry.values())
        return min(1.0, max(0.0, due - time.monotonic()))

    async def _changed(self) -> None:
        """Reconcile the topics whose policies changed (and the retries that are due)."""
        keys, self._pending = self._pending, set()
        now = time.monotonic()
        for topic in [t for t, (_, at) in self._retry.items() if at <= now]:
            await self.reconcile(topic)
        for key in keys:
            for topic in await self._topics_of_key(key):
                await self.reconcile(topic)

    def _schedule_retry(self, topic: TopicName, exc: Exception) -> None:
        attempts = self._retry.get(topic, (0, 0.0))[0] + 1
        delay = min(RETRY_FIRST_S * 2 ** (attempts - 1), RETRY_MAX_S)
        self._retry[topic] = (attempts, time.monotonic() + delay)
        # One warning per topic and outage; the repeats only at debug level.
        log = logger.warning if attempts == 1 else logger.debug
        log("ownership of %s unknown (%s); retry %d in %.1fs", topic, exc, attempts, delay)

    async def mapped_topics(self, prefix: str = "") -> list[TopicName]:
        """Every persistent Pulsar topic backed by a Kafka topic starting with ``prefix``."""
        names = await asyncio.to_thread(self._admin_client().list_topics, prefix)
        out = []
        for name in names:
            if not name.startswith("p."):
                continue  # internal topics, non-persistent topics
            try:
                out.append(pulsar_topic_of(name))
            except InvalidTopicNameError:
                continue
        return out

    async def _topics_of_key(self, key: str) -> list[TopicName]:
        try:
            target = PolicyTarget.from_key(key)
        except Exception:
            return []
        if target.topic is not None:
            return [target.topic]
        # Every topic of the namespace: the mapped Kafka names share this prefix.
        probe = kafka_topic_of(
            TopicName.parse(f"persistent://{target.tenant}/{target.namespace}/x")
        )
        return await self.mapped_topics(probe[: -len("x")])

    async def reconcile(self, topic: TopicName, *, verify: bool = False) -> bool:
        """Apply ``topic``'s policies to its Kafka topic if owned here; True if changed.

        Unless ``verify``, a topic whose desired config is the one last found in Kafka is
        not asked again (a write of an unrelated policy costs no admin round trip).
        """
        svc = self._policies()
        if svc is None or svc.cache.state is not CacheState.READY:
            return False
        try:
            local = (await self._ownership.owner_of(topic)).local
        except NotFoundError as exc:
            # No namespace (yet): nothing to own. Created later, the sweep applies it.
            self._retry.pop(topic, None)
            logger.debug("%s not reconciled: %s", topic, exc)
            return False
        except Exception as exc:
            # e.g. the lookup service is still starting: try again, backing off.
            self._schedule_retry(topic, exc)
            return False
        self._retry.pop(topic, None)
        if not local:
            self._verified.pop(topic, None)
            return False
        desired = desired_topic_config(svc.applied(topic.base))
        if not verify and self._verified.get(topic) == desired:
            return False
        kafka_topic = kafka_topic_of(topic)
        admin = self._admin_client()
        overrides = await asyncio.to_thread(admin.topic_overrides, kafka_topic)
        if overrides is None:
            self._verified.pop(topic, None)
            return False  # no Kafka topic (yet): applied by the sweep once it exists
        set_, delete = _plan(desired, overrides)
        if not set_ and not delete:
            self._verified[topic] = desired
            return False
        min_isr = set_.get("min.insync.replicas")
        if min_isr is not None:
            desc = await asyncio.to_thread(admin.describe_topic, kafka_topic)
            rf = -1 if desc is None else desc.replication_factor
            if 0 < rf < int(min_isr):
                # Every acks=all write would fail: keep the topic writable, say why.
                logger.error(
                    "%s: persistence ack quorum %s exceeds the replication factor %d; "
                    "min.insync.replicas not changed",
                    kafka_topic,
                    min_isr,
                    rf,
                )
                del set_["min.insync.replicas"]
                if not set_ and not delete:
                    return False
        self._verified.pop(topic, None)  # verified again by the next reconcile
        await asyncio.to_thread(admin.alter_topic_config, kafka_topic, set_, delete)
        self.applied += 1
        logger.info("%s: topic config set %s, reset %s", kafka_topic, set_, delete)
        return True
