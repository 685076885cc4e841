"""``broker-shim``: the sidecar process that runs beside each broker."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import socket
from pathlib import Path

from aiohttp import log as web_log

from sync import ConfigurationError
from sync.messaging import AutoTopicCreation, TopicType

from .._http import build_app
from .._serve import run as serve
from .._shutdown import DEFAULT_SHUTDOWN_TIMEOUT_S, ShutdownGuard
from .._sidecar import Sidecar, SidecarConfig
from .._tls import TlsSettings
from ._cluster_flags import add_lookup_flags, geo_peers, lookup_settings
from ._common import add_bootstrap_flag, configure_logging, run_main

__all__ = ["main"]

logger = logging.getLogger(__name__)


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port must be 1..65535, got {port}")
    return port


def _port_or_zero(text: str) -> int:
    if text.strip() == "0":
        return 0
    return _port(text)


def _bind(host: str, port: int, what: str = "the Pulsar binary protocol") -> socket.socket:
    """A listening socket (of the binary protocol, or of HTTPS), bound now so port 0 is
    known before the sidecar advertises its URL."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ConfigurationError(f"cannot resolve --listen-host {host!r}: {exc}") from exc
    family, kind, proto, _name, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise ConfigurationError(f"cannot listen on {host}:{port} for {what}: {exc}") from exc
    sock.listen(1024)
    sock.setblocking(False)
    return sock


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="broker-shim", description="policy-sync sidecar")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the sidecar (stops cleanly on SIGTERM)")
    run.add_argument("--broker-id", required=True)
    run.add_argument("--http-port", required=True, type=_port)
    add_bootstrap_flag(run)
    run.add_argument(
        "--broker-url",
        default=None,
        help="pulsar://HOST:PORT advertised to clients (default: pulsar://--host:--broker-port)",
    )
    run.add_argument(
        "--broker-port",
        type=_port_or_zero,
        default=6650,
        help="port of the Pulsar binary protocol (default 6650; 0: any free port)",
    )
    run.add_argument(
        "--broker-port-tls",
        type=_port_or_zero,
        default=None,
        help="port of pulsar+ssl:// (Pulsar's brokerServicePortTls; off by default; 0: any "
        "free port); needs --tls-cert-file and --tls-key-file",
    )
    run.add_argument(
        "--http-port-tls",
        type=_port_or_zero,
        default=None,
        help="port of https:// beside --http-port: admin REST, lookups, WebSocket (wss://), "
        "metrics (Pulsar's webServicePortTls; off by default; 0: any free port); needs "
        "--tls-cert-file and --tls-key-file",
    )
    run.add_argument("--tls-cert-file", default=None, help="the TLS certificate (PEM)")
    run.add_argument("--tls-key-file", default=None, help="the TLS certificate's key (PEM)")
    run.add_argument(
        "--tls-trust-cert-file",
        default=None,
        help="CA certificates (PEM) client certificates are checked against",
    )
    run.add_argument(
        "--tls-require-trusted-client-cert",
        action="store_true",
        help="refuse TLS clients without a certificate --tls-trust-cert-file trusts",
    )
    run.add_argument("--cluster", default="standalone")
    run.add_argument(
        "--geo-peers",
        default="",
        help="comma-separated peer clusters whose global policies MirrorMaker 2 mirrors "
        "here (<peer>.policy-sync-global-events); global policies then live in "
        "policy-sync-global-events, merged by last writer wins (docs/geo-design.md)",
    )
    run.add_argument("--host", default="127.0.0.1", help="address advertised to clients")
    run.add_argument("--listen-host", default=None, help="address to bind (default: --host)")
    run.add_argument("--topic", default="__change_events")
    run.add_argument(
        "--state-dir",
        default=None,
        help="where the cache snapshot lives (default: $XDG_STATE_HOME/policy-sync/<cluster>/<id>)",
    )
    run.add_argument("--bootstrap-timeout", type=float, default=120.0)
    run.add_argument("--log-level", default="info")
    run.add_argument(
        "--access-log",
        action="store_true",
        help="log every HTTP request (off by default: at thousands of lookups a second "
        "the log line costs more CPU than the lookup)",
    )
    run.add_argument(
        "--no-forward-writes",
        dest="forward_writes",
        action="store_false",
        help="write policies here (taking the fence) instead of forwarding them to the "
        "elected fence holder",
    )
    run.add_argument(
        "--holder-session-timeout-ms",
        type=int,
        default=6_000,
        help="session timeout of the fence-holder election: how long a dead holder keeps "
        "the role (writes then fall back to the local writer meanwhile)",
    )
    run.add_argument(
        "--allow-auto-topic-creation",
        type=_true_false,
        default=True,
        help="Pulsar's allowAutoTopicCreation: a producer or consumer on a topic never "
        "created creates it (true, the default, or false)",
    )
    run.add_argument(
        "--allow-auto-topic-creation-type",
        choices=[t.value for t in TopicType],
        default=TopicType.NON_PARTITIONED.value,
        help="Pulsar's allowAutoTopicCreationType (default non-partitioned)",
    )
    run.add_argument(
        "--default-num-partitions",
        type=int,
        default=1,
        help="Pulsar's defaultNumPartitions of auto-created partitioned topics (default 1)",
    )
    run.add_argument(
        "--shutdown-timeout",
        type=_positive_seconds,
        default=DEFAULT_SHUTDOWN_TIMEOUT_S,
        help="longest graceful stop on SIGTERM, in seconds (Pulsar's brokerShutdownTimeoutMs; "
        f"default {DEFAULT_SHUTDOWN_TIMEOUT_S:g}): then the process exits without finishing it",
    )
    run.add_argument(
        "--entry-format",
        choices=("message", "entry"),
        default="entry",
        help="how a Pulsar client's SEND is stored in Kafka: entry, the client's batch as "
        "one record, as sent (the default, as Pulsar stores an entry), or message, one "
        "record per message (the layout before 2026-11-28; docs/messaging.md)",
    )
    add_lookup_flags(run)  # registry, bundle ownership, lookup (issue 4)
    return parser


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value


