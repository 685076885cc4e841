"""The records kept in the registry and ownership topics, and the bundle state machine.

Values are compact JSON (UTF-8); keys are the strings documented in
:mod:`sync._constants` (``REGISTRY_KEY_*``). A null value is a tombstone.

Bundle ownership states (checked in one place, :func:`check_transition`)::

    (no record) ──claim──▶ OWNED ──revoke (slot moves)──▶ RELEASING ──claim──▶ OWNED
                   ▲         │  └──unload──▶ FREE ──claim──┘      │
                   │         └──failover: the new slot owner claims─┘
                   └────── DELETED (tombstone: the bundle left its namespace's layout)

Pulsar's PIP-192 channel has the same states plus ``Assigning``/``Splitting``, which it needs
because its leader writes a decision that the destination broker confirms later. Here the
decider *is* the new owner (it holds the bundle's slot in the ownership group), so a claim
is written once, already final, and Kafka's transactional fencing rejects a stale decider.
"""

from __future__ import annotations

import enum
import json
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from sync._constants import (
    OWNERSHIP_MEMBER_CLIENT_PREFIX,
    REGISTRY_KEY_BROKER,
    REGISTRY_KEY_KV,
    REGISTRY_KEY_MEMBERS,
    REGISTRY_KEY_NAMESPACE,
    REGISTRY_KEY_PERM,
    REGISTRY_KEY_TENANT,
    REGISTRY_KEY_TOPIC,
)
from sync._errors import CodecError, ConflictError
from sync.naming._bundles import NamespaceBundles
from sync.naming._names import NamespaceName, TopicName

__all__ = [
    "BrokerRegistration",
    "BundleState",
    "DataVersion",
    "ListenerUrls",
    "MemberInfo",
    "Membership",
    "OwnershipRecord",
    "TenantRecord",
    "TopicRecord",
    "WritePerm",
    "allowed_transitions",
    "check_transition",
    "decode_json",
    "encode_json",
]

PERM_READ = 4
PERM_WRITE = 2
PERM_READ_WRITE = PERM_READ | PERM_WRITE


class BundleState(enum.StrEnum):
    """Where a bundle is in its ownership life (``None`` means: no record, never owned)."""

    OWNED = "Owned"
    RELEASING = "Releasing"
    FREE = "Free"
    DELETED = "Deleted"


_ALLOWED: dict[BundleState | None, frozenset[BundleState]] = {
    None: frozenset({BundleState.OWNED}),
    BundleState.FREE: frozenset({BundleState.OWNED, BundleState.DELETED}),
    # OWNED -> OWNED is a failover: the slot's new owner takes over from a dead one.
    BundleState.OWNED: frozenset(
        {BundleState.OWNED, BundleState.RELEASING, BundleState.FREE, BundleState.DELETED}
    ),
    BundleState.RELEASING: frozenset({BundleState.OWNED, BundleState.FREE, BundleState.DELETED}),
    # A tombstone: the key is gone, so what follows is a first claim.
    BundleState.DELETED: frozenset({BundleState.OWNED}),
}


def allowed_transitions(state: BundleState | None) -> frozenset[BundleState]:
    """The states a bundle may move to from ``state`` (``None``: no record yet)."""
    return _ALLOWED[state]


def check_transition(
    bundle: str,
    old: OwnershipRecord | None,
    new: BundleState,
    broker: str,
    incarnation: str | None = None,
) -> None:
    """Refuse an ownership write that the state machine does not allow.

    Also refuses a no-op (``OWNED`` by the same incarnation again), so every record in the
    ownership topic is a real change. A *new* incarnation of the same broker id (a sidecar
    killed and restarted) takes over what its dead incarnation owned: that is a change.
    ``incarnation`` None compares broker ids only.

    Raises:
        ConflictError: the transition is not allowed.
    """
    state = None if old is None else old.state
    if new not in _ALLOWED[state]:
        raise ConflictError(
            f"bundle {bundle} cannot go from {state or 'no record'} to {new}; "
            "this is a bug in the ownership writer"
        )
    if old is not None and new is BundleState.OWNED and state is BundleState.OWNED:
        if old.broker == broker and incarnation in (None, old.incarnation):
            raise ConflictError(f"bundle {bundle} is already owned by {broker}")


