"""Pulsar's topic-policy REST surface mapped onto TopicPolicies fields.

``GET|POST|DELETE /admin/v2/{domain}/{tenant}/{namespace}/{topic}/{policy}``
with ``?isGlobal=true`` and (GET) ``?applied=true``, as Pulsar's PersistentTopics.

Every answer detail here was recorded from a real Pulsar 4.0.7 standalone
(``tests/compat/pulsar-4.0.7.json``): which unset policies answer 200 with an empty body
and which 204, the broker defaults ``?applied=true`` falls back to, and the status and
reason of each refused value.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from sync.errors import BadRequestError, InvalidInputError, InvalidPolicyError
from sync.messaging import validate_override

__all__ = [
    "BACKLOG_QUOTA_TYPES",
    "DEFAULT_BACKLOG_QUOTA",
    "NAMESPACE_POLICIES",
    "NAMESPACE_POLICIES_JSON",
    "REST_POLICIES",
    "RestPolicy",
    "java_boolean",
]

#: Pulsar's own refusal of a well-typed value, as the error the front end answers: 412
#: (``InvalidPolicyError``) or 400 (``BadRequestError``) with Pulsar's reason.
Check = Callable[[Any], InvalidInputError | None]

#: Pulsar's text when one of retention's limits is 0 and the other is not.
RETENTION_REASON: Final = (
    "Invalid retention policy: Setting a single time or size limit to 0 is invalid when one "
    "of the limits has a non-zero value. Use the value of -1 instead of 0 to ignore a "
    "specific limit. To disable retention both limits must be set to 0."
)
#: Pulsar's broker-level maxMessageSize default (5 MiB): the topic level may not exceed it.
BROKER_MAX_MESSAGE_SIZE: Final = 5 * 1024 * 1024


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _at_least_zero(reason: str) -> Check:
    def check(value: Any) -> InvalidInputError | None:
        return InvalidPolicyError(reason) if _int(value) and value < 0 else None

    return check


def _check_retention(value: Any) -> InvalidInputError | None:
    if not isinstance(value, dict):
        return None
    time_, size = value.get("retentionTimeInMinutes"), value.get("retentionSizeInMB")
    if _int(time_) and _int(size) and (time_ == 0) != (size == 0):
        return BadRequestError(RETENTION_REASON)
    return None


def _check_persistence(value: Any) -> InvalidInputError | None:
    if not isinstance(value, dict):
        return None
    e, w, a = (value.get(k) for k in ("bookkeeperEnsemble", "bookkeeperWriteQuorum",
                                       "bookkeeperAckQuorum"))  # fmt: skip
    if not (isinstance(e, int) and isinstance(w, int) and isinstance(a, int)):
        return None
    if not e >= w >= a:
        return BadRequestError(f"Bookkeeper Ensemble ({e}) >= WriteQuorum ({w}) >= AckQuorum ({a})")
    return None


def _check_auto_topic_creation(value: Any) -> InvalidInputError | None:
    detail = validate_override(value)
    if detail is None:
        return None
    return InvalidPolicyError(
        f"Invalid configuration for autoTopicCreationOverride. the detail is {detail}"
    )


_JACKSON_TRUE = frozenset({"true", "True", "TRUE"})
_JACKSON_FALSE = frozenset({"false", "False", "FALSE"})


def java_boolean(value: Any) -> bool:
    """A body bound to a Java ``boolean`` parameter as Pulsar 4.0.7's Jackson binds it
    (recorded from a real Pulsar): ``true``/``false``, the strings ``"true"``/``"True"``/
    ``"TRUE"`` and ``"false"``/``"False"``/``"FALSE"``, an integer (0: false, any other:
    true) and ``null`` (false, the primitive's default).

    Raises:
        BadRequestError: any other string, a floating-point number, an object or an array
            (400, with Jackson's text).
    """
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value != 0
    if isinstance(value, str):
        if value in _JACKSON_TRUE or value in _JACKSON_FALSE:
            return value in _JACKSON_TRUE
        found = f'String "{value}": only "true"/"True"/"TRUE" or "false"/"False"/"FALSE" recognized'
    elif isinstance(value, float):
        found = "Floating-point value (token `JsonToken.VALUE_NUMBER_FLOAT`)"
    elif isinstance(value, list):
        found = "Array value (token `JsonToken.START_ARRAY`)"
    else:
        found = "Object value (token `JsonToken.START_OBJECT`)"
    raise BadRequestError(f"Cannot deserialize value of type `boolean` from {found}")


def _check_max_message_size(value: Any) -> InvalidInputError | None:
    if _int(value) and not 0 <= value <= BROKER_MAX_MESSAGE_SIZE:
        return InvalidPolicyError(
            "topic-level maxMessageSize must be greater than or equal to 0 and must be "
            "smaller than that in the broker-level"
        )
    return None


@dataclass(frozen=True, slots=True)
class RestPolicy:
    """One REST policy path and how Pulsar answers it.

    ``field``: the TopicPolicies field it sets. ``query_param``: Pulsar's query parameter
    carrying the value on POST (``POST …/messageTTL?messageTTL=60``; the admin clients send
    it there). ``unset_status`` / ``unset_body``: Pulsar's answer to a read of an unset
    policy (most answer 200 with an empty body; a few 204; two a value). ``default``: the
    broker default ``?applied=true`` falls back to (None: answered like unset).
    ``check``: Pulsar's own refusal of a well-typed value. ``deletable``: Pulsar has a
    DELETE for it (405 otherwise). ``omitted``: the values Pulsar's JSON binding gives the
    fields a record body leaves out (its classes' field initializers), stored as Pulsar
    stores them. ``set_method``: the method that sets it (Pulsar's ``PUT`` for a few;
    the other is 405). ``undefined``: a value meaning "not set" (Pulsar's ``UNDEFINED``
    strategy): a topic-level write of it removes the policy, and ``?applied=true`` passes
    over it to the next level, down to ``default``. ``bind``: how Pulsar's JSON binding
    reads the value when its parameter is not bound as the stored field is (a Java
    ``boolean``: :func:`java_boolean`), before any other check.
    """

    field: str
    query_param: str | None = None
    unset_status: int = 200
    unset_body: Any = None
    default: Any = None
    check: Check | None = None
    deletable: bool = True
    omitted: Mapping[str, Any] | None = None
    set_method: str = "POST"
    undefined: Any = None
    bind: Callable[[Any], Any] | None = None

    def bound(self, value: Any) -> Any:
        """``value`` as Pulsar's JSON binding reads it (see ``bind``).

        Raises:
            BadRequestError: a value the binding refuses (400).
        """
        return value if self.bind is None else self.bind(value)

    def completed(self, value: Any) -> Any:
        """``value`` with the fields it leaves out set as Pulsar's JSON binding sets them."""
        if self.omitted is None or not isinstance(value, dict):
            return value
        return {**self.omitted, **value}


def _rate(period: int) -> dict[str, Any]:
    return {
        "dispatchThrottlingRateInMsg": 0,
        "dispatchThrottlingRateInByte": 0,
        "relativeToPublishRate": False,
        "ratePeriodInSecond": period,
    }


# What Pulsar 4.0.7 stores for the fields a rate body leaves out: 0 for DispatchRateImpl's
# fields (period included), -1 ("unlimited") for PublishRate's and SubscribeRate's rates.
# A negative rate is stored as sent and means unlimited (sync.policy._policies).
_DISPATCH_OMITTED: Final = MappingProxyType(_rate(0))
_PUBLISH_OMITTED: Final = MappingProxyType(
    {"publishThrottlingRateInMsg": -1, "publishThrottlingRateInByte": -1}
)
_SUBSCRIBE_OMITTED: Final = MappingProxyType(
    {"subscribeThrottlingRatePerConsumer": -1, "ratePeriodInSecond": 30}
)


REST_POLICIES: Final[dict[str, RestPolicy]] = {
    "maxConsumers": RestPolicy(
        "maxConsumerPerTopic", default=0, check=_at_least_zero("maxConsumers must be 0 or more")
    ),
    "maxProducers": RestPolicy(
        "maxProducerPerTopic", default=0, check=_at_least_zero("maxProducers must be 0 or more")
    ),
    "messageTTL": RestPolicy(
        "messageTTLInSeconds",
        "messageTTL",
        default=0,
        check=_at_least_zero("Invalid value for message TTL"),
    ),
    "retention": RestPolicy(
        "retentionPolicies",
        default={"retentionTimeInMinutes": 0, "retentionSizeInMB": 0},
        check=_check_retention,
    ),
    "dispatchRate": RestPolicy("dispatchRate", default=_rate(1), omitted=_DISPATCH_OMITTED),
    "subscriptionDispatchRate": RestPolicy(
        "subscriptionDispatchRate", default=_rate(1), omitted=_DISPATCH_OMITTED
    ),
    "replicatorDispatchRate": RestPolicy(
        "replicatorDispatchRate", default=_rate(1), omitted=_DISPATCH_OMITTED
    ),
    "publishRate": RestPolicy("publishRate", unset_status=204, omitted=_PUBLISH_OMITTED),
    "subscribeRate": RestPolicy(
        "subscribeRate",
        default={"subscribeThrottlingRatePerConsumer": 0, "ratePeriodInSecond": 30},
        omitted=_SUBSCRIBE_OMITTED,
    ),
    "subscriptionTypesEnabled": RestPolicy("subscriptionTypesEnabled", unset_body=[], default=[]),
    "maxConsumersPerSubscription": RestPolicy(
        "maxConsumersPerSubscription",
        unset_status=204,
        check=_at_least_zero("Invalid value for maxConsumersPerSubscription"),
    ),
    "maxUnackedMessagesOnConsumer": RestPolicy(
        "maxUnackedMessagesOnConsumer",
        default=50_000,
        check=_at_least_zero("maxUnackedNum must be 0 or more"),
    ),
    "maxUnackedMessagesOnSubscription": RestPolicy(
        "maxUnackedMessagesOnSubscription",
        default=200_000,
        check=_at_least_zero("maxUnackedNum must be 0 or more"),
    ),
    "maxSubscriptionsPerTopic": RestPolicy(
        "maxSubscriptionsPerTopic",
        unset_status=204,
        check=_at_least_zero("maxSubscriptionsPerTopic must be 0 or more"),
    ),
    "deduplicationEnabled": RestPolicy("deduplicationEnabled", default=False),
    "deduplicationSnapshotInterval": RestPolicy("deduplicationSnapshotIntervalSeconds", "interval"),
    "maxMessageSize": RestPolicy("maxMessageSize", unset_status=204, check=_check_max_message_size),
    "compactionThreshold": RestPolicy(
        "compactionThreshold",
        "threshold",
        default=0,
        check=_at_least_zero("Invalid value for compactionThreshold"),
    ),
    "inactiveTopicPolicies": RestPolicy(
        "inactiveTopicPolicies",
        # The reference Pulsar runs with brokerDeleteInactiveTopicsEnabled=false.
        default={
            "inactiveTopicDeleteMode": "delete_when_no_subscriptions",
            "maxInactiveDurationSeconds": 60,
            "deleteWhileInactive": False,
        },
    ),
    "persistence": RestPolicy(
        "persistence",
        # The reference Pulsar's managedLedgerDefault* settings (one bookie).
        default={
            "bookkeeperEnsemble": 1,
            "bookkeeperWriteQuorum": 1,
            "bookkeeperAckQuorum": 1,
            "managedLedgerMaxMarkDeleteRate": 1.0,
        },
        check=_check_persistence,
    ),
    "schemaValidationEnforced": RestPolicy(
        "schemaValidationEnforced",
        unset_body=False,
        default=False,
        deletable=False,
        bind=java_boolean,
    ),
    # Pulsar's path; the local cluster is the applied default (filled in by the handler).
    "replication": RestPolicy("replicationClusters"),
    # Kept for clients of earlier policy-sync releases (not a Pulsar path).
    "replicationClusters": RestPolicy("replicationClusters"),
    "shadowTopics": RestPolicy("shadowTopics"),
    # PUT, as Pulsar's PersistentTopics; unset answers 200 with an empty body; UNDEFINED
    # unsets it (Pulsar stores null); applied: the topic's, else the namespace's unless
    # UNDEFINED, else the broker's FULL
    "schemaCompatibilityStrategy": RestPolicy(
        "schemaCompatibilityStrategy", default="FULL", set_method="PUT", undefined="UNDEFINED"
    ),
}

#: Pulsar's namespace-level paths (``/admin/v2/namespaces/{t}/{ns}/{policy}``) of the
#: policies policy-sync stores at namespace level, with Pulsar's namespace-level checks.
NAMESPACE_POLICIES: Final[dict[str, RestPolicy]] = {
    "messageTTL": RestPolicy(
        "messageTTLInSeconds",
        check=_at_least_zero("Invalid value for message TTL, message TTL must >= 0"),
    ),
    "maxConsumersPerTopic": RestPolicy(
        "maxConsumerPerTopic", check=_at_least_zero("maxConsumersPerTopic must be 0 or more")
    ),
    "maxProducersPerTopic": RestPolicy(
        "maxProducerPerTopic", check=_at_least_zero("maxProducersPerTopic must be 0 or more")
    ),
    "maxConsumersPerSubscription": RestPolicy(
        "maxConsumersPerSubscription",
        check=_at_least_zero("maxConsumersPerSubscription must be 0 or more"),
    ),
    "maxUnackedMessagesPerConsumer": RestPolicy(
        "maxUnackedMessagesOnConsumer",
        check=_at_least_zero("maxUnackedMessagesPerConsumer must be 0 or more"),
    ),
    "maxUnackedMessagesPerSubscription": RestPolicy(
        "maxUnackedMessagesOnSubscription",
        check=_at_least_zero("maxUnackedMessagesPerSubscription must be 0 or more"),
    ),
    "maxSubscriptionsPerTopic": RestPolicy(
        "maxSubscriptionsPerTopic",
        check=_at_least_zero("maxSubscriptionsPerTopic must be 0 or more"),
    ),
    "retention": RestPolicy("retentionPolicies", check=_check_retention),
    "persistence": RestPolicy("persistence", check=_check_persistence),
    "deduplication": RestPolicy("deduplicationEnabled"),
    "dispatchRate": RestPolicy("dispatchRate", omitted=_DISPATCH_OMITTED),
    "subscriptionDispatchRate": RestPolicy("subscriptionDispatchRate", omitted=_DISPATCH_OMITTED),
    "replicatorDispatchRate": RestPolicy("replicatorDispatchRate", omitted=_DISPATCH_OMITTED),
    "subscribeRate": RestPolicy("subscribeRate", omitted=_SUBSCRIBE_OMITTED),
    "publishRate": RestPolicy("publishRate", omitted=_PUBLISH_OMITTED),
    "subscriptionTypesEnabled": RestPolicy("subscriptionTypesEnabled"),
    "inactiveTopicPolicies": RestPolicy("inactiveTopicPolicies"),
    "compactionThreshold": RestPolicy(
        "compactionThreshold", check=_at_least_zero("compactionThreshold must be 0 or more")
    ),
    # GET and POST only (a DELETE is Pulsar's bundle route: 412); Pulsar's Policies hold a
    # primitive false by default, so the unset value reads false, and the applied one too
    # (the broker's schemaValidationEnforced default)
    "schemaValidationEnforced": RestPolicy(
        "schemaValidationEnforced", unset_body=False, deletable=False, bind=java_boolean
    ),
    # a namespace policy only (Pulsar has no topic level); unset: the broker's true
    "isAllowAutoUpdateSchema": RestPolicy(
        "isAllowAutoUpdateSchema", unset_body=True, deletable=False, bind=java_boolean
    ),
    # Pulsar's namespace Policies default it to UNDEFINED (the broker's FULL applies)
    "schemaCompatibilityStrategy": RestPolicy(
        "schemaCompatibilityStrategy", unset_body="UNDEFINED", set_method="PUT"
    ),
    "autoTopicCreation": RestPolicy(
        "autoTopicCreationOverride",
        check=_check_auto_topic_creation,
        omitted=MappingProxyType({"allowAutoTopicCreation": False}),  # Java's boolean default
    ),
}

#: Where Pulsar's namespace ``Policies`` JSON (``GET /admin/v2/namespaces/{t}/{ns}``) shows
#: each TopicPolicies field stored at namespace level: (its keys, keyed by cluster name).
#: Rates are per cluster in Pulsar's Policies (``{"standalone": {...}}``).
NAMESPACE_POLICIES_JSON: Final[dict[str, tuple[tuple[str, ...], bool]]] = {
    "messageTTLInSeconds": (("message_ttl_in_seconds",), False),
    "maxConsumerPerTopic": (("max_consumers_per_topic",), False),
    "maxProducerPerTopic": (("max_producers_per_topic",), False),
    "maxConsumersPerSubscription": (("max_consumers_per_subscription",), False),
    "maxUnackedMessagesOnConsumer": (("max_unacked_messages_per_consumer",), False),
    "maxUnackedMessagesOnSubscription": (("max_unacked_messages_per_subscription",), False),
    "maxSubscriptionsPerTopic": (("max_subscriptions_per_topic",), False),
    "retentionPolicies": (("retention_policies",), False),
    "persistence": (("persistence",), False),
    "deduplicationEnabled": (("deduplicationEnabled",), False),
    "deduplicationSnapshotIntervalSeconds": (("deduplicationSnapshotIntervalSeconds",), False),
    # Pulsar writes the namespace dispatch rate under both keys (the older name kept).
    "dispatchRate": (("topicDispatchRate", "clusterDispatchRate"), True),
    "subscriptionDispatchRate": (("subscriptionDispatchRate",), True),
    "replicatorDispatchRate": (("replicatorDispatchRate",), True),
    "subscribeRate": (("clusterSubscribeRate",), True),
    "publishRate": (("publishMaxMessageRate",), True),
    "subscriptionTypesEnabled": (("subscription_types_enabled",), False),
    "inactiveTopicPolicies": (("inactive_topic_policies",), False),
    "compactionThreshold": (("compaction_threshold",), False),
    "schemaValidationEnforced": (("schema_validation_enforced",), False),
    "autoTopicCreationOverride": (("autoTopicCreationOverride",), False),
    "autoSubscriptionCreationOverride": (("autoSubscriptionCreationOverride",), False),
    "backLogQuotaMap": (("backlog_quota_map",), False),
    "schemaCompatibilityStrategy": (("schema_compatibility_strategy",), False),
    "isAllowAutoUpdateSchema": (("is_allow_auto_update_schema",), False),
}

#: ``?backlogQuotaType=`` values (Pulsar's BacklogQuotaType enum).
BACKLOG_QUOTA_TYPES: Final = ("destination_storage", "message_age")
#: Pulsar's broker default of each backlog quota type (no limit).
DEFAULT_BACKLOG_QUOTA: Final[dict[str, Any]] = {
    "limit": -1,
    "limitSize": -1,
    "limitTime": -1,
    "policy": "producer_request_hold",
}