def _true_false(text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"must be true or false, got {text!r}")
    return value == "true"


def auto_topic_creation(args: argparse.Namespace) -> AutoTopicCreation:
    """The broker's auto-creation defaults the flags describe.

    Raises:
        ConfigurationError: ``--default-num-partitions`` below 1.
    """
    return AutoTopicCreation(
        allow=bool(args.allow_auto_topic_creation),
        topic_type=TopicType(args.allow_auto_topic_creation_type),
        default_num_partitions=int(args.default_num_partitions),
    )


def tls_settings(args: argparse.Namespace) -> TlsSettings | None:
    """The TLS listeners' settings (None: neither ``--broker-port-tls`` nor
    ``--http-port-tls``), checked now.

    Raises:
        ConfigurationError: a TLS port without a certificate and key, or files that cannot
            be used.
    """
    files = (args.tls_cert_file, args.tls_key_file)
    ports = [
        flag
        for flag, port in (
            ("--broker-port-tls", args.broker_port_tls),
            ("--http-port-tls", args.http_port_tls),
        )
        if port is not None
    ]
    if not ports:
        if any(files) or args.tls_trust_cert_file or args.tls_require_trusted_client_cert:
            raise ConfigurationError("the --tls-* flags need --broker-port-tls or --http-port-tls")
        return None
    if not all(files):
        raise ConfigurationError(
            f"{' and '.join(ports)} need{'s' if len(ports) == 1 else ''} --tls-cert-file "
            "and --tls-key-file"
        )
    trust = args.tls_trust_cert_file
    settings = TlsSettings(
        cert_file=Path(args.tls_cert_file),
        key_file=Path(args.tls_key_file),
        trust_cert_file=None if trust is None else Path(trust),
        require_client_cert=bool(args.tls_require_trusted_client_cert),
    )
    settings.server_context()  # refused now, before any port is bound
    return settings