def encode_json(value: Mapping[str, Any]) -> bytes:
    """Compact, key-sorted JSON: equal values encode to equal bytes."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode("utf-8")


def decode_json(raw: bytes, what: str) -> dict[str, Any]:
    """Decode a JSON object, or raise :class:`CodecError` naming ``what``."""
    try:
        value = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CodecError(f"{what}: not JSON ({exc})") from exc
    if not isinstance(value, dict):
        raise CodecError(f"{what}: expected a JSON object, got {type(value).__name__}")
    return value


@dataclass(frozen=True, slots=True)
class OwnershipRecord:
    """The last word on one bundle: ``{bundle, state, broker, ...}`` keyed by bundle."""

    bundle: str
    state: BundleState
    #: Owner (OWNED), the broker giving it up (RELEASING) or the last owner (FREE).
    broker: str
    #: The owner process's incarnation: a restarted broker is a different owner.
    incarnation: str
    #: Per bundle, +1 on every record: strictly increasing in log order.
    version: int
    #: Ownership-group generation of the writer when it wrote (informational).
    generation: int
    slot: int
    timestamp_ms: int
    reason: str
    previous: str | None = None

    def to_json(self) -> bytes:
        """The record's value in the ownership topic."""
        return encode_json(
            {
                "bundle": self.bundle,
                "state": self.state.value,
                "broker": self.broker,
                "incarnation": self.incarnation,
                "versionId": self.version,
                "generation": self.generation,
                "slot": self.slot,
                "timestamp": self.timestamp_ms,
                "reason": self.reason,
                "sourceBroker": self.previous,
            }
        )

    @classmethod
    def from_json(cls, raw: bytes) -> OwnershipRecord:
        """Decode a value written by :meth:`to_json`.

        Raises:
            CodecError: the value is not an ownership record.
        """
        d = decode_json(raw, "ownership record")
        try:
            return cls(
                bundle=str(d["bundle"]),
                state=BundleState(d["state"]),
                broker=str(d["broker"]),
                incarnation=str(d.get("incarnation", "")),
                version=int(d["versionId"]),
                generation=int(d.get("generation", -1)),
                slot=int(d.get("slot", -1)),
                timestamp_ms=int(d.get("timestamp", 0)),
                reason=str(d.get("reason", "")),
                previous=None if d.get("sourceBroker") is None else str(d["sourceBroker"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CodecError(f"ownership record: bad field ({exc!r})") from exc

    def to_rest(self) -> dict[str, Any]:
        """The record as the status endpoints show it."""
        return json.loads(self.to_json())  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True)
class ListenerUrls:
    """One advertised listener (Pulsar ``AdvertisedListener``)."""

    service_url: str | None
    service_url_tls: str | None = None


@dataclass(frozen=True, slots=True)
class DataVersion:
    """RocketMQ ``DataVersion``: bumped whenever a broker's registration content changes."""

    timestamp_ms: int
    counter: int


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """What a sidecar publishes about its broker (RocketMQ REGISTER_BROKER + Pulsar's
    ``BrokerLookupData``)."""

    cluster: str
    broker_id: str
    broker_name: str
    #: RocketMQ broker id within ``broker_name``: 0 is the master.
    replica_id: int
    incarnation: str
    service_url: str
    service_url_tls: str | None
    http_url: str
    http_url_tls: str | None
    advertised_listeners: Mapping[str, ListenerUrls] = field(default_factory=dict)
    data_version: DataVersion = DataVersion(0, 0)
    heartbeat_ms: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "advertised_listeners", MappingProxyType(dict(self.advertised_listeners))
        )

    @property
    def key(self) -> str:
        """``broker/<cluster>/<broker id>``."""
        return broker_key(self.cluster, self.broker_id)

    @property
    def web_address(self) -> str:
        """``host:port`` of the HTTP service, as Pulsar's ``GET /admin/v2/brokers`` lists it."""
        parsed = urllib.parse.urlsplit(self.http_url)
        return parsed.netloc or self.http_url

    def content(self) -> dict[str, Any]:
        """Everything but the heartbeat time and data version (what a version covers)."""
        return {
            "cluster": self.cluster,
            "brokerId": self.broker_id,
            "brokerName": self.broker_name,
            "replicaId": self.replica_id,
            "incarnation": self.incarnation,
            "brokerServiceUrl": self.service_url,
            "brokerServiceUrlTls": self.service_url_tls,
            "webServiceUrl": self.http_url,
            "webServiceUrlTls": self.http_url_tls,
            "advertisedListeners": {
                name: {
                    "brokerServiceUrl": urls.service_url,
                    "brokerServiceUrlTls": urls.service_url_tls,
                }
                for name, urls in sorted(self.advertised_listeners.items())
            },
        }

    def to_json(self) -> bytes:
        """The registration's value in the registry topic."""
        body = self.content()
        body["dataVersion"] = {
            "timestamp": self.data_version.timestamp_ms,
            "counter": self.data_version.counter,
        }
        body["lastUpdateTimestamp"] = self.heartbeat_ms
        return encode_json(body)

    @classmethod
    def from_json(cls, raw: bytes) -> BrokerRegistration:
        """Decode a value written by :meth:`to_json`.

        Raises:
            CodecError: the value is not a broker registration.
        """
        d = decode_json(raw, "broker registration")
        try:
            listeners = {
                str(name): ListenerUrls(
                    urls.get("brokerServiceUrl"), urls.get("brokerServiceUrlTls")
                )
                for name, urls in dict(d.get("advertisedListeners") or {}).items()
            }
            version = dict(d.get("dataVersion") or {})
            return cls(
                cluster=str(d["cluster"]),
                broker_id=str(d["brokerId"]),
                broker_name=str(d.get("brokerName") or d["brokerId"]),
                replica_id=int(d.get("replicaId", 0)),
                incarnation=str(d["incarnation"]),
                service_url=str(d["brokerServiceUrl"]),
                service_url_tls=d.get("brokerServiceUrlTls"),
                http_url=str(d["webServiceUrl"]),
                http_url_tls=d.get("webServiceUrlTls"),
                advertised_listeners=listeners,
                data_version=DataVersion(
                    int(version.get("timestamp", 0)), int(version.get("counter", 0))
                ),
                heartbeat_ms=int(d.get("lastUpdateTimestamp", 0)),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CodecError(f"broker registration: bad field ({exc!r})") from exc


@dataclass(frozen=True, slots=True)
class MemberInfo:
    """One live member of a cluster's ownership group."""

    client_id: str
    member_id: str
    host: str
    slots: tuple[int, ...]

    @property
    def incarnation(self) -> str:
        """The sidecar process this member is (its client.id without the prefix)."""
        return self.client_id.removeprefix(OWNERSHIP_MEMBER_CLIENT_PREFIX)


@dataclass(frozen=True, slots=True)
class Membership:
    """A snapshot of a cluster's ownership group, published by the owner of slot 0."""

    cluster: str
    members: tuple[MemberInfo, ...]
    leader: str
    generation: int
    timestamp_ms: int

    @property
    def incarnations(self) -> frozenset[str]:
        """The incarnations of every live member."""
        return frozenset(m.incarnation for m in self.members)

    def to_json(self) -> bytes:
        """The snapshot's value in the registry topic."""
        return encode_json(
            {
                "cluster": self.cluster,
                "leader": self.leader,
                "generation": self.generation,
                "timestamp": self.timestamp_ms,
                "members": [
                    {
                        "clientId": m.client_id,
                        "memberId": m.member_id,
                        "host": m.host,
                        "slots": list(m.slots),
                    }
                    for m in self.members
                ],
            }
        )

    @classmethod
    def from_json(cls, raw: bytes) -> Membership:
        """Decode a value written by :meth:`to_json`.

        Raises:
            CodecError: the value is not a membership snapshot.
        """
        d = decode_json(raw, "membership")
        try:
            return cls(
                cluster=str(d["cluster"]),
                leader=str(d.get("leader", "")),
                generation=int(d.get("generation", -1)),
                timestamp_ms=int(d.get("timestamp", 0)),
                members=tuple(
                    MemberInfo(
                        str(m["clientId"]),
                        str(m.get("memberId", "")),
                        str(m.get("host", "")),
                        tuple(int(s) for s in m.get("slots", ())),
                    )
                    for m in d.get("members", ())
                ),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CodecError(f"membership: bad field ({exc!r})") from exc


@dataclass(frozen=True, slots=True)
class TopicRecord:
    """A topic created through the admin API, and the Kafka topic backing it."""

    topic: str
    #: Pulsar's count: 0 for a non-partitioned topic.
    partitions: int
    kafka_topic: str
    created_ms: int
    #: Pulsar's partitioned-topic properties (sorted key/value pairs).
    properties: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> bytes:
        """The record's value in the registry topic."""
        return encode_json(
            {
                "topic": self.topic,
                "partitions": self.partitions,
                "kafkaTopic": self.kafka_topic,
                "created": self.created_ms,
                **({"properties": dict(self.properties)} if self.properties else {}),
            }
        )

    @classmethod
    def from_json(cls, raw: bytes) -> TopicRecord:
        """Decode a value written by :meth:`to_json`.

        Raises:
            CodecError: the value is not a topic record.
        """
        d = decode_json(raw, "topic record")
        try:
            properties = d.get("properties") or {}
            if not isinstance(properties, dict):
                raise TypeError("properties is not an object")
            return cls(
                str(d["topic"]),
                int(d["partitions"]),
                str(d["kafkaTopic"]),
                int(d["created"]),
                tuple(sorted((str(k), str(v)) for k, v in properties.items())),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CodecError(f"topic record: bad field ({exc!r})") from exc


@dataclass(frozen=True, slots=True)
class TenantRecord:
    """A Pulsar tenant: who administers it and which clusters its namespaces may use."""

    name: str
    admin_roles: tuple[str, ...]
    allowed_clusters: tuple[str, ...]

    def to_rest(self) -> dict[str, Any]:
        """Pulsar's TenantInfo JSON."""
        return {
            "adminRoles": list(self.admin_roles),
            "allowedClusters": list(self.allowed_clusters),
        }

    def to_json(self) -> bytes:
        """The record's value in the registry topic."""
        return encode_json({"tenant": self.name, **self.to_rest()})

    @classmethod
    def from_json(cls, raw: bytes) -> TenantRecord:
        """Decode a value written by :meth:`to_json`.

        Raises:
            CodecError: the value is not a tenant record.
        """
        d = decode_json(raw, "tenant record")
        try:
            roles, clusters = d["adminRoles"], d["allowedClusters"]
            if not isinstance(roles, list) or not isinstance(clusters, list):
                raise TypeError("adminRoles and allowedClusters must be lists")
            return cls(str(d["tenant"]), tuple(map(str, roles)), tuple(map(str, clusters)))
        except (KeyError, TypeError, ValueError) as exc:
            raise CodecError(f"tenant record: bad field ({exc!r})") from exc


@dataclass(frozen=True, slots=True)
class WritePerm:
    """A wiped write permission (RocketMQ WIPE_WRITE_PERM_OF_BROKER) of one broker name."""

    cluster: str
    broker_name: str
    perm: int
    timestamp_ms: int

    def to_json(self) -> bytes:
        """The record's value in the registry topic."""
        return encode_json(
            {
                "cluster": self.cluster,
                "brokerName": self.broker_name,
                "perm": self.perm,
                "timestamp": self.timestamp_ms,
            }
        )

    @classmethod
    def from_json(cls, raw: bytes) -> WritePerm:
        """Decode a value written by :meth:`to_json`.

        Raises:
            CodecError: the value is not a perm record.
        """
        d = decode_json(raw, "write perm")
        try:
            return cls(str(d["cluster"]), str(d["brokerName"]), int(d["perm"]), int(d["timestamp"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise CodecError(f"write perm: bad field ({exc!r})") from exc


def encode_layout(bundles: NamespaceBundles, version: int) -> bytes:
    """A namespace's bundle layout as stored in the registry (Pulsar ``BundlesData``)."""
    body: dict[str, Any] = dict(bundles.to_json())
    body["version"] = version
    return encode_json(body)


def decode_layout(namespace: NamespaceName, raw: bytes) -> tuple[NamespaceBundles, int]:
    """Inverse of :func:`encode_layout`.

    Raises:
        CodecError: the value is not a valid bundle layout.
    """
    d = decode_json(raw, f"bundle layout of {namespace}")
    try:
        boundaries = [int(str(b), 16) for b in d["boundaries"]]
        return NamespaceBundles.from_boundaries(namespace, boundaries), int(d.get("version", 0))
    except (KeyError, TypeError, ValueError) as exc:
        raise CodecError(f"bundle layout of {namespace}: bad field ({exc!r})") from exc
    except Exception as exc:  # InvalidInputError from NamespaceBundles
        raise CodecError(f"bundle layout of {namespace}: {exc}") from exc


def broker_key(cluster: str, broker_id: str) -> str:
    """Registry key of a broker registration."""
    return f"{REGISTRY_KEY_BROKER}{cluster}/{broker_id}"


def members_key(cluster: str) -> str:
    """Registry key of a cluster's membership snapshot."""
    return f"{REGISTRY_KEY_MEMBERS}{cluster}"


def namespace_key(namespace: NamespaceName) -> str:
    """Registry key of a namespace's bundle layout."""
    return f"{REGISTRY_KEY_NAMESPACE}{namespace}"


def topic_key(topic: TopicName) -> str:
    """Registry key of a topic's metadata (the base topic, never a partition)."""
    return f"{REGISTRY_KEY_TOPIC}{topic.base.canonical}"


def kv_key(namespace: str, key: str) -> str:
    """Registry key of one KV config entry (both parts URL-quoted: they may hold ``/``)."""
    quote = urllib.parse.quote
    return f"{REGISTRY_KEY_KV}{quote(namespace, safe='')}/{quote(key, safe='')}"


def split_kv_key(registry_key: str) -> tuple[str, str]:
    """Inverse of :func:`kv_key`."""
    ns, _, key = registry_key[len(REGISTRY_KEY_KV) :].partition("/")
    return urllib.parse.unquote(ns), urllib.parse.unquote(key)


def tenant_key(tenant: str) -> str:
    """Registry key of a tenant."""
    return f"{REGISTRY_KEY_TENANT}{tenant}"


def perm_key(cluster: str, broker_name: str) -> str:
    """Registry key of a broker name's wiped write permission."""
    return f"{REGISTRY_KEY_PERM}{cluster}/{broker_name}"
