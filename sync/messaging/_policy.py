"""The topic policies messaging enforces, read from the effective (applied) policies.

Pulsar's conventions: ``0`` means unlimited for every ``max*`` count; ``0`` or any
negative value (Pulsar's clients send ``-1``) means unlimited for each rate component; an
unset or empty ``subscriptionTypesEnabled`` enables every type. ``dispatchRate`` limits
each partition of the topic (in Pulsar every partition is a topic of its own);
``subscriptionDispatchRate`` limits each subscription on each partition.
``relativeToPublishRate`` is not supported (ignored).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ._backlog import BacklogQuotas
from ._types import SubscriptionType

__all__ = ["RateSpec", "TopicLimits"]


@dataclass(frozen=True, slots=True)
class RateSpec:
    """A dispatch rate: at most ``msgs`` messages and ``nbytes`` bytes per ``period_s``.

    A zero component is unlimited; both zero is no throttling. The policy readers below map
    a negative rate (``-1``: unlimited in Pulsar) to zero, and a period below one second to
    one second.
    """

    msgs: int = 0
    nbytes: int = 0
    period_s: float = 1.0

    @property
    def unlimited(self) -> bool:
        """True when neither component throttles."""
        return self.msgs <= 0 and self.nbytes <= 0

    @classmethod
    def from_publish_rate(cls, value: Mapping[str, Any] | None) -> RateSpec:
        """From a ``PublishRate`` policy record (per second; absent: unlimited)."""
        if not value:
            return cls()
        return cls(
            msgs=max(0, int(value.get("publishThrottlingRateInMsg") or 0)),
            nbytes=max(0, int(value.get("publishThrottlingRateInByte") or 0)),
        )

    @classmethod
    def from_subscribe_rate(cls, value: Mapping[str, Any] | None) -> RateSpec:
        """From a ``SubscribeRate`` policy record: subscribes per consumer per period."""
        if not value:
            return cls()
        period = value.get("ratePeriodInSecond") or 30
        return cls(
            msgs=max(0, int(value.get("subscribeThrottlingRatePerConsumer") or 0)),
            period_s=float(max(1, int(period))),
        )

    @classmethod
    def from_policy(cls, value: Mapping[str, Any] | None) -> RateSpec:
        """From a ``DispatchRate`` policy record (absent: unlimited)."""
        if not value:
            return cls()
        period = value.get("ratePeriodInSecond") or 1
        return cls(
            msgs=max(0, int(value.get("dispatchThrottlingRateInMsg") or 0)),
            nbytes=max(0, int(value.get("dispatchThrottlingRateInByte") or 0)),
            period_s=float(max(1, int(period))),
        )


_ALL_TYPES = frozenset(SubscriptionType)


@dataclass(frozen=True, slots=True)
class TopicLimits:
    """The messaging policies of one topic, as effective right now."""

    types_enabled: frozenset[SubscriptionType] = _ALL_TYPES
    max_consumers_per_subscription: int = 0
    max_consumers_per_topic: int = 0
    max_producers_per_topic: int = 0
    max_subscriptions_per_topic: int = 0
    max_unacked_per_consumer: int = 0
    max_message_size: int = 1_000_000
    dispatch_rate: RateSpec = RateSpec()
    subscription_dispatch_rate: RateSpec = RateSpec()
    #: ``messageTTLInSeconds``: older messages are acknowledged for every subscription.
    message_ttl_s: int = 0
    #: ``backLogQuotaMap``.
    backlog: BacklogQuotas = BacklogQuotas()
    #: ``deduplicationEnabled`` and ``deduplicationSnapshotIntervalSeconds`` (0: default).
    dedup_enabled: bool = False
    dedup_snapshot_s: int = 0
    #: ``publishRate`` (per partition), ``subscribeRate`` (per consumer name),
    #: ``maxUnackedMessagesOnSubscription``.
    publish_rate: RateSpec = RateSpec()
    subscribe_rate: RateSpec = RateSpec()
    max_unacked_per_subscription: int = 0
    #: ``delayedDeliveryEnabled`` (Pulsar's broker default: on), ``…TickTimeMillis``,
    #: ``…MaxDelayInMillis`` (0: no maximum).
    delayed_enabled: bool = True
    delayed_tick_ms: int = 1000
    delayed_max_ms: int = 0

    @classmethod
    def from_policies(
        cls, policies: Mapping[str, Any], *, default_max_message_size: int
    ) -> TopicLimits:
        """Extract the messaging limits from effective topic policies."""
        types = policies.get("subscriptionTypesEnabled")
        enabled = frozenset(SubscriptionType(t) for t in types) if types else _ALL_TYPES
        size = int(policies.get("maxMessageSize") or 0)
        return cls(
            types_enabled=enabled,
            max_consumers_per_subscription=int(policies.get("maxConsumersPerSubscription") or 0),
            max_consumers_per_topic=int(policies.get("maxConsumerPerTopic") or 0),
            max_producers_per_topic=int(policies.get("maxProducerPerTopic") or 0),
            max_subscriptions_per_topic=int(policies.get("maxSubscriptionsPerTopic") or 0),
            max_unacked_per_consumer=int(policies.get("maxUnackedMessagesOnConsumer") or 0),
            max_message_size=size if size > 0 else default_max_message_size,
            dispatch_rate=RateSpec.from_policy(policies.get("dispatchRate")),
            subscription_dispatch_rate=RateSpec.from_policy(
                policies.get("subscriptionDispatchRate")
            ),
            message_ttl_s=max(0, int(policies.get("messageTTLInSeconds") or 0)),
            backlog=BacklogQuotas.from_policy(policies.get("backLogQuotaMap")),
            dedup_enabled=bool(policies.get("deduplicationEnabled")),
            dedup_snapshot_s=int(policies.get("deduplicationSnapshotIntervalSeconds") or 0),
            publish_rate=RateSpec.from_publish_rate(policies.get("publishRate")),
            subscribe_rate=RateSpec.from_subscribe_rate(policies.get("subscribeRate")),
            max_unacked_per_subscription=int(policies.get("maxUnackedMessagesOnSubscription") or 0),
            delayed_enabled=policies.get("delayedDeliveryEnabled") is not False,
            delayed_tick_ms=int(policies.get("delayedDeliveryTickTimeMillis") or 1000),
            delayed_max_ms=int(policies.get("delayedDeliveryMaxDelayInMillis") or 0),
        )

    def type_enabled(self, sub_type: SubscriptionType) -> bool:
        """Whether consumers of ``sub_type`` may attach."""
        return sub_type in self.types_enabled
