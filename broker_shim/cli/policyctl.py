"""``policyctl``: read and write topic policies in ``__change_events``.

Exit codes: 0 done, 2 refused input (nothing written), 3 not found, 1 anything else.
"""

from __future__ import annotations

import argparse
import gc
import getpass
import json
import socket
import sys
from collections.abc import Iterator
from typing import Any, TextIO

from tqdm import tqdm

from sync import (
    CacheConfig,
    Codec,
    FieldCatalog,
    InvalidInputError,
    InvalidPolicyError,
    NamespaceName,
    NotFoundError,
    Policies,
    PolicyScope,
    PolicyService,
    PolicyTarget,
    ServiceConfig,
    WriterConfig,
    parse_policy_json,
)
from sync.constants import CHANGE_EVENTS_TOPIC
from sync.geo import GlobalPolicies
from sync.transport import KafkaConfig, KafkaTransport, Transport

from ._cluster_flags import geo_peers
from ._common import EXIT_OK, add_bootstrap_flag, configure_logging, run_main
from ._registry_checks import check_writes
from ._via_holder import set_via_holder

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="policyctl",
        description="Read and write Pulsar-style topic policies synchronized through Kafka.",
        epilog="Exit codes: 0 done, 2 refused input (nothing written), 3 not found, 1 other.",
    )
    add_bootstrap_flag(parser)
    parser.add_argument("--topic", default=CHANGE_EVENTS_TOPIC, help="change-events topic")
    parser.add_argument("--author", default=None, help="principal recorded in the audit metadata")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for Kafka")
    parser.add_argument("--log-level", default="warning")
    parser.add_argument(
        "--cluster", default="standalone", help="this cluster (the origin of global writes)"
    )
    parser.add_argument(
        "--geo-peers",
        default="",
        help="geo: peer clusters mirrored here; --global then reads and writes "
        "policy-sync-global-events, merged with the mirrors (as broker-shim run --geo-peers)",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("set", help="merge policy fields into a topic or namespace")
    p.add_argument("target", help="topic (any Pulsar form) or tenant/namespace")
    p.add_argument(
        "--json",
        required=True,
        dest="doc",
        help="fields, e.g. '{\"maxConsumerPerTopic\": 5}'; null removes one",
    )
    p.add_argument(
        "--global", action="store_true", dest="is_global", help="global (geo-replicated) policies"
    )

    p = sub.add_parser("get", help="print the policies of a topic or namespace as JSON")
    p.add_argument("target")
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("--global", action="store_true", dest="is_global")
    scope.add_argument("--applied", action="store_true", help="effective values after precedence")

    p = sub.add_parser("delete", help="remove every policy of a topic or namespace (tombstone)")
    p.add_argument("target")
    p.add_argument("--global", action="store_true", dest="is_global")

    p = sub.add_parser("list", help="print every policy record of a namespace")
    p.add_argument("namespace", help="tenant/namespace")

    p = sub.add_parser(
        "import",
        help="bulk-apply NDJSON lines {target, policies[, global]} (with --geo-peers, "
        "global lines are written after the others, in their own transactions)",
    )
    p.add_argument("file", help="NDJSON file, or - for standard input")

    p = sub.add_parser("export", help="write every policy record as NDJSON")
    p.add_argument("--output", default="-", help="file (default: standard output)")
    return parser


def _transport(args: argparse.Namespace) -> KafkaTransport:
    return KafkaTransport(KafkaConfig(args.bootstrap_servers, client_id="policyctl"))


def _service(args: argparse.Namespace, transport: Transport) -> PolicyService:
    author = args.author or f"{getpass.getuser()}"
    config = ServiceConfig(
        cache=CacheConfig(
            topic=args.topic, bootstrap_timeout_s=args.timeout, dead_letter=False, verify=False
        ),
        writer=WriterConfig(
            author=author, origin=f"policyctl@{socket.gethostname()}", timeout_s=args.timeout
        ),
    )
    peers = geo_peers(args)
    geo = None
    if peers:
        geo = GlobalPolicies(
            transport,
            Codec(),
            cluster=str(args.cluster),
            peers=peers,
            bootstrap_timeout_s=args.timeout,
        )
    return PolicyService(transport, config, global_policies=geo).start(timeout_s=args.timeout + 5)


def _print(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")


def _record(target: PolicyTarget, policies: Policies) -> dict[str, Any]:
    if target.topic is None:
        name = f"{target.tenant}/{target.namespace}"
    else:
        name = target.topic.canonical
    line: dict[str, Any] = {"target": name, "policies": policies.to_json_obj()}
    if target.scope is PolicyScope.GLOBAL:
        line["global"] = True
    return line


_LINE_KEYS = frozenset({"target", "policies", "global"})


def _read_ndjson(stream: TextIO, name: str) -> Iterator[tuple[int, PolicyTarget, Any]]:
    for lineno, raw in enumerate(stream, start=1):
        if not raw.strip():
            continue
        try:
            doc = parse_policy_json(raw)
            if not isinstance(doc, dict):
                raise InvalidPolicyError("each line must be a JSON object")
            unknown = () if doc.keys() <= _LINE_KEYS else sorted(set(doc) - _LINE_KEYS)
            if unknown:
                raise InvalidPolicyError(f"unknown key(s) {', '.join(sorted(unknown))}")
            if not isinstance(doc.get("target"), str):
                raise InvalidPolicyError('"target" (a topic or tenant/namespace) is required')
            is_global = doc.get("global", False)
            if not isinstance(is_global, bool):
                raise InvalidPolicyError('"global" must be true or false')
            target = PolicyTarget.parse(doc["target"], is_global=is_global)
            yield lineno, target, doc.get("policies")
        except InvalidInputError as exc:
            raise InvalidInputError(f"{name}:{lineno}: {exc}") from exc


def _load_import(path: str, catalog: FieldCatalog) -> list[tuple[PolicyTarget, dict[str, Any]]]:
    """Read and validate a whole NDJSON file; any bad line refuses the whole import."""
    try:
        stream: TextIO = sys.stdin if path == "-" else open(path, encoding="utf-8")  # noqa: SIM115
    except OSError as exc:
        raise InvalidInputError(f"cannot read {path}: {exc}") from exc
    try:
        items = []
        for lineno, target, patch in _read_ndjson(stream, path):
            try:
                items.append((target, catalog.validate_patch(patch)))
            except InvalidInputError as exc:
                raise InvalidInputError(f"{path}:{lineno}: {exc}") from exc
        return items
    finally:
        if stream is not sys.stdin:
            stream.close()


def _import(svc: PolicyService, items: list[tuple[PolicyTarget, dict[str, Any]]]) -> int:
    """Apply ``items`` in transactions of the writer's batch size. On a geo cluster the
    global lines go to their own topic by their own writer: they are written after the
    others, in their own transactions (one transaction cannot hold both)."""
    geo = svc.global_policies is not None
    in_geo = [geo and t.scope is PolicyScope.GLOBAL for t, _ in items]
    groups = [
        [item for item, g in zip(items, in_geo, strict=True) if not g],
        [item for item, g in zip(items, in_geo, strict=True) if g],
    ]
    chunk = svc.config.writer.transaction_batch
    changed = 0
    with tqdm(total=len(items), unit="policy", desc="import", file=sys.stderr, disable=None) as bar:
        for group in groups:
            for start in range(0, len(group), chunk):
                part = group[start : start + chunk]
                changed += sum(r.changed for r in svc.set_many(part, validated=True))
                bar.update(len(part))
    _print({"read": len(items), "changed": changed})
    return EXIT_OK


def _export(svc: PolicyService, output: str) -> int:
    out = sys.stdout if output == "-" else open(output, "w", encoding="utf-8")  # noqa: SIM115
    try:
        for target, policies in svc.export():
            out.write(json.dumps(_record(target, policies), sort_keys=True) + "\n")
    finally:
        if out is not sys.stdout:
            out.close()
    return EXIT_OK


def _run(args: argparse.Namespace) -> int:
    configure_logging(args.log_level)
    cmd = args.command
    catalog = FieldCatalog.from_change_event_schema(Codec().current.parsed)
    # Every input is checked before Kafka is touched: refused input writes nothing.
    target: PolicyTarget | None = None
    if cmd in ("set", "get", "delete"):
        target = PolicyTarget.parse(args.target, is_global=args.is_global)
    fields = catalog.validate_patch(parse_policy_json(args.doc)) if cmd == "set" else {}
    namespace = NamespaceName.parse(args.namespace) if cmd == "list" else None
    items: list[tuple[PolicyTarget, dict[str, Any]]] = []
    if cmd == "import":
        # An import holds every line's objects until it ends: with the default young
        # threshold (700) the collector keeps rescanning them (a quarter of the run).
        gc.set_threshold(50_000, *gc.get_threshold()[1:])
        items = _load_import(args.file, catalog)
        gc.freeze()  # what was read lives to the end: never scan it again
    if cmd == "get" and args.applied and target is not None and target.topic is None:
        raise InvalidInputError("--applied needs a topic, not a namespace")

    transport = _transport(args)
    # Checks against the registry (replication clusters, a geo global write's namespace):
    # read, never written, before the service starts writing anything.
    writes = list(items)
    if target is not None and cmd in ("set", "delete"):
        writes = [(target, fields)]
    check_writes(
        transport,
        writes,
        local=str(args.cluster),
        geo=bool(geo_peers(args)),
        timeout_s=args.timeout,
        name_each=cmd == "import",
    )
    with _service(args, transport) as svc:
        if cmd == "import":
            return _import(svc, items)
        if cmd == "export":
            return _export(svc, args.output)
        if namespace is not None:
            _print({k: p.to_json_obj() for k, p in svc.list_namespace(namespace).items()})
            return EXIT_OK
        assert target is not None  # noqa: S101 - every other command names a target
        if cmd == "set":
            geo_global = svc.global_policies is not None and target.scope is PolicyScope.GLOBAL
            if not geo_global and set_via_holder(svc, transport, target, fields, args.timeout):
                _print((svc.get(target) or Policies()).to_json_obj())
            else:
                result = svc.set(target, fields)
                _print((result.policies or Policies()).to_json_obj())
        elif cmd == "delete":
            svc.delete(target)
        elif args.applied and target.topic is not None:
            _print(svc.applied(target.topic).to_json_obj())
        else:
            found = svc.get(target)
            if found is None:
                raise NotFoundError(f"no policies are set for {target.key}")
            _print(found.to_json_obj())
    return EXIT_OK


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``policyctl``."""
    args = build_parser().parse_args(argv)
    run_main(lambda: _run(args))


if __name__ == "__main__":
    main()
