"""The requests of the differential test against the real Apache Pulsar (issue 13, item 5).

One ordered script of admin, lookup and topic-policy requests, good and bad, sent the same
way to a real Pulsar standalone (``record``) and to a sidecar (``compare``). The order
matters: the first requests create the tenant, namespace and topics the later ones use,
the last ones delete them again (so a re-recording on a reused Pulsar starts clean).

Names: tenant ``compat``, namespace ``compat/ns``; topics ``np`` (non-partitioned),
``pt`` (4 partitions), ``pv`` (created with the ``vnd.partitioned-topic-metadata`` body)
and ``missing`` (never created); ``compat/nons`` and tenant ``nott`` never exist.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Final, Literal

__all__ = ["CASES", "Case", "Compare", "Settle"]

Compare = Literal["full", "status"]
Settle = Literal["set", "unset"]

TENANT: Final = "compat"
NS: Final = f"{TENANT}/ns"
TOPIC_ROOT: Final = f"/admin/v2/persistent/{NS}"
VND_JSON: Final = "application/vnd.partitioned-topic-metadata+json"


@dataclass(frozen=True, slots=True)
class Case:
    """One request and how its answer is compared.

    ``compare``: ``full`` = status and normalized body; ``status`` = the status only (used
    where Pulsar's body is Jackson's parser text, which names Java classes and columns).
    ``settle``: Pulsar applies topic policies asynchronously (through its system topic), so
    a read right after a write may still see the old value; both sides are polled (bounded)
    until the read shows the value (``set``) or shows none (``unset``).
    ``unordered``: the body's lists (at any depth) are sets: their order carries no meaning
    (sorted before compare).
    """

    name: str
    method: str
    path: str
    body: str | None = None
    content_type: str = "application/json"
    compare: Compare = "full"
    settle: Settle | None = None
    unordered: bool = False


def _j(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


# (REST name, a valid value, a value Pulsar refuses or cannot parse)
POLICY_VALUES: Final[tuple[tuple[str, object, object], ...]] = (
    ("maxConsumers", 10, -1),
    ("maxProducers", 10, -1),
    ("messageTTL", 60, -5),
    ("retention", {"retentionTimeInMinutes": 60, "retentionSizeInMB": 100},
     {"retentionTimeInMinutes": 0, "retentionSizeInMB": 10}),
    ("dispatchRate", {"dispatchThrottlingRateInMsg": 100, "dispatchThrottlingRateInByte": 1000,
                      "relativeToPublishRate": False, "ratePeriodInSecond": 1},
     {"dispatchThrottlingRateInMsg": "x"}),
    ("subscriptionDispatchRate",
     {"dispatchThrottlingRateInMsg": 50, "dispatchThrottlingRateInByte": 500,
      "relativeToPublishRate": False, "ratePeriodInSecond": 1},
     {"dispatchThrottlingRateInMsg": "x"}),
    ("replicatorDispatchRate",
     {"dispatchThrottlingRateInMsg": 20, "dispatchThrottlingRateInByte": 200,
      "relativeToPublishRate": False, "ratePeriodInSecond": 1},
     {"dispatchThrottlingRateInMsg": "x"}),
    ("publishRate", {"publishThrottlingRateInMsg": 100, "publishThrottlingRateInByte": 1000},
     {"publishThrottlingRateInMsg": "x"}),
    ("subscribeRate", {"subscribeThrottlingRatePerConsumer": 10, "ratePeriodInSecond": 30},
     {"subscribeThrottlingRatePerConsumer": "x"}),
    ("subscriptionTypesEnabled", ["Exclusive", "Shared"], ["NoSuchType"]),
    ("maxConsumersPerSubscription", 5, -1),
    ("maxUnackedMessagesOnConsumer", 1000, -1),
    ("maxUnackedMessagesOnSubscription", 2000, -1),
    ("maxSubscriptionsPerTopic", 7, -1),
    ("deduplicationEnabled", True, "maybe"),
    ("deduplicationSnapshotInterval", 120, "x"),
    ("maxMessageSize", 1048576, -1),
    ("compactionThreshold", 1048576, -1),
    ("inactiveTopicPolicies",
     {"inactiveTopicDeleteMode": "delete_when_no_subscriptions",
      "maxInactiveDurationSeconds": 60, "deleteWhileInactive": True},
     {"inactiveTopicDeleteMode": "sometimes"}),
    ("persistence",
     {"bookkeeperEnsemble": 1, "bookkeeperWriteQuorum": 1, "bookkeeperAckQuorum": 1,
      "managedLedgerMaxMarkDeleteRate": 0.0},
     {"bookkeeperEnsemble": 1, "bookkeeperWriteQuorum": 2, "bookkeeperAckQuorum": 3,
      "managedLedgerMaxMarkDeleteRate": 0.0}),
    ("schemaValidationEnforced", True, "maybe"),
    ("replication", ["standalone"], ["no-such-cluster"]),
)  # fmt: skip


def _setup() -> list[Case]:
    t = f"/admin/v2/tenants/{TENANT}"
    tenant_body = _j({"allowedClusters": ["standalone"], "adminRoles": []})
    return [
        Case("clusters", "GET", "/admin/v2/clusters"),
        Case("cluster-get", "GET", "/admin/v2/clusters/standalone"),
        Case("cluster-missing", "GET", "/admin/v2/clusters/no-such-cluster"),
        Case("brokers-of-cluster", "GET", "/admin/v2/brokers/standalone", unordered=True),
        Case("brokers-of-missing-cluster", "GET", "/admin/v2/brokers/no-such-cluster"),
        Case("brokers", "GET", "/admin/v2/brokers", unordered=True),
        Case("tenant-missing", "GET", t),
        Case("tenant-create-unknown-cluster", "PUT", t,
             _j({"allowedClusters": ["no-such-cluster"], "adminRoles": []})),
        Case("tenant-create-bad-body", "PUT", t, "{", compare="status"),
        Case("tenant-create-bad-name", "PUT", "/admin/v2/tenants/bad%20name", tenant_body),
        Case("tenant-create", "PUT", t, tenant_body),
        Case("tenant-create-again", "PUT", t, tenant_body),
        Case("tenant-get", "GET", t),
        Case("tenants", "GET", "/admin/v2/tenants", unordered=True),
        Case("namespaces-of-missing-tenant", "GET", "/admin/v2/namespaces/nott"),
        Case("namespace-create-missing-tenant", "PUT", "/admin/v2/namespaces/nott/ns"),
        Case("namespace-create-bad-name", "PUT", f"/admin/v2/namespaces/{TENANT}/bad%20ns"),
        Case("namespace-create", "PUT", f"/admin/v2/namespaces/{NS}",
             _j({"bundles": {"numBundles": 4}})),
        Case("namespace-create-again", "PUT", f"/admin/v2/namespaces/{NS}"),
        Case("namespace-create-bad-body", "PUT", f"/admin/v2/namespaces/{TENANT}/ns2", "{",
             compare="status"),
        Case("namespaces", "GET", f"/admin/v2/namespaces/{TENANT}", unordered=True),
        Case("namespace-get", "GET", f"/admin/v2/namespaces/{NS}"),
        Case("namespace-get-missing", "GET", f"/admin/v2/namespaces/{TENANT}/nons"),
        Case("namespace-bundles", "GET", f"/admin/v2/namespaces/{NS}/bundles"),
        Case("tenant-delete-not-empty", "DELETE", t),
    ]  # fmt: skip


def _topics() -> list[Case]:
    r = TOPIC_ROOT
    return [
        Case("topics-empty", "GET", r, unordered=True),
        Case("partitioned-empty", "GET", f"{r}/partitioned", unordered=True),
        Case("topics-missing-namespace", "GET", f"/admin/v2/persistent/{TENANT}/nons"),
        Case("np-partitions-before", "GET", f"{r}/np/partitions"),
        Case("np-create", "PUT", f"{r}/np"),
        Case("np-create-again", "PUT", f"{r}/np"),
        Case("np-create-missing-namespace", "PUT", f"/admin/v2/persistent/{TENANT}/nons/np"),
        Case("np-partitions", "GET", f"{r}/np/partitions"),
        Case("pt-create-zero", "PUT", f"{r}/pt/partitions", "0"),
        Case("pt-create-negative", "PUT", f"{r}/pt/partitions", "-3"),
        Case("pt-create-not-a-number", "PUT", f"{r}/pt/partitions", "\"four\"",
             compare="status"),
        Case("pt-create-missing-namespace", "PUT",
             f"/admin/v2/persistent/{TENANT}/nons/pt/partitions", "4"),
        Case("pt-create", "PUT", f"{r}/pt/partitions", "4"),
        Case("pt-create-again", "PUT", f"{r}/pt/partitions", "4"),
        Case("pt-partitions", "GET", f"{r}/pt/partitions"),
        Case("np-as-partitioned", "PUT", f"{r}/np/partitions", "2"),
        Case("pv-create-vnd", "PUT", f"{r}/pv/partitions",
             _j({"partitions": 3, "properties": {"owner": "compat"}}), content_type=VND_JSON),
        Case("pv-partitions", "GET", f"{r}/pv/partitions"),
        Case("pt-update-more", "POST", f"{r}/pt/partitions", "6"),
        Case("pt-partitions-after-update", "GET", f"{r}/pt/partitions"),
        Case("pt-update-fewer", "POST", f"{r}/pt/partitions", "2"),
        Case("missing-update", "POST", f"{r}/missing/partitions", "2"),
        Case("topics", "GET", r, unordered=True),
        Case("partitioned", "GET", f"{r}/partitioned", unordered=True),
        Case("lookup-np", "GET", f"/lookup/v2/topic/persistent/{NS}/np"),
        Case("lookup-missing-namespace", "GET", f"/lookup/v2/topic/persistent/{TENANT}/nons/x"),
        Case("lookup-missing-tenant", "GET", "/lookup/v2/topic/persistent/nott/ns/x"),
        # Pulsar: 500 (an unknown domain fails inside the lookup); compared by status only.
        Case("lookup-bad-domain", "GET", f"/lookup/v2/topic/nonsense/{NS}/np", compare="status"),
        Case("bundle-of-np", "GET", f"/lookup/v2/topic/persistent/{NS}/np/bundle"),
        Case("namespace-delete-not-empty", "DELETE", f"/admin/v2/namespaces/{NS}"),
    ]  # fmt: skip


# Policies whose value Pulsar's admin clients send as a query parameter (a body is ignored).
QUERY_VALUES: Final[dict[str, str]] = {"messageTTL": "messageTTL"}


def _policy_cases(name: str, value: object, bad: object) -> list[Case]:
    cases = _policy_requests(name, value, bad)
    if isinstance(value, list):  # Pulsar keeps these in a HashSet: order carries no meaning
        cases = [dataclasses.replace(c, unordered=True) for c in cases]
    return cases


def _policy_requests(name: str, value: object, bad: object) -> list[Case]:
    r = TOPIC_ROOT
    p = f"{r}/np/{name}"
    query = QUERY_VALUES.get(name)
    by_query = [] if query is None else [
        Case(f"{name}-set-bad-query", "POST", f"{p}?{query}={_j(bad)}"),
        Case(f"{name}-set-query", "POST", f"{p}?{query}={_j(value)}"),
    ]  # fmt: skip
    return [
        Case(f"{name}-unset", "GET", p),
        Case(f"{name}-applied-unset", "GET", f"{p}?applied=true"),
        Case(f"{name}-set", "POST", p, _j(value)),
        *by_query,
        Case(f"{name}-get", "GET", p, settle="set"),
        Case(f"{name}-get-global-unset", "GET", f"{p}?isGlobal=true"),
        Case(f"{name}-applied-set", "GET", f"{p}?applied=true"),
        Case(f"{name}-set-bad-value", "POST", p, _j(bad)),
        Case(f"{name}-get-after-bad", "GET", p),
        Case(f"{name}-set-malformed", "POST", p, "{", compare="status"),
        Case(f"{name}-set-global", "POST", f"{p}?isGlobal=true", _j(value)),
        Case(f"{name}-get-global", "GET", f"{p}?isGlobal=true", settle="set"),
        Case(f"{name}-delete-global", "DELETE", f"{p}?isGlobal=true"),
        Case(f"{name}-delete", "DELETE", p),
        Case(f"{name}-get-deleted", "GET", p, settle="unset"),
        Case(f"{name}-get-missing-topic", "GET", f"{r}/missing/{name}"),
        Case(f"{name}-set-missing-topic", "POST", f"{r}/missing/{name}", _j(value)),
        Case(f"{name}-get-missing-namespace", "GET",
             f"/admin/v2/persistent/{TENANT}/nons/t/{name}"),
        Case(f"{name}-get-missing-tenant", "GET", f"/admin/v2/persistent/nott/ns/t/{name}"),
        Case(f"{name}-get-partition", "GET", f"{r}/pt-partition-0/{name}"),
        Case(f"{name}-set-partition", "POST", f"{r}/pt-partition-0/{name}", _j(value)),
        Case(f"{name}-get-partitioned-unset", "GET", f"{r}/pt/{name}"),
    ]  # fmt: skip


Body = dict[str, object]
#: What ``pulsar-admin topics set-dispatch-rate`` (and its subscription and replicator
#: siblings) sends when no limit is given: -1 ("unlimited") in both rates.
_DISPATCH_RATE: Final[Body] = {
    "dispatchThrottlingRateInMsg": -1, "dispatchThrottlingRateInByte": -1,
    "relativeToPublishRate": False, "ratePeriodInSecond": 1,
}  # fmt: skip
#: (REST name, what pulsar-admin sends with one limit given or none, other negative values,
#: a body leaving fields out: Pulsar's JSON binding fills them in).
UNLIMITED_RATES: Final[tuple[tuple[str, Body, Body, Body], ...]] = (
    ("publishRate",
     {"publishThrottlingRateInMsg": 20, "publishThrottlingRateInByte": -1},
     {"publishThrottlingRateInMsg": -2, "publishThrottlingRateInByte": -1024},
     {"publishThrottlingRateInMsg": 20}),
    ("dispatchRate", {**_DISPATCH_RATE, "dispatchThrottlingRateInMsg": 20},
     {**_DISPATCH_RATE, "dispatchThrottlingRateInMsg": -2, "dispatchThrottlingRateInByte": -7},
     {"dispatchThrottlingRateInMsg": -1, "dispatchThrottlingRateInByte": -1}),
    ("subscriptionDispatchRate", {**_DISPATCH_RATE, "dispatchThrottlingRateInByte": 4096},
     {**_DISPATCH_RATE, "dispatchThrottlingRateInMsg": -2},
     {"dispatchThrottlingRateInMsg": -1}),
    ("replicatorDispatchRate", _DISPATCH_RATE,
     {**_DISPATCH_RATE, "dispatchThrottlingRateInByte": -2},
     {"dispatchThrottlingRateInByte": -1}),
    ("subscribeRate", {"subscribeThrottlingRatePerConsumer": -1, "ratePeriodInSecond": 30},
     {"subscribeThrottlingRatePerConsumer": -2, "ratePeriodInSecond": 30},
     {"subscribeThrottlingRatePerConsumer": -1}),
)  # fmt: skip


def _unlimited_rates() -> list[Case]:
    """-1 (any negative) in a rate field means unlimited: accepted and read back as sent.

    Each topic-level write is read back (``settle``) and removed again before the next, so
    a read never sees the previous value while Pulsar applies the new one.
    """
    cases: list[Case] = []
    n = f"/admin/v2/namespaces/{NS}"
    for name, unlimited, negative, partial in UNLIMITED_RATES:
        p = f"{TOPIC_ROOT}/np/{name}"
        for kind, body in (("unlimited", unlimited), ("negative", negative), ("partial", partial)):
            cases += [
                Case(f"{name}-set-{kind}", "POST", p, _j(body)),
                Case(f"{name}-get-{kind}", "GET", p, settle="set"),
                Case(f"{name}-delete-{kind}", "DELETE", p),
                Case(f"{name}-get-deleted-{kind}", "GET", p, settle="unset"),
            ]
        cases += [
            Case(f"ns-{name}-unset", "GET", f"{n}/{name}"),
            Case(f"ns-{name}-set-unlimited", "POST", f"{n}/{name}", _j(unlimited)),
            Case(f"ns-{name}-get-unlimited", "GET", f"{n}/{name}"),
            Case(f"ns-{name}-applied-on-topic", "GET", f"{p}?applied=true", settle="set"),
            Case(f"ns-{name}-set-negative", "POST", f"{n}/{name}", _j(negative)),
            Case(f"ns-{name}-get-negative", "GET", f"{n}/{name}"),
            Case(f"ns-{name}-set-partial", "POST", f"{n}/{name}", _j(partial)),
            Case(f"ns-{name}-get-partial", "GET", f"{n}/{name}"),
            Case(f"ns-{name}-delete", "DELETE", f"{n}/{name}"),
            Case(f"ns-{name}-deleted", "GET", f"{n}/{name}"),
        ]  # fmt: skip
    return cases


def _backlog_quota() -> list[Case]:
    r = TOPIC_ROOT
    quota = {"limitSize": 1000, "limitTime": -1, "policy": "producer_request_hold"}
    q = "backlogQuotaType=destination_storage"
    return [
        Case("backlogQuotaMap-unset", "GET", f"{r}/np/backlogQuotaMap"),
        Case("backlogQuotaMap-applied", "GET", f"{r}/np/backlogQuotaMap?applied=true"),
        Case("backlogQuota-set", "POST", f"{r}/np/backlogQuota?{q}", _j(quota)),
        Case("backlogQuotaMap-get", "GET", f"{r}/np/backlogQuotaMap", settle="set"),
        Case("backlogQuota-set-bad-type", "POST", f"{r}/np/backlogQuota?backlogQuotaType=nope",
             _j(quota)),
        Case("backlogQuota-set-malformed", "POST", f"{r}/np/backlogQuota?{q}", "{",
             compare="status"),
        Case("backlogQuota-delete", "DELETE", f"{r}/np/backlogQuota?{q}"),
        Case("backlogQuotaMap-deleted", "GET", f"{r}/np/backlogQuotaMap", settle="unset"),
        Case("backlogQuotaMap-missing-topic", "GET", f"{r}/missing/backlogQuotaMap"),
        Case("backlogQuotaMap-partition", "GET", f"{r}/pt-partition-0/backlogQuotaMap"),
    ]  # fmt: skip


def _namespace_policies() -> list[Case]:
    n = f"/admin/v2/namespaces/{NS}"
    missing = f"/admin/v2/namespaces/{TENANT}/nons"
    return [
        Case("ns-messageTTL-unset", "GET", f"{n}/messageTTL"),
        Case("ns-messageTTL-set", "POST", f"{n}/messageTTL", "120"),
        Case("ns-messageTTL-get", "GET", f"{n}/messageTTL"),
        Case("ns-messageTTL-bad", "POST", f"{n}/messageTTL", "-1"),
        Case("ns-messageTTL-applied-on-topic", "GET", f"{TOPIC_ROOT}/np/messageTTL?applied=true"),
        Case("ns-messageTTL-delete", "DELETE", f"{n}/messageTTL"),
        Case("ns-messageTTL-deleted", "GET", f"{n}/messageTTL"),
        Case("ns-messageTTL-missing", "GET", f"{missing}/messageTTL"),
        Case("ns-maxConsumersPerTopic-set", "POST", f"{n}/maxConsumersPerTopic", "9"),
        Case("ns-maxConsumersPerTopic-get", "GET", f"{n}/maxConsumersPerTopic"),
        Case("ns-maxConsumersPerTopic-applied-on-topic", "GET",
             f"{TOPIC_ROOT}/np/maxConsumers?applied=true"),
        Case("ns-maxConsumersPerTopic-delete", "DELETE", f"{n}/maxConsumersPerTopic"),
        Case("ns-retention-set", "POST", f"{n}/retention",
             _j({"retentionTimeInMinutes": 30, "retentionSizeInMB": 50})),
        Case("ns-retention-get", "GET", f"{n}/retention"),
        Case("ns-retention-bad", "POST", f"{n}/retention",
             _j({"retentionTimeInMinutes": 0, "retentionSizeInMB": 50})),
        Case("ns-retention-delete", "DELETE", f"{n}/retention"),
        Case("ns-autoTopicCreation-set", "POST", f"{n}/autoTopicCreation",
             _j({"allowAutoTopicCreation": True, "topicType": "partitioned",
                 "defaultNumPartitions": 2})),
        Case("ns-autoTopicCreation-get", "GET", f"{n}/autoTopicCreation"),
        Case("ns-autoTopicCreation-bad", "POST", f"{n}/autoTopicCreation",
             _j({"allowAutoTopicCreation": True, "topicType": "partitioned",
                 "defaultNumPartitions": 0})),
        Case("ns-autoTopicCreation-delete", "DELETE", f"{n}/autoTopicCreation"),
        Case("ns-autoTopicCreation-deleted", "GET", f"{n}/autoTopicCreation"),
        Case("ns-autoTopicCreation-non-partitioned", "POST", f"{n}/autoTopicCreation",
             _j({"allowAutoTopicCreation": True, "topicType": "non-partitioned"})),
        Case("ns-autoTopicCreation-get-non-partitioned", "GET", f"{n}/autoTopicCreation"),
        Case("ns-autoTopicCreation-bad-type", "POST", f"{n}/autoTopicCreation",
             _j({"allowAutoTopicCreation": True, "topicType": "sideways"})),
        Case("ns-autoTopicCreation-null-partitions", "POST", f"{n}/autoTopicCreation",
             _j({"allowAutoTopicCreation": True, "topicType": "partitioned"})),
        Case("ns-autoTopicCreation-np-with-partitions", "POST", f"{n}/autoTopicCreation",
             _j({"allowAutoTopicCreation": True, "topicType": "non-partitioned",
                 "defaultNumPartitions": 2})),
        Case("ns-autoTopicCreation-disallow", "POST", f"{n}/autoTopicCreation",
             _j({"allowAutoTopicCreation": False})),
        Case("ns-autoTopicCreation-get-disallowed", "GET", f"{n}/autoTopicCreation"),
        Case("ns-autoTopicCreation-missing", "POST", f"{missing}/autoTopicCreation",
             _j({"allowAutoTopicCreation": False})),
        Case("ns-autoTopicCreation-delete-again", "DELETE", f"{n}/autoTopicCreation"),
    ]  # fmt: skip


def _namespace_get_with_policies() -> list[Case]:
    """``GET /admin/v2/namespaces/{t}/{ns}`` shows the namespace policies we store.

    On a namespace of its own: Pulsar's ``GET …/backlogQuotaMap?applied=true`` on a topic
    writes the broker defaults into its namespace's cached Policies, which ``compat/ns``'s
    topics have done by now (its GET then shows a filled ``backlog_quota_map``).
    """
    n = f"/admin/v2/namespaces/{TENANT}/nsget"
    rate = {"dispatchThrottlingRateInMsg": 100, "dispatchThrottlingRateInByte": 1000,
            "relativeToPublishRate": False, "ratePeriodInSecond": 1}
    return [
        Case("nsget-create", "PUT", n, _j({"bundles": {"numBundles": 4}})),
        Case("nsget-set-messageTTL", "POST", f"{n}/messageTTL", "300"),
        Case("nsget-set-retention", "POST", f"{n}/retention",
             _j({"retentionTimeInMinutes": 30, "retentionSizeInMB": 50})),
        Case("nsget-set-maxConsumersPerTopic", "POST", f"{n}/maxConsumersPerTopic", "7"),
        Case("nsget-set-autoTopicCreation", "POST", f"{n}/autoTopicCreation",
             _j({"allowAutoTopicCreation": True, "topicType": "partitioned",
                 "defaultNumPartitions": 3})),
        Case("nsget-set-dispatchRate", "POST", f"{n}/dispatchRate", _j(rate)),
        Case("nsget-set-deduplication", "POST", f"{n}/deduplication", "true"),
        Case("namespace-get-with-policies", "GET", n),
        Case("nsget-delete-messageTTL", "DELETE", f"{n}/messageTTL"),
        Case("nsget-delete-retention", "DELETE", f"{n}/retention"),
        Case("nsget-delete-maxConsumersPerTopic", "DELETE", f"{n}/maxConsumersPerTopic"),
        Case("nsget-delete-autoTopicCreation", "DELETE", f"{n}/autoTopicCreation"),
        Case("nsget-delete-dispatchRate", "DELETE", f"{n}/dispatchRate"),
        Case("nsget-delete-deduplication", "DELETE", f"{n}/deduplication"),
        Case("namespace-get-policies-deleted", "GET", n),
        Case("nsget-delete", "DELETE", n),
    ]  # fmt: skip


def _schema_compatibility_strategy() -> list[Case]:
    """``schemaCompatibilityStrategy`` on the namespace (PUT/GET; no DELETE in Pulsar) and
    on a topic (PUT/GET/DELETE, ``isGlobal``, ``applied``).

    A value Pulsar cannot bind (``"NOPE"``) is stored as null by Pulsar (204), which unsets
    the policy; at topic level it is sent while the policy is unset, so the reads after it
    do not race Pulsar's asynchronous topic policies.
    """
    n = f"/admin/v2/namespaces/{NS}/schemaCompatibilityStrategy"
    p = f"{TOPIC_ROOT}/np/schemaCompatibilityStrategy"
    g = f"{p}?isGlobal=true"
    part = f"{TOPIC_ROOT}/pt-partition-0/schemaCompatibilityStrategy"
    return [
        Case("ns-scs-unset", "GET", n),
        Case("ns-scs-set", "PUT", n, _j("BACKWARD")),
        Case("ns-scs-get", "GET", n),
        Case("ns-scs-applied-on-topic", "GET", f"{p}?applied=true"),
        Case("ns-scs-set-post", "POST", n, _j("FULL")),
        Case("ns-scs-set-malformed", "PUT", n, "{", compare="status"),
        Case("ns-scs-set-bad-value", "PUT", n, _j("NOPE")),
        Case("ns-scs-get-after-bad", "GET", n),
        Case("ns-scs-set-undefined", "PUT", n, _j("UNDEFINED")),
        Case("ns-scs-get-undefined", "GET", n),
        Case("ns-scs-delete", "DELETE", n),
        Case("ns-scs-get-missing-namespace", "GET",
             f"/admin/v2/namespaces/{TENANT}/nons/schemaCompatibilityStrategy"),
        Case("ns-scs-set-missing-namespace", "PUT",
             f"/admin/v2/namespaces/{TENANT}/nons/schemaCompatibilityStrategy", _j("FULL")),
        Case("scs-unset", "GET", p),
        Case("scs-applied-unset", "GET", f"{p}?applied=true"),
        Case("scs-get-global-unset", "GET", g),
        Case("scs-set-bad-value", "PUT", p, _j("NOPE")),
        Case("scs-set-post", "POST", p, _j("FULL")),
        Case("scs-set-malformed", "PUT", p, "{", compare="status"),
        Case("scs-set", "PUT", p, _j("FORWARD")),
        Case("scs-get", "GET", p, settle="set"),
        Case("scs-applied-set", "GET", f"{p}?applied=true"),
        Case("scs-set-undefined", "PUT", p, _j("UNDEFINED")),
        Case("scs-get-undefined", "GET", p, settle="unset"),
        Case("scs-applied-undefined", "GET", f"{p}?applied=true"),
        Case("scs-set-again", "PUT", p, _j("ALWAYS_COMPATIBLE")),
        Case("scs-get-again", "GET", p, settle="set"),
        Case("scs-delete", "DELETE", p),
        Case("scs-get-deleted", "GET", p, settle="unset"),
        Case("scs-set-global", "PUT", g, _j("FULL")),
        Case("scs-get-global", "GET", g, settle="set"),
        Case("scs-delete-global", "DELETE", g),
        Case("scs-get-global-deleted", "GET", g, settle="unset"),
        Case("scs-get-missing-topic", "GET", f"{TOPIC_ROOT}/missing/schemaCompatibilityStrategy"),
        Case("scs-set-missing-topic", "PUT", f"{TOPIC_ROOT}/missing/schemaCompatibilityStrategy",
             _j("FULL")),
        Case("scs-get-missing-namespace", "GET",
             f"/admin/v2/persistent/{TENANT}/nons/t/schemaCompatibilityStrategy"),
        Case("scs-get-partition", "GET", part),
        Case("scs-set-partition", "PUT", part, _j("FULL")),
    ]  # fmt: skip


def _record(*fields: tuple[str, object]) -> str:
    """An Avro record schema ``compat.User`` with ``fields`` (name, type or (type, default))."""
    out = []
    for name, kind in fields:
        if isinstance(kind, tuple):
            out.append({"name": name, "type": kind[0], "default": kind[1]})
        else:
            out.append({"name": name, "type": kind})
    return _j({"type": "record", "name": "User", "namespace": "compat", "fields": out})


#: id only; id + name with a default; id + email without one (FULL: neither reads the
#: other's data); name only (FORWARD: the id-only reader cannot read it).
USER_V1: Final = _record(("id", "long"))
USER_V2: Final = _record(("id", "long"), ("name", ("string", "")))
USER_EMAIL: Final = _record(("id", "long"), ("email", "string"))
USER_NAME_ONLY: Final = _record(("name", ("string", "")))
USER_AGE: Final = _record(("id", "long"), ("name", ("string", "")), ("age", ("int", 0)))


def _payload(kind: str, schema: str, properties: dict[str, object] | None = None) -> str:
    return _j({"type": kind, "schema": schema, "properties": properties or {}})


def _schemas() -> list[Case]:
    """The schema registry (``/admin/v2/schemas/…``): AVRO, JSON and STRING histories,
    versions, soft and forced deletes, compatibility tests and incompatible uploads under
    the namespace's strategy, malformed definitions and payloads, unknown types.

    Topics ``sa``, ``sj``, ``ss`` are never created (Pulsar keeps a schema for a topic
    name whether or not the topic exists); every history is force-deleted at the end.
    """
    s = f"/admin/v2/schemas/{NS}"
    a, j, t = f"{s}/sa", f"{s}/sj", f"{s}/ss"
    n = f"/admin/v2/namespaces/{NS}/schemaCompatibilityStrategy"
    pretty_v1 = json.dumps(json.loads(USER_V1), indent=2)
    return [
        # AVRO: an empty history, uploads, the same schema again, reads
        Case("schema-get-none", "GET", f"{a}/schema"),
        Case("schema-all-none", "GET", f"{a}/schemas"),
        Case("schema-get-version-none", "GET", f"{a}/schema/0"),
        Case("schema-upload-avro", "POST", f"{a}/schema",
             _payload("AVRO", USER_V1, {"owner": "compat"})),
        Case("schema-upload-avro-same", "POST", f"{a}/schema",
             _payload("AVRO", USER_V1, {"owner": "compat"})),
        Case("schema-upload-avro-same-other-properties", "POST", f"{a}/schema",
             _payload("AVRO", USER_V1)),
        Case("schema-upload-avro-same-reformatted", "POST", f"{a}/schema",
             _payload("AVRO", pretty_v1)),
        Case("schema-get", "GET", f"{a}/schema"),
        Case("schema-get-version", "GET", f"{a}/schema/0"),
        Case("schema-get-version-missing", "GET", f"{a}/schema/7"),
        Case("schema-get-version-negative", "GET", f"{a}/schema/-1"),
        Case("schema-get-version-not-a-number", "GET", f"{a}/schema/abc"),
        # compatibility under the broker default (FULL)
        Case("schema-compat-ok", "POST", f"{a}/compatibility", _payload("AVRO", USER_V2)),
        Case("schema-compat-incompatible", "POST", f"{a}/compatibility",
             _payload("AVRO", USER_EMAIL)),
        Case("schema-compat-other-type", "POST", f"{a}/compatibility", _payload("JSON", USER_V2)),
        Case("schema-upload-incompatible-full", "POST", f"{a}/schema",
             _payload("AVRO", USER_EMAIL)),
        Case("schema-upload-v1", "POST", f"{a}/schema", _payload("AVRO", USER_V2)),
        Case("schema-upload-other-type", "POST", f"{a}/schema", _payload("JSON", USER_V2)),
        Case("schema-upload-string-on-avro", "POST", f"{a}/schema", _payload("STRING", "")),
        Case("schema-all", "GET", f"{a}/schemas"),
        Case("schema-version-of", "POST", f"{a}/version",
             _payload("AVRO", USER_V1, {"owner": "compat"})),
        Case("schema-version-of-reformatted", "POST", f"{a}/version",
             _payload("AVRO", pretty_v1)),
        Case("schema-version-of-unknown", "POST", f"{a}/version", _payload("AVRO", USER_EMAIL)),
        # the namespace's strategy
        Case("schema-ns-backward", "PUT", n, _j("BACKWARD")),
        Case("schema-compat-backward", "POST", f"{a}/compatibility",
             _payload("AVRO", USER_EMAIL)),
        Case("schema-upload-incompatible-backward", "POST", f"{a}/schema",
             _payload("AVRO", USER_EMAIL)),
        Case("schema-ns-forward", "PUT", n, _j("FORWARD")),
        Case("schema-compat-forward-ok", "POST", f"{a}/compatibility",
             _payload("AVRO", USER_EMAIL)),
        Case("schema-upload-incompatible-forward", "POST", f"{a}/schema",
             _payload("AVRO", USER_NAME_ONLY)),
        Case("schema-ns-full", "PUT", n, _j("FULL")),
        Case("schema-upload-incompatible-full-again", "POST", f"{a}/schema",
             _payload("AVRO", USER_NAME_ONLY)),
        Case("schema-ns-always-incompatible", "PUT", n, _j("ALWAYS_INCOMPATIBLE")),
        Case("schema-upload-always-incompatible", "POST", f"{a}/schema",
             _payload("AVRO", USER_AGE)),
        Case("schema-upload-same-always-incompatible", "POST", f"{a}/schema",
             _payload("AVRO", USER_V2)),
        Case("schema-ns-always-compatible", "PUT", n, _j("ALWAYS_COMPATIBLE")),
        Case("schema-compat-always-compatible", "POST", f"{a}/compatibility",
             _payload("AVRO", USER_NAME_ONLY)),
        Case("schema-ns-undefined", "PUT", n, _j("UNDEFINED")),
        Case("schema-upload-v2", "POST", f"{a}/schema", _payload("AVRO", USER_AGE)),
        # soft delete, then a new version after the marker; a forced delete
        Case("schema-delete", "DELETE", f"{a}/schema"),
        Case("schema-get-deleted", "GET", f"{a}/schema"),
        Case("schema-get-version-deleted", "GET", f"{a}/schema/0"),
        Case("schema-all-deleted", "GET", f"{a}/schemas"),
        Case("schema-delete-again", "DELETE", f"{a}/schema"),
        Case("schema-upload-after-delete", "POST", f"{a}/schema", _payload("AVRO", USER_EMAIL)),
        Case("schema-all-after-delete", "GET", f"{a}/schemas"),
        Case("schema-delete-force", "DELETE", f"{a}/schema?force=true"),
        Case("schema-all-force-deleted", "GET", f"{a}/schemas"),
        Case("schema-upload-after-force", "POST", f"{a}/schema", _payload("STRING", "")),
        Case("schema-get-after-force", "GET", f"{a}/schema"),
        # JSON
        Case("schema-upload-json", "POST", f"{j}/schema", _payload("JSON", USER_V1)),
        Case("schema-get-json", "GET", f"{j}/schema"),
        Case("schema-upload-json-compatible", "POST", f"{j}/schema", _payload("JSON", USER_V2)),
        Case("schema-upload-json-incompatible", "POST", f"{j}/schema",
             _payload("JSON", USER_EMAIL)),
        Case("schema-upload-json-malformed", "POST", f"{j}/schema", _payload("JSON", "not json")),
        Case("schema-upload-json-empty", "POST", f"{j}/schema", _payload("JSON", "")),
        Case("schema-upload-json-not-avro", "POST", f"{j}/schema",
             _payload("JSON", _j({"type": "recrd", "name": "X", "fields": []}))),
        Case("schema-all-json", "GET", f"{j}/schemas"),
        # STRING
        Case("schema-upload-string", "POST", f"{t}/schema", _payload("STRING", "")),
        Case("schema-upload-string-again", "POST", f"{t}/schema", _payload("STRING", "")),
        Case("schema-get-string", "GET", f"{t}/schema"),
        Case("schema-upload-string-with-data", "POST", f"{t}/schema", _payload("STRING", "abc")),
        Case("schema-upload-int32-on-string", "POST", f"{t}/schema", _payload("INT32", "")),
        Case("schema-compat-string", "POST", f"{t}/compatibility", _payload("STRING", "")),
        Case("schema-delete-string", "DELETE", f"{t}/schema"),
        Case("schema-upload-avro-after-string", "POST", f"{t}/schema", _payload("AVRO", USER_V1)),
        Case("schema-get-after-type-change", "GET", f"{t}/schema"),
        # malformed definitions, payloads, unknown types: nothing is stored
        Case("schema-upload-avro-not-json", "POST", f"{s}/sm/schema",
             _payload("AVRO", "not json")),
        Case("schema-upload-avro-empty", "POST", f"{s}/sm/schema", _payload("AVRO", "")),
        Case("schema-upload-avro-no-fields", "POST", f"{s}/sm/schema",
             _payload("AVRO", _j({"type": "record", "name": "X"}))),
        Case("schema-upload-avro-unknown-field-type", "POST", f"{s}/sm/schema",
             _payload("AVRO", _j({"type": "record", "name": "X",
                                  "fields": [{"name": "a", "type": "nosuch"}]}))),
        Case("schema-upload-avro-union", "POST", f"{s}/sm/schema",
             _payload("AVRO", _j(["null", "string"]))),
        Case("schema-upload-int32-with-data", "POST", f"{s}/sm/schema",
             _payload("INT32", "abc")),
        Case("schema-upload-client-side-type", "POST", f"{s}/sm/schema",
             _payload("AUTO_CONSUME", "")),
        Case("schema-upload-unknown-type", "POST", f"{s}/sm/schema", _payload("NOPE", "")),
        Case("schema-upload-no-type", "POST", f"{s}/sm/schema", _j({"schema": ""})),
        Case("schema-upload-no-schema", "POST", f"{s}/sm/schema", _j({"type": "STRING"})),
        Case("schema-upload-malformed", "POST", f"{s}/sm/schema", "{", compare="status"),
        Case("schema-upload-array", "POST", f"{s}/sm/schema", "[]", compare="status"),
        Case("schema-upload-properties-list", "POST", f"{s}/sm/schema",
             _j({"type": "STRING", "schema": "", "properties": []}), compare="status"),
        Case("schema-compat-malformed-definition", "POST", f"{s}/sm/compatibility",
             _payload("AVRO", "not json")),
        Case("schema-version-of-malformed-definition", "POST", f"{s}/sm/version",
             _payload("AVRO", "not json")),
        Case("schema-all-after-refusals", "GET", f"{s}/sm/schemas"),
        Case("schema-upload-properties-numbers", "POST", f"{s}/sm/schema",
             _j({"type": "STRING", "schema": "", "properties": {"n": 1, "b": True}})),
        Case("schema-get-properties-numbers", "GET", f"{s}/sm/schema"),
        Case("schema-upload-no-properties", "POST", f"{s}/sn/schema",
             _j({"type": "STRING", "schema": ""})),
        # partitions share their topic's history
        Case("schema-upload-partition", "POST", f"{s}/pt-partition-1/schema",
             _payload("STRING", "")),
        Case("schema-get-partitioned", "GET", f"{s}/pt/schema"),
        Case("schema-get-other-partition", "GET", f"{s}/pt-partition-0/schema"),
        # a namespace or tenant that does not exist
        Case("schema-get-missing-namespace", "GET", f"/admin/v2/schemas/{TENANT}/nons/x/schema"),
        Case("schema-all-missing-namespace", "GET",
             f"/admin/v2/schemas/{TENANT}/nons/x/schemas"),
        Case("schema-upload-missing-namespace", "POST",
             f"/admin/v2/schemas/{TENANT}/nons/x/schema", _payload("STRING", "")),
        Case("schema-upload-missing-tenant", "POST", "/admin/v2/schemas/nott/ns/x/schema",
             _payload("STRING", "")),
        Case("schema-compat-missing-namespace", "POST",
             f"/admin/v2/schemas/{TENANT}/nons/x/compatibility", _payload("STRING", "")),
        Case("schema-delete-missing-namespace", "DELETE",
             f"/admin/v2/schemas/{TENANT}/nons/x/schema"),
        # clean up (a re-recording on the same Pulsar starts without these histories)
        *[Case(f"schema-force-delete-{name}", "DELETE", f"{s}/{name}/schema?force=true")
          for name in ("sa", "sj", "ss", "sm", "sn", "pt")],
        # Pulsar wrote a deleted marker under the missing namespace (above): dropped too
        Case("schema-force-delete-missing-namespace", "DELETE",
             f"/admin/v2/schemas/{TENANT}/nons/x/schema?force=true"),
    ]  # fmt: skip


def _permissions() -> list[Case]:
    """Produce/consume permissions of a namespace, a topic and subscriptions (Pulsar
    standalone runs without authorization; grants are stored and answered all the same).

    Actions and roles are sets in Pulsar (a ``HashSet`` of an enum: its order changes from
    one JVM to the next), so every answer listing them is compared with lists sorted.
    """
    n = f"/admin/v2/namespaces/{NS}/permissions"
    missing_ns = f"/admin/v2/namespaces/{TENANT}/nons/permissions"
    np_ = f"{TOPIC_ROOT}/np/permissions"
    all_actions = ["consume", "produce", "functions", "sources", "sinks", "packages"]
    nsperm = f"/admin/v2/namespaces/{TENANT}/nsperm"
    sam = f"/admin/v2/namespaces/{NS}/subscriptionAuthMode"
    missing_sam = f"/admin/v2/namespaces/{TENANT}/nons/subscriptionAuthMode"
    return [
        # namespace
        Case("perm-ns-empty", "GET", n),
        Case("perm-ns-grant", "POST", f"{n}/app", _j(["produce", "consume"])),
        Case("perm-ns-get", "GET", n, unordered=True),
        Case("perm-ns-grant-replace", "POST", f"{n}/app", _j(["produce"])),
        Case("perm-ns-get-replaced", "GET", n, unordered=True),
        Case("perm-ns-grant-all-actions", "POST", f"{n}/ops", _j(all_actions)),
        Case("perm-ns-grant-no-actions", "POST", f"{n}/idle", _j([])),
        Case("perm-ns-grant-twice-listed", "POST", f"{n}/dup", _j(["consume", "consume"])),
        Case("perm-ns-get-all", "GET", n, unordered=True),
        Case("perm-ns-grant-unknown-action", "POST", f"{n}/bad", _j(["fly"])),
        Case("perm-ns-revoke-unknown-action", "DELETE", f"{n}/bad"),
        Case("perm-ns-grant-string", "POST", f"{n}/bad", _j("produce"), compare="status"),
        Case("perm-ns-grant-malformed", "POST", f"{n}/bad", "{", compare="status"),
        Case("perm-ns-grant-no-body", "POST", f"{n}/bad", ""),
        Case("perm-ns-grant-null", "POST", f"{n}/bad", "null"),
        Case("perm-ns-revoke", "DELETE", f"{n}/ops"),
        Case("perm-ns-revoke-never-granted", "DELETE", f"{n}/nobody"),
        Case("perm-ns-get-after-revoke", "GET", n, unordered=True),
        Case("perm-ns-get-missing-namespace", "GET", missing_ns),
        Case("perm-ns-get-missing-tenant", "GET", "/admin/v2/namespaces/nott/ns/permissions"),
        Case("perm-ns-grant-missing-namespace", "POST", f"{missing_ns}/app", _j(["produce"])),
        Case("perm-ns-revoke-missing-namespace", "DELETE", f"{missing_ns}/app"),
        # topic: its own grants added to the namespace's
        Case("perm-topic-get-namespace-only", "GET", np_, unordered=True),
        Case("perm-topic-grant", "POST", f"{np_}/reader", _j(["consume"])),
        Case("perm-topic-grant-namespace-role", "POST", f"{np_}/app", _j(["consume"])),
        Case("perm-topic-get", "GET", np_, unordered=True),
        Case("perm-topic-ns-unchanged", "GET", n, unordered=True),
        Case("perm-topic-grant-unknown-action", "POST", f"{np_}/bad", _j(["fly"])),
        Case("perm-topic-revoke-unknown-action", "DELETE", f"{np_}/bad"),
        Case("perm-topic-grant-string", "POST", f"{np_}/bad", _j("produce"),
             compare="status"),
        Case("perm-topic-grant-null", "POST", f"{np_}/bad", "null"),
        Case("perm-topic-revoke-null", "DELETE", f"{np_}/bad"),
        Case("perm-topic-revoke", "DELETE", f"{np_}/reader"),
        Case("perm-topic-revoke-never-granted", "DELETE", f"{np_}/nobody"),
        Case("perm-topic-revoke-namespace-role", "DELETE", f"{np_}/app"),
        Case("perm-topic-get-after-revoke", "GET", np_, unordered=True),
        Case("perm-topic-get-missing-topic", "GET", f"{TOPIC_ROOT}/missing/permissions"),
        Case("perm-topic-grant-missing-topic", "POST", f"{TOPIC_ROOT}/missing/permissions/app",
             _j(["produce"])),
        Case("perm-topic-revoke-missing-topic", "DELETE",
             f"{TOPIC_ROOT}/missing/permissions/app"),
        Case("perm-topic-get-missing-namespace", "GET",
             f"/admin/v2/persistent/{TENANT}/nons/t/permissions"),
        Case("perm-topic-grant-missing-namespace", "POST",
             f"/admin/v2/persistent/{TENANT}/nons/t/permissions/app", _j(["produce"])),
        Case("perm-topic-get-non-partitioned-partition", "GET",
             f"{TOPIC_ROOT}/np-partition-0/permissions"),
        Case("perm-topic-get-non-persistent", "GET",
             f"/admin/v2/non-persistent/{NS}/np/permissions"),
        # a partitioned topic and its partitions: each name has grants of its own
        Case("perm-pt-grant", "POST", f"{TOPIC_ROOT}/pt/permissions/papp", _j(["produce"])),
        Case("perm-pt-get", "GET", f"{TOPIC_ROOT}/pt/permissions", unordered=True),
        Case("perm-pt-get-partition", "GET", f"{TOPIC_ROOT}/pt-partition-0/permissions",
             unordered=True),
        Case("perm-pt-grant-partition", "POST", f"{TOPIC_ROOT}/pt-partition-1/permissions/qapp",
             _j(["consume"])),
        Case("perm-pt-get-granted-partition", "GET",
             f"{TOPIC_ROOT}/pt-partition-1/permissions", unordered=True),
        Case("perm-pt-get-after-partition-grant", "GET", f"{TOPIC_ROOT}/pt/permissions",
             unordered=True),
        Case("perm-pt-revoke-partition", "DELETE",
             f"{TOPIC_ROOT}/pt-partition-1/permissions/qapp"),
        Case("perm-pt-revoke", "DELETE", f"{TOPIC_ROOT}/pt/permissions/papp"),
        Case("perm-pt-get-after-revoke", "GET", f"{TOPIC_ROOT}/pt/permissions", unordered=True),
        # subscriptions: the only roles that may consume on them
        Case("perm-sub-empty", "GET", f"{n}/subscription"),
        Case("perm-sub-grant", "POST", f"{n}/subscription/sub1", _j(["r1", "r2"])),
        Case("perm-sub-get", "GET", f"{n}/subscription", unordered=True),
        Case("perm-sub-grant-replace", "POST", f"{n}/subscription/sub1", _j(["r3"])),
        Case("perm-sub-grant-no-roles", "POST", f"{n}/subscription/sub2", _j([])),
        Case("perm-sub-grant-other", "POST", f"{n}/subscription/sub3", _j(["r1", "r2"])),
        Case("perm-sub-get-replaced", "GET", f"{n}/subscription", unordered=True),
        Case("perm-sub-grant-string", "POST", f"{n}/subscription/sub9", _j("r1"),
             compare="status"),
        Case("perm-sub-grant-no-body", "POST", f"{n}/subscription/sub9", ""),
        Case("perm-sub-grant-null", "POST", f"{n}/subscription/sub9", "null"),
        Case("perm-sub-revoke-one-of-two", "DELETE", f"{n}/sub3/r1"),
        Case("perm-sub-revoke-not-listed", "DELETE", f"{n}/sub3/nobody"),
        Case("perm-sub-revoke-last", "DELETE", f"{n}/sub1/r3"),
        Case("perm-sub-revoke-from-empty", "DELETE", f"{n}/sub2/r1"),
        Case("perm-sub-get-after-revoke", "GET", f"{n}/subscription", unordered=True),
        Case("perm-sub-revoke-unknown-subscription", "DELETE", f"{n}/sub1/r3"),
        Case("perm-sub-get-missing-namespace", "GET", f"{missing_ns}/subscription"),
        Case("perm-sub-grant-missing-namespace", "POST", f"{missing_ns}/subscription/s",
             _j(["r"])),
        Case("perm-sub-revoke-missing-namespace", "DELETE", f"{missing_ns}/s/r"),
        Case("perm-sub-topic-path", "GET", f"{np_}/subscription"),
        # the namespace's subscriptionAuthMode (kept with the permissions here)
        Case("sam-get-default", "GET", sam),
        Case("sam-set-prefix", "POST", sam, _j("Prefix")),
        Case("sam-get-prefix", "GET", sam),
        Case("sam-set-none", "POST", sam, _j("None")),
        Case("sam-get-none", "GET", sam),
        Case("sam-set-prefix-again", "POST", sam, _j("Prefix")),
        Case("sam-set-no-body", "POST", sam, ""),
        Case("sam-get-after-no-body", "GET", sam),
        Case("sam-set-null", "POST", sam, "null"),
        Case("sam-set-unknown", "POST", sam, _j("Suffix")),
        Case("sam-get-after-unknown", "GET", sam),
        Case("sam-set-malformed", "POST", sam, "{", compare="status"),
        Case("sam-get-missing-namespace", "GET", missing_sam),
        Case("sam-set-missing-namespace", "POST", missing_sam, _j("Prefix")),
        Case("sam-get-missing-tenant", "GET", "/admin/v2/namespaces/nott/ns/subscriptionAuthMode"),
        # every grant shows in the namespace's Policies (a namespace of its own, see
        # _namespace_get_with_policies)
        Case("perm-nsget-create", "PUT", nsperm, _j({"bundles": {"numBundles": 4}})),
        Case("perm-nsget-topic", "PUT", f"/admin/v2/persistent/{TENANT}/nsperm/t"),
        Case("perm-nsget-grant", "POST", f"{nsperm}/permissions/app", _j(["produce"])),
        Case("perm-nsget-grant-topic", "POST",
             f"/admin/v2/persistent/{TENANT}/nsperm/t/permissions/reader", _j(["consume"])),
        Case("perm-nsget-grant-subscription", "POST", f"{nsperm}/permissions/subscription/s",
             _j(["reader"])),
        Case("perm-nsget-subscription-auth-mode", "POST", f"{nsperm}/subscriptionAuthMode",
             _j("Prefix")),
        Case("perm-namespace-get-with-permissions", "GET", nsperm, unordered=True),
        Case("perm-nsget-delete-topic", "DELETE", f"/admin/v2/persistent/{TENANT}/nsperm/t"),
        Case("perm-nsget-delete", "DELETE", nsperm),
    ]  # fmt: skip


def _teardown() -> list[Case]:
    r = TOPIC_ROOT
    s = f"/admin/v2/schemas/{NS}"
    return [
        Case("missing-delete", "DELETE", f"{r}/missing"),
        # a topic's schema and the grants on it (and on its partitions) go with it
        Case("np-schema-before-delete", "POST", f"{s}/np/schema", _payload("STRING", "")),
        Case("np-grant-before-delete", "POST", f"{r}/np/permissions/gone", _j(["consume"])),
        Case("pt-grant-before-delete", "POST", f"{r}/pt/permissions/gone", _j(["consume"])),
        Case("pt-partition-grant-before-delete", "POST",
             f"{r}/pt-partition-1/permissions/gone1", _j(["produce"])),
        Case("np-delete", "DELETE", f"{r}/np"),
        Case("np-delete-again", "DELETE", f"{r}/np"),
        Case("np-schema-after-delete", "GET", f"{s}/np/schema"),
        Case("np-schemas-after-delete", "GET", f"{s}/np/schemas"),
        Case("np-recreate", "PUT", f"{r}/np"),
        Case("np-permissions-after-recreate", "GET", f"{r}/np/permissions", unordered=True),
        Case("np-delete-recreated", "DELETE", f"{r}/np"),
        Case("pt-delete-partitions", "DELETE", f"{r}/pt/partitions"),
        Case("pt-recreate", "PUT", f"{r}/pt/partitions", "2"),
        Case("pt-permissions-after-recreate", "GET", f"{r}/pt/permissions", unordered=True),
        Case("pt-partition-permissions-after-recreate", "GET",
             f"{r}/pt-partition-1/permissions", unordered=True),
        Case("pt-delete-recreated", "DELETE", f"{r}/pt/partitions"),
        Case("pv-delete-partitions", "DELETE", f"{r}/pv/partitions"),
        Case("pt-partitions-deleted", "GET", f"{r}/pt/partitions"),
        Case("topics-after-delete", "GET", r, unordered=True),
        Case("namespace-delete", "DELETE", f"/admin/v2/namespaces/{NS}"),
        Case("namespace-delete-again", "DELETE", f"/admin/v2/namespaces/{NS}"),
        Case("tenant-delete", "DELETE", f"/admin/v2/tenants/{TENANT}"),
        Case("tenant-delete-again", "DELETE", f"/admin/v2/tenants/{TENANT}"),
        Case("tenants-after-delete", "GET", "/admin/v2/tenants", unordered=True),
    ]  # fmt: skip


def _all() -> tuple[Case, ...]:
    cases = _setup() + _topics()
    for name, value, bad in POLICY_VALUES:
        cases += _policy_cases(name, value, bad)
    cases += _unlimited_rates()
    cases += _backlog_quota() + _namespace_policies() + _namespace_get_with_policies()
    cases += _schema_compatibility_strategy() + _schemas() + _permissions()
    cases += _teardown()
    names = [c.name for c in cases]
    duplicates = {n for n in names if names.count(n) > 1}
    if duplicates:
        raise ValueError(f"duplicate case names: {sorted(duplicates)}")
    return tuple(cases)


CASES: Final[tuple[Case, ...]] = _all()
