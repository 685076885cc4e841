"""The broker registry (RocketMQ NameServer semantics) over the registry topic.

* Registration: each sidecar writes ``broker/<cluster>/<broker id>`` (cluster, broker name,
  RocketMQ broker id, service and HTTP URLs, advertised listeners, data version) when it
  starts and again every ``heartbeat_interval_s`` (``lastUpdateTimestamp``), and at once if
  its record disappears.
* Liveness: a registered broker is *live* while its incarnation is a member of its
  cluster's ownership consumer group, i.e. while it heartbeats the Kafka group coordinator.
  A broker silent for ``session.timeout.ms`` (the configurable expiry) is dropped from the
  group by Kafka; the group's slot-0 owner then publishes the new membership snapshot and
  tombstones the expired registration and its wiped perms, so every sidecar's tables are
  cleaned by the same log records (see :mod:`sync.cluster._ownership_member`).

:class:`BrokerRegistry` is the read side every sidecar keeps; it pre-builds each live
broker's Pulsar ``LookupData`` JSON so a lookup answer costs a dict probe.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from sync._constants import REGISTRY_KEY_BROKER, REGISTRY_KEY_MEMBERS
from sync._errors import InvalidInputError, PolicySyncError
from sync.transport import Producer, Transport

from ._metadata import MetadataStore
from ._records import (
    PERM_READ_WRITE,
    BrokerRegistration,
    DataVersion,
    ListenerUrls,
    Membership,
)

logger = logging.getLogger(__name__)

__all__ = ["BrokerIdentity", "BrokerRegistry", "LiveBroker", "Registrar"]


@dataclass(frozen=True, slots=True)
class BrokerIdentity:
    """Who this sidecar's broker is, as it registers (validated at the CLI edge)."""

    broker_id: str
    cluster: str = "standalone"
    service_url: str = "pulsar://127.0.0.1:6650"
    http_url: str = "http://127.0.0.1:8080"
    service_url_tls: str | None = None
    http_url_tls: str | None = None
    broker_name: str | None = None
    replica_id: int = 0
    advertised_listeners: Mapping[str, ListenerUrls] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "advertised_listeners", MappingProxyType(dict(self.advertised_listeners))
        )

    @property
    def name(self) -> str:
        """RocketMQ broker name (defaults to the broker id)."""
        return self.broker_name or self.broker_id


def _lookup_json(
    service_url: str | None, service_url_tls: str | None, reg: BrokerRegistration
) -> bytes:
    # Pulsar's LookupData; "brokerUrlSsl" is kept because older C++ clients (and so the
    # Python client) refuse an answer without brokerUrlTls or brokerUrlSsl.
    # Pulsar omits the TLS URLs that are not configured (null is not sent).
    body = {
        "brokerUrl": service_url,
        "brokerUrlTls": service_url_tls,
        "httpUrl": reg.http_url,
        "httpUrlTls": reg.http_url_tls,
        "nativeUrl": service_url,
        "brokerUrlSsl": "",
    }
    present = {k: v for k, v in body.items() if v is not None}
    return json.dumps(present, separators=(",", ":")).encode("utf-8")


@dataclass(frozen=True, slots=True)
class LiveBroker:
    """A live broker with its lookup answers pre-encoded."""

    registration: BrokerRegistration
    lookup_json: bytes
    listener_json: Mapping[str, bytes]

    @property
    def broker_id(self) -> str:
        """The broker's id."""
        return self.registration.broker_id

    @property
    def incarnation(self) -> str:
        """The live process's incarnation."""
        return self.registration.incarnation

    def lookup_data(self, listener: str | None = None) -> bytes:
        """Pulsar ``LookupData`` JSON, for the default or a named advertised listener.

        Raises:
            InvalidInputError: the broker has no listener of that name.
        """
        if listener is None:
            return self.lookup_json
        found = self.listener_json.get(listener)
        if found is None:
            # Pulsar's wording (NamespaceService.createLookupResult).
            raise InvalidInputError(
                f"the broker do not have {listener} listener; advertised listeners of "
                f"{self.broker_id}: {sorted(self.listener_json) or 'none'}"
            )
        return found


