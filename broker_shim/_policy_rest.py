"""Pulsar's topic-policy REST surface mapped onto TopicPolicies fields.

``GET|POST|DELETE /admin/v2/{domain}/{tenant}/{namespace}/{topic}/{policy}``
with ``?isGlobal=true`` and (GET) ``?applied=true``, as Pulsar's PersistentTopics.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["REST_POLICIES", "RestPolicy"]


@dataclass(frozen=True, slots=True)
class RestPolicy:
    """One REST policy path: the TopicPolicies field it sets, and Pulsar's query parameter
    alternative to a body on POST (e.g. ``POST …/messageTTL?messageTTL=60``)."""

    field: str
    query_param: str | None = None


REST_POLICIES: Final[dict[str, RestPolicy]] = {
    "maxConsumers": RestPolicy("maxConsumerPerTopic"),
    "maxProducers": RestPolicy("maxProducerPerTopic"),
    "messageTTL": RestPolicy("messageTTLInSeconds", "messageTTL"),
    "retention": RestPolicy("retentionPolicies"),
    "dispatchRate": RestPolicy("dispatchRate"),
    "subscriptionDispatchRate": RestPolicy("subscriptionDispatchRate"),
    "replicatorDispatchRate": RestPolicy("replicatorDispatchRate"),
    "publishRate": RestPolicy("publishRate"),
    "subscribeRate": RestPolicy("subscribeRate"),
    "subscriptionTypesEnabled": RestPolicy("subscriptionTypesEnabled"),
    "maxConsumersPerSubscription": RestPolicy("maxConsumersPerSubscription"),
    "maxUnackedMessagesOnConsumer": RestPolicy("maxUnackedMessagesOnConsumer"),
    "maxUnackedMessagesOnSubscription": RestPolicy("maxUnackedMessagesOnSubscription"),
    "maxSubscriptionsPerTopic": RestPolicy("maxSubscriptionsPerTopic"),
    "deduplicationEnabled": RestPolicy("deduplicationEnabled"),
    "deduplicationSnapshotInterval": RestPolicy("deduplicationSnapshotIntervalSeconds", "interval"),
    "maxMessageSize": RestPolicy("maxMessageSize"),
    "compactionThreshold": RestPolicy("compactionThreshold", "threshold"),
    "inactiveTopicPolicies": RestPolicy("inactiveTopicPolicies"),
    "persistence": RestPolicy("persistence"),
    "schemaValidationEnforced": RestPolicy("schemaValidationEnforced"),
    "replicationClusters": RestPolicy("replicationClusters"),
    "shadowTopics": RestPolicy("shadowTopics"),
}
