"""``broker-shim run`` flags of the registry, ownership and lookup (validated here)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from sync.cluster import AuthConfig, ClusterSettings, ListenerUrls, LookupConfig, OwnershipConfig
from sync.constants import DEFAULT_OWNERSHIP_SLOTS
from sync.errors import ConfigurationError

__all__ = ["add_lookup_flags", "geo_peers", "lookup_settings"]

# The cluster name becomes part of Kafka topic names and a consumer group id.
_CLUSTER_NAME = re.compile(r"^[A-Za-z0-9._-]{1,100}$")
_LISTENER_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


def add_lookup_flags(parser: argparse.ArgumentParser) -> None:
    """Add the lookup flags to ``broker-shim run``."""
    group = parser.add_argument_group("registry, bundle ownership and lookup")
    group.add_argument(
        "--no-lookup",
        action="store_true",
        help="do not join the cluster's registry/ownership group (no lookup endpoints)",
    )
    group.add_argument(
        "--session-timeout-ms",
        type=int,
        default=6000,
        help="liveness: a sidecar silent this long loses its bundles (Kafka group "
        "session.timeout.ms; the broker's group.min.session.timeout.ms is the floor)",
    )
    group.add_argument(
        "--ownership-slots",
        type=int,
        default=DEFAULT_OWNERSHIP_SLOTS,
        help="partitions of the ownership slots topic (fixed once the topic exists)",
    )
    group.add_argument("--broker-name", default=None, help="RocketMQ broker name (default: id)")
    group.add_argument(
        "--replica-id", type=int, default=0, help="RocketMQ broker id within the name (0: master)"
    )
    group.add_argument("--broker-url-tls", default=None, help="pulsar+ssl://HOST:PORT")
    group.add_argument("--http-url-tls", default=None, help="https://HOST:PORT")
    group.add_argument(
        "--advertised-listener",
        action="append",
        default=[],
        metavar="NAME=URL[,TLS_URL]",
        help="an extra advertised listener (repeatable), e.g. internal=pulsar://10.0.0.5:6650",
    )
    group.add_argument("--auth-config", default=None, help="JSON file: tokens and roles")
    group.add_argument("--max-pending-lookups", type=int, default=50_000)
    group.add_argument("--lookup-timeout", type=float, default=10.0)
    group.add_argument(
        "--default-bundles", type=int, default=4, help="bundles of a namespace created without"
    )


def _listener(text: str) -> tuple[str, ListenerUrls]:
    name, sep, urls = text.partition("=")
    if not sep or not _LISTENER_NAME.match(name):
        raise ConfigurationError(f"--advertised-listener must be NAME=URL[,TLS_URL], got {text!r}")
    plain, _, tls = urls.partition(",")
    for url in (plain, tls):
        if url and not url.startswith(("pulsar://", "pulsar+ssl://")):
            raise ConfigurationError(f"--advertised-listener URL must be pulsar://…, got {url!r}")
    return name, ListenerUrls(plain or None, tls or None)


def lookup_settings(args: argparse.Namespace) -> ClusterSettings | None:
    """The :class:`ClusterSettings` the flags describe (None with ``--no-lookup``).

    Raises:
        ConfigurationError: a flag value is invalid.
    """
    if args.no_lookup:
        return None
    if not _CLUSTER_NAME.match(str(args.cluster)):
        raise ConfigurationError(
            f"--cluster {args.cluster!r} must use only letters, digits, '.', '_' and '-' "
            "(it names Kafka topics and a consumer group)"
        )
    if args.max_pending_lookups < 1 or args.lookup_timeout <= 0 or args.default_bundles < 1:
        raise ConfigurationError(
            "--max-pending-lookups and --default-bundles must be >= 1, --lookup-timeout > 0"
        )
    if args.broker_url_tls is not None and not args.broker_url_tls.startswith("pulsar+ssl://"):
        raise ConfigurationError(
            f"--broker-url-tls must be pulsar+ssl://…, got {args.broker_url_tls!r}"
        )
    if args.http_url_tls is not None and not args.http_url_tls.startswith("https://"):
        raise ConfigurationError(f"--http-url-tls must be https://…, got {args.http_url_tls!r}")
    listeners = dict(_listener(text) for text in args.advertised_listener)
    return ClusterSettings(
        ownership=OwnershipConfig(
            slots=args.ownership_slots, session_timeout_ms=args.session_timeout_ms
        ),
        lookup=LookupConfig(
            max_pending_lookups=args.max_pending_lookups,
            lookup_timeout_s=args.lookup_timeout,
            default_bundles=args.default_bundles,
        ),
        broker_name=args.broker_name,
        replica_id=args.replica_id,
        service_url_tls=args.broker_url_tls,
        http_url_tls=args.http_url_tls,
        advertised_listeners=listeners,
        auth=None if args.auth_config is None else AuthConfig.from_file(Path(args.auth_config)),
    )


_GEO_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


def geo_peers(args: argparse.Namespace) -> tuple[str, ...]:
    """The ``--geo-peers`` names, checked: MirrorMaker 2 aliases (no ``.``), not this cluster.

    Raises:
        ConfigurationError: a bad name, or this cluster among its peers.
    """
    peers = tuple(p.strip() for p in str(args.geo_peers).split(",") if p.strip())
    if not peers:
        return ()
    for name in (str(args.cluster), *peers):
        if not _GEO_NAME.match(name):
            raise ConfigurationError(
                f"--geo-peers: cluster {name!r} must use only letters, digits, '_' and '-' "
                "(MirrorMaker 2 reads a '.' as a cluster prefix)"
            )
    if args.cluster in peers or len(set(peers)) != len(peers):
        raise ConfigurationError("--geo-peers must name other clusters than --cluster, once each")
    return peers