def _live_broker(reg: BrokerRegistration) -> LiveBroker:
    return LiveBroker(
        reg,
        _lookup_json(reg.service_url, reg.service_url_tls, reg),
        {
            name: _lookup_json(urls.service_url, urls.service_url_tls, reg)
            for name, urls in reg.advertised_listeners.items()
        },
    )


class BrokerRegistry:
    """Live brokers of every cluster, derived from the registry view."""

    def __init__(self, store: MetadataStore, cluster: str) -> None:
        self.store = store
        self.cluster = cluster
        #: Live brokers of this sidecar's cluster by broker id (the lookup hot path).
        self.live: dict[str, LiveBroker] = {}
        self._listeners: list[Callable[[], None]] = []
        store.watch(self._on_change)

    def on_change(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` (reader thread) whenever the live set may have changed."""
        self._listeners.append(callback)

    def _on_change(self, key: str) -> None:
        if key.startswith((REGISTRY_KEY_BROKER, REGISTRY_KEY_MEMBERS)):
            self.refresh()

    def refresh(self) -> None:
        """Rebuild the live set of this sidecar's cluster."""
        members = self.store.memberships.get(self.cluster)
        alive = frozenset() if members is None else members.incarnations
        live: dict[str, LiveBroker] = {}
        for (cluster, broker_id), reg in list(self.store.registrations.items()):
            if cluster == self.cluster and reg.incarnation in alive:
                old = self.live.get(broker_id)
                live[broker_id] = (
                    old if old is not None and old.registration == reg else _live_broker(reg)
                )
        self.live = live
        for callback in self._listeners:
            try:
                callback()
            except Exception:
                logger.exception("registry change callback failed")

    # -- queries ---------------------------------------------------------------------
    def owner(self, broker_id: str, incarnation: str) -> LiveBroker | None:
        """The live broker ``broker_id`` if it is still incarnation ``incarnation``."""
        found = self.live.get(broker_id)
        if found is None or found.incarnation != incarnation:
            return None
        return found

    def clusters(self) -> list[str]:
        """Every cluster with a registered broker or a membership snapshot."""
        names = {c for c, _ in self.store.registrations} | set(self.store.memberships)
        return sorted(names)

    def live_brokers(self, cluster: str) -> list[BrokerRegistration]:
        """Registered brokers of ``cluster`` whose incarnation is in its ownership group."""
        members = self.store.memberships.get(cluster)
        if members is None:
            return []
        alive = members.incarnations
        return sorted(
            (
                reg
                for (c, _), reg in list(self.store.registrations.items())
                if c == cluster and reg.incarnation in alive
            ),
            key=lambda reg: reg.broker_id,
        )

    def membership(self, cluster: str) -> Membership | None:
        """The last published membership snapshot of ``cluster``."""
        return self.store.memberships.get(cluster)

    def perm(self, cluster: str, broker_name: str) -> int:
        """RocketMQ queue permission of a broker name: 6 (RW) unless wiped to 4."""
        wiped = self.store.perms.get((cluster, broker_name))
        return PERM_READ_WRITE if wiped is None else wiped.perm

    def cluster_info(self) -> dict[str, Any]:
        """RocketMQ ``ClusterInfo``: live brokers by name, and broker names by cluster."""
        broker_table: dict[str, Any] = {}
        cluster_table: dict[str, list[str]] = {}
        for cluster in self.clusters():
            for reg in self.live_brokers(cluster):
                entry = broker_table.setdefault(
                    reg.broker_name,
                    {"cluster": cluster, "brokerName": reg.broker_name, "brokerAddrs": {}},
                )
                entry["brokerAddrs"][str(reg.replica_id)] = service_address(reg)
                names = cluster_table.setdefault(cluster, [])
                if reg.broker_name not in names:
                    names.append(reg.broker_name)
        for names in cluster_table.values():
            names.sort()
        return {"brokerAddrTable": broker_table, "clusterAddrTable": cluster_table}


def service_address(reg: BrokerRegistration) -> str:
    """``host:port`` of the broker's binary service (RocketMQ's broker address)."""
    parsed = urllib.parse.urlsplit(reg.service_url)
    return parsed.netloc or reg.service_url


class Registrar:
    """Writes this sidecar's registration, refreshes it, and restores it if it vanishes."""

    def __init__(
        self,
        transport: Transport,
        store: MetadataStore,
        identity: BrokerIdentity,
        incarnation: str,
        *,
        heartbeat_interval_s: float = 10.0,
    ) -> None:
        self._transport = transport
        self._store = store
        self.identity = identity
        self.incarnation = incarnation
        self._interval_s = heartbeat_interval_s
        self._producer: Producer | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._version = DataVersion(0, 0)
        #: Our registration was applied (records of earlier incarnations come before it).
        self._seen_own = False
        #: A newer incarnation registered our broker id after ours.
        self.superseded = False
        store.watch(self._on_change)

    @property
    def key(self) -> str:
        """This broker's registry key."""
        return f"{REGISTRY_KEY_BROKER}{self.identity.cluster}/{self.identity.broker_id}"

    def _on_change(self, key: str) -> None:
        """Restore our registration if it vanished (tombstoned while we were out of the
        group); stop refreshing it once a newer incarnation registered our broker id after
        ours (another process took it: re-asserting ours would have the two fence each other
        in turn, the older one winning)."""
        if key != self.key or self._stop.is_set():
            return
        current = self._store.registrations.get((self.identity.cluster, self.identity.broker_id))
        if current is None:
            self._wake.set()
        elif current.incarnation == self.incarnation:
            self._seen_own = True
        elif self._seen_own and not self.superseded:
            self.superseded = True
            logger.warning(
                "broker id %s registered by incarnation %s after this one (%s): this one "
                "stops refreshing its registration",
                self.identity.broker_id,
                current.incarnation,
                self.incarnation,
            )
            self._wake.set()

    def registration(self, now_ms: int) -> BrokerRegistration:
        """What this sidecar registers now."""
        i = self.identity
        return BrokerRegistration(
            cluster=i.cluster,
            broker_id=i.broker_id,
            broker_name=i.name,
            replica_id=i.replica_id,
            incarnation=self.incarnation,
            service_url=i.service_url,
            service_url_tls=i.service_url_tls,
            http_url=i.http_url,
            http_url_tls=i.http_url_tls,
            advertised_listeners=i.advertised_listeners,
            data_version=self._version,
            heartbeat_ms=now_ms,
        )

    def register(self) -> BrokerRegistration:
        """Write the registration now (bumping the data version if the content changed)."""
        now_ms = int(time.time() * 1000)
        previous = self._store.registrations.get((self.identity.cluster, self.identity.broker_id))
        candidate = self.registration(now_ms)
        if self._version.counter == 0:
            counter = 1 if previous is None else previous.data_version.counter + 1
            self._version = DataVersion(now_ms, counter)
        elif previous is not None and previous.content() != candidate.content():
            self._version = DataVersion(now_ms, self._version.counter + 1)
        reg = self.registration(now_ms)
        if self._producer is None:
            self._producer = self._transport.producer()
        self._producer.produce(self._store.table.spec.name, reg.key.encode("utf-8"), reg.to_json())
        self._producer.flush(10.0)
        return reg

    def start(self) -> None:
        """Register, then keep the registration fresh in a background thread."""
        self.register()
        self._thread = threading.Thread(target=self._run, name="registrar", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self._interval_s)
            self._wake.clear()
            if self._stop.is_set() or self.superseded:
                return
            try:
                self.register()
            except PolicySyncError as exc:
                logger.warning("re-registering broker %s failed: %s", self.identity.broker_id, exc)

    def close(self) -> None:
        """Stop refreshing (the registration stays until the group expires this broker)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._producer is not None:
            self._producer.close()
