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
    ``unordered``: the body is a list whose order carries no meaning (sorted before compare).
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


def _teardown() -> list[Case]:
    r = TOPIC_ROOT
    return [
        Case("missing-delete", "DELETE", f"{r}/missing"),
        Case("np-delete", "DELETE", f"{r}/np"),
        Case("np-delete-again", "DELETE", f"{r}/np"),
        Case("pt-delete-partitions", "DELETE", f"{r}/pt/partitions"),
        Case("pv-delete-partitions", "DELETE", f"{r}/pv/partitions"),
        Case("pt-partitions-deleted", "GET", f"{r}/pt/partitions"),
        Case("topics-after-delete", "GET", r, unordered=True),
        Case("namespace-delete", "DELETE", f"/admin/v2/namespaces/{NS}"),
        Case("namespace-delete-again", "DELETE", f"/admin/v2/namespaces/{NS}"),
        Case("tenant-delete", "DELETE", f"/admin/v2/tenants/{TENANT}"),
        Case("tenant-delete-again", "DELETE", f"/admin/v2/tenants/{TENANT}"),
        Case("tenants-after-delete", "GET", "/admin/v2/tenants", unordered=True),
    ]


def _all() -> tuple[Case, ...]:
    cases = _setup() + _topics()
    for name, value, bad in POLICY_VALUES:
        cases += _policy_cases(name, value, bad)
    cases += _unlimited_rates()
    cases += _backlog_quota() + _namespace_policies() + _namespace_get_with_policies()
    cases += _teardown()
    names = [c.name for c in cases]
    duplicates = {n for n in names if names.count(n) > 1}
    if duplicates:
        raise ValueError(f"duplicate case names: {sorted(duplicates)}")
    return tuple(cases)


CASES: Final[tuple[Case, ...]] = _all()