def _state_dir(args: argparse.Namespace) -> Path:
    if args.state_dir:
        return Path(str(args.state_dir))
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "policy-sync" / str(args.cluster) / str(args.broker_id)


def _run(args: argparse.Namespace) -> int:
    configure_logging(args.log_level)
    if args.broker_url is not None and not args.broker_url.startswith(
        ("pulsar://", "pulsar+ssl://")
    ):
        raise ConfigurationError(
            f"--broker-url must be pulsar://HOST:PORT, got {args.broker_url!r}"
        )
    tls = tls_settings(args)
    bind = args.listen_host or args.host
    # The HTTP port first: a port-0 listener bound before it could be given the very port
    # --http-port names (free, as a test's or an orchestrator's probe left it).
    http_socket = _bind(bind, args.http_port, "HTTP")
    broker_socket = _bind(bind, args.broker_port)
    tls_socket = None
    if tls is not None and args.broker_port_tls is not None:
        tls_socket = _bind(bind, args.broker_port_tls)
    https_socket = None
    if tls is not None and args.http_port_tls is not None:
        https_socket = _bind(bind, args.http_port_tls, "HTTPS")
    lookup = lookup_settings(args)
    tls_port = None if tls_socket is None else int(tls_socket.getsockname()[1])
    if lookup is not None and tls_port is not None and lookup.service_url_tls is None:
        # Registered for the cluster's lookups: TLS clients are sent here.
        lookup = dataclasses.replace(lookup, service_url_tls=f"pulsar+ssl://{args.host}:{tls_port}")
    config = SidecarConfig(
        broker_id=str(args.broker_id),
        http_port=int(http_socket.getsockname()[1]),
        bootstrap_servers=args.bootstrap_servers,
        host=args.host,
        broker_url=args.broker_url,
        broker_port=int(broker_socket.getsockname()[1]),
        broker_port_tls=tls_port,
        tls=tls,
        broker_url_tls=None if lookup is None else lookup.service_url_tls,
        http_port_tls=None if https_socket is None else int(https_socket.getsockname()[1]),
        cluster=args.cluster,
        topic=args.topic,
        state_dir=_state_dir(args),
        bootstrap_timeout_s=args.bootstrap_timeout,
        lookup=lookup,
        forward_writes=bool(args.forward_writes),
        holder_session_timeout_ms=int(args.holder_session_timeout_ms),
        auto_topic_creation=auto_topic_creation(args),
        entry_format=str(args.entry_format),
        geo_peers=geo_peers(args),
    )
    sidecar = Sidecar(config)
    logger.info(
        "broker-shim %s listening on %s",
        config.broker_id,
        " and ".join(
            url
            for url in (
                config.http_url,
                None if https_socket is None else f"https://{args.host}:{config.http_port_tls}",
                config.advertised_broker_url,
                None if tls_socket is None else f"pulsar+ssl://{args.host}:{tls_port}",
            )
            if url
        ),
    )
    # SIGTERM/SIGINT stop it gracefully (as web.run_app does): on_shutdown releases the
    # bundles and closes clients, requests still running get half the budget, on_cleanup
    # closes the cache (writing its snapshot); the guard ends whatever is left at the budget.
    app = build_app(sidecar, broker_socket=broker_socket, broker_tls_socket=tls_socket)
    budget = float(args.shutdown_timeout)
    ShutdownGuard(budget).install(app)
    serve(
        app,
        host=bind,
        port=config.http_port,
        sock=http_socket,
        tls=None if https_socket is None or tls is None else tls.server_context(),
        tls_sock=https_socket,
        shutdown_timeout=budget / 2,
        access_log=web_log.access_logger if args.access_log else None,
    )
    return 0


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``broker-shim``."""
    args = build_parser().parse_args(argv)
    run_main(lambda: _run(args))


if __name__ == "__main__":
    main()
