"""``policy-audit``: Spark audit of the policy change log.

Usage::

    policy-audit [--bootstrap-servers B] [--topic T] --output DIR [--master local[2]]
    policy-audit archive --checkpoint DIR --output DIR [...]
    policy-audit reconcile --sidecar URL [--sidecar URL ...] [...]
    policy-audit geo --cluster NAME=BOOTSTRAP [--cluster NAME=BOOTSTRAP ...] [--output DIR]
    policy-audit reconcile --cluster NAME=BOOTSTRAP [...] --sidecar URL [...]
    policy-audit jars

The first form reads the whole log once and writes ``DIR/history`` and ``DIR/anomalies``
(Parquet) and ``DIR/report.html``, and the schema registry's history (every version of every
topic's schema, from the registry topic ``--registry-topic``) to ``DIR/schemas`` and the
report; a cluster without that topic (no cluster service) has no schema history.
``archive`` appends new records to ``DIR/archive`` (Structured Streaming, resumable through
``--checkpoint``) and reports on the whole archive, so it keeps versions compaction later
removes; run it more often than the topic's compaction lag. ``reconcile`` compares each
sidecar's cache with the log.
``geo`` reads every named cluster's ``policy-sync-global-events`` and lists, per global key,
every write (origin cluster, hybrid timestamp, event id), which one won and why (later
hybrid timestamp; on a tie, the higher cluster id), by the sidecars' own merge rule; with
``--output`` also as Parquet (``DIR/geo``). ``reconcile --cluster …`` compares each geo
sidecar's global table with the state those topics imply, and says whether the sidecars of
every cluster hold the same table.
``jars`` prints the connector jars for ``spark-submit --jars``.

On a cluster: ``--master spark://HOST:7077`` (this process is the driver), or
``spark-submit --master … --jars "$(policy-audit jars)" broker_shim/cli/audit.py …``.
Output directories must then be on storage every executor shares.

Exit codes: 0 done (reconcile: every sidecar in sync), 1 failure, a sidecar diverged
or unreachable, or error anomalies with ``--fail-on-errors``; 2 bad input; 3 topic not
found.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

from pyspark.sql import SparkSession

from broker_shim.cli._common import (
    EXIT_FAILURE,
    EXIT_OK,
    add_bootstrap_flag,
    configure_logging,
    run_main,
)
from sync import ConfigurationError, InvalidInputError, NotFoundError
from sync.audit import (
    AnomalyRules,
    AuditSummary,
    KafkaSource,
    SparkConfig,
    SparkProgress,
    check_source,
    cross_cluster_lines,
    geo_cluster,
    geo_lines,
    reconcile,
    reconcile_geo,
    resolve_spark_jars,
    run_archive,
    run_audit,
    run_geo_audit,
    spark_session,
    validate_master,
    validate_sidecar_url,
)
from sync.constants import CHANGE_EVENTS_TOPIC, REGISTRY_TOPIC

__all__ = ["build_parser", "main"]

logger = logging.getLogger("policy-audit")

_SUBCOMMANDS = ("archive", "reconcile", "geo", "jars")
_DEFAULTS = AnomalyRules()


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value


def _master(text: str) -> str:
    try:
        return validate_master(text)
    except ConfigurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _common(parser: argparse.ArgumentParser) -> None:
    add_bootstrap_flag(parser)
    parser.add_argument("--topic", default=CHANGE_EVENTS_TOPIC, help="change-events topic")
    _spark_flags(parser)


def _geo_flag(parser: argparse.ArgumentParser, *, required: bool) -> None:
    parser.add_argument(
        "--cluster",
        action="append",
        required=required,
        default=[],
        metavar="NAME=BOOTSTRAP",
        help="a geo cluster and its Kafka bootstrap servers, e.g. east=127.0.0.1:21092; "
        "repeat for every cluster (its policy-sync-global-events is read)",
    )


def _spark_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--master",
        type=_master,
        default=None,
        help="Spark master (default: spark-submit's, else local[*]), e.g. local[2], "
        "spark://HOST:7077",
    )
    parser.add_argument(
        "--conf",
        type=_key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Spark setting, repeatable (e.g. spark.driver.memory=4g)",
    )
    parser.add_argument(
        "--kafka-option",
        type=_key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Spark Kafka source option, repeatable (e.g. kafka.security.protocol=SSL)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    parser.add_argument("--log-level", default="warning")


def _report_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--output", required=True, type=Path, help="output directory")
    parser.add_argument(
        "--burst-threshold",
        type=_positive_int,
        default=_DEFAULTS.burst_threshold,
        help="a burst is MORE than this many changes to one namespace per window "
        f"(default {_DEFAULTS.burst_threshold})",
    )
    parser.add_argument(
        "--burst-window",
        type=_positive_int,
        default=_DEFAULTS.burst_window_s,
        help=f"burst window in seconds (default {_DEFAULTS.burst_window_s})",
    )
    parser.add_argument(
        "--out-of-order-tolerance-ms",
        type=int,
        default=_DEFAULTS.out_of_order_tolerance_ms,
        help="event-time regressions up to this are not anomalies (default "
        f"{_DEFAULTS.out_of_order_tolerance_ms})",
    )
    parser.add_argument(
        "--fail-on-errors",
        action="store_true",
        help="exit 1 when any anomaly of severity error is found",
    )
    parser.add_argument(
        "--registry-topic",
        default=REGISTRY_TOPIC,
        help="the cluster's registry topic, whose schema histories the report lists "
        f"(default {REGISTRY_TOPIC}; skipped if it does not exist)",
    )
    parser.add_argument(
        "--no-schemas", action="store_true", help="leave the schema registry's history out"
    )


def build_parser(command: str = "audit") -> argparse.ArgumentParser:
    """The parser of one command ("audit" is the default, batch form)."""
    epilog = (
        "Subcommands: policy-audit archive|reconcile|geo|jars --help. Exit codes: 0 done, 1 "
        "failure or divergence, 2 bad input, 3 topic not found."
    )
    if command == "audit":
        parser = argparse.ArgumentParser(
            prog="policy-audit",
            description="Audit the policy change log with Spark: history with field-level "
            "diffs, anomalies and an HTML report.",
            epilog=epilog,
        )
        _common(parser)
        _report_flags(parser)
    elif command == "archive":
        parser = argparse.ArgumentParser(
            prog="policy-audit archive",
            description="Append new change-log records to DIR/archive (Structured Streaming, "
            "availableNow) and report on the whole archive.",
            epilog=epilog,
        )
        _common(parser)
        parser.add_argument(
            "--checkpoint", required=True, type=Path, help="streaming checkpoint directory"
        )
        _report_flags(parser)
    elif command == "reconcile":
        parser = argparse.ArgumentParser(
            prog="policy-audit reconcile",
            description="Compare every sidecar's cache with the state the log implies.",
            epilog=epilog,
        )
        _common(parser)
        parser.add_argument(
            "--sidecar",
            action="append",
            required=True,
            metavar="URL",
            help="sidecar base URL, e.g. http://127.0.0.1:8080 (repeatable)",
        )
        parser.add_argument(
            "--max-keys", type=_positive_int, default=20, help="divergent keys listed per sidecar"
        )
        parser.add_argument(
            "--timeout", type=float, default=30.0, help="HTTP timeout per sidecar request (s)"
        )
        _geo_flag(parser, required=False)
        parser.add_argument(
            "--settle",
            type=float,
            default=10.0,
            help="with --cluster: seconds a diverging sidecar is read again while writes "
            "cross between clusters (default 10)",
        )
    elif command == "geo":
        parser = argparse.ArgumentParser(
            prog="policy-audit geo",
            description="Audit global policies across geo clusters: every write of every "
            "global key, which one won and why.",
            epilog=epilog,
        )
        _spark_flags(parser)
        _geo_flag(parser, required=True)
        parser.add_argument(
            "--output", type=Path, default=None, help="also write DIR/geo (Parquet)"
        )
        parser.add_argument(
            "--max-keys", type=_positive_int, default=50, help="global keys printed (default 50)"
        )
    elif command == "jars":
        parser = argparse.ArgumentParser(
            prog="policy-audit jars",
            description="Print the Spark connector jars (comma-separated) for spark-submit "
            "--jars, fetching them with Maven on first use.",
        )
        parser.add_argument("--log-level", default="warning")
    else:
        raise ValueError(f"unknown command {command!r}")
    return parser


def _source(args: argparse.Namespace) -> KafkaSource:
    return KafkaSource(args.bootstrap_servers, args.topic, dict(args.kafka_option))


def _registry(args: argparse.Namespace) -> KafkaSource | None:
    """The registry topic to read schema histories from (None: not asked, or not there)."""
    if args.no_schemas:
        return None
    registry = KafkaSource(args.bootstrap_servers, args.registry_topic, dict(args.kafka_option))
    try:
        check_source(registry)
    except NotFoundError:
        logger.warning(
            "no registry topic %s (a policy-sync without its cluster service): the report "
            "has no schema history",
            registry.describe(),
        )
        return None
    return registry


def _rules(args: argparse.Namespace) -> AnomalyRules:
    return AnomalyRules(args.burst_threshold, args.burst_window, args.out_of_order_tolerance_ms)


def _with_spark(args: argparse.Namespace, body: Callable[[SparkSession], int]) -> int:
    config = SparkConfig(master=args.master, conf=dict(args.conf))
    spark = spark_session(config)
    try:
        return body(spark)
    finally:
        spark.stop()


def _print_summary(summary: AuditSummary) -> None:
    print("\n".join(summary.lines()), flush=True)


def _run(command: str, args: argparse.Namespace) -> int:
    if command == "jars":
        print(",".join(str(p) for p in resolve_spark_jars()))
        return EXIT_OK
    if command == "geo" or (command == "reconcile" and args.cluster):
        return _run_geo(command, args)
    try:
        # Everything the user typed is validated here, before Spark starts.
        source = _source(args)
        rules = _rules(args) if command != "reconcile" else None
        sidecars = [validate_sidecar_url(u) for u in args.sidecar] if command == "reconcile" else []
    except ConfigurationError as exc:
        raise InvalidInputError(str(exc)) from exc
    check_source(source)  # a missing topic fails in a second, not after Spark started
    registry = _registry(args) if command in ("audit", "archive") else None

    def progress(spark: SparkSession) -> SparkProgress:
        return SparkProgress(spark, enabled=not args.no_progress, stream=sys.stderr)

    if command == "audit":

        def audit(spark: SparkSession) -> int:
            summary = run_audit(
                spark,
                source,
                args.output,
                rules=rules,
                progress=progress(spark),
                registry=registry,
            )
            _print_summary(summary)
            return EXIT_FAILURE if args.fail_on_errors and summary.errors else EXIT_OK

        return _with_spark(args, audit)
    if command == "archive":

        def archive(spark: SparkSession) -> int:
            summary = run_archive(
                spark,
                source,
                args.checkpoint,
                args.output,
                rules=rules,
                progress=progress(spark),
                registry=registry,
            )
            _print_summary(summary)
            return EXIT_FAILURE if args.fail_on_errors and summary.errors else EXIT_OK

        return _with_spark(args, archive)

    def check(spark: SparkSession) -> int:
        results = reconcile(
            spark, source, sidecars, max_examples=args.max_keys, timeout_s=args.timeout
        )
        for result in results:
            print("\n".join(result.lines()))
        diverged = sum(1 for r in results if r.diverged)
        print(
            f"{len(results) - diverged} of {len(results)} sidecars in sync with {source.describe()}"
        )
        return EXIT_FAILURE if diverged else EXIT_OK

    return _with_spark(args, check)


def _run_geo(command: str, args: argparse.Namespace) -> int:
    """``geo``, and ``reconcile --cluster``: the global topics of every named cluster."""
    try:
        clusters = [geo_cluster(c, dict(args.kafka_option)) for c in args.cluster]
        names = [c.name for c in clusters]
        if len(set(names)) != len(names):
            raise InvalidInputError(f"--cluster names repeat: {', '.join(names)}")
        sidecars = [validate_sidecar_url(u) for u in args.sidecar] if command == "reconcile" else []
    except ConfigurationError as exc:
        raise InvalidInputError(str(exc)) from exc
    for cluster in clusters:
        check_source(cluster.source)  # a missing topic fails before Spark starts

    if command == "geo":

        def audit(spark: SparkSession) -> int:
            writes = run_geo_audit(spark, clusters, output=args.output)
            print("\n".join(geo_lines(writes, names, args.max_keys)), flush=True)
            return EXIT_OK

        return _with_spark(args, audit)

    def check(spark: SparkSession) -> int:
        results = reconcile_geo(
            spark,
            clusters,
            sidecars,
            max_examples=args.max_keys,
            timeout_s=args.timeout,
            settle_s=args.settle,
        )
        for result in results:
            print("\n".join(result.lines()))
        print("\n".join(cross_cluster_lines(results)))
        diverged = sum(1 for r in results if r.diverged)
        print(
            f"{len(results) - diverged} of {len(results)} sidecars in sync with the global "
            f"topics of {', '.join(names)}"
        )
        return EXIT_FAILURE if diverged else EXIT_OK

    return _with_spark(args, check)


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Entry point of ``policy-audit``."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    command = "audit"
    if args_list and args_list[0] in _SUBCOMMANDS:
        command = args_list.pop(0)
    args = build_parser(command).parse_args(args_list)
    configure_logging(args.log_level)
    run_main(lambda: _run(command, args))


if __name__ == "__main__":  # spark-submit runs this file as a script
    main()
