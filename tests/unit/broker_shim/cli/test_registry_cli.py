"""``broker-shim run`` flags of the registry, ownership and lookup."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from broker_shim.cli._cluster_flags import lookup_settings
from broker_shim.cli.shim import build_parser
from sync._errors import ConfigurationError
from sync.cluster import ClusterSettings, ListenerUrls

BASE = ["run", "--broker-id", "b1", "--http-port", "8080"]


def settings(*flags: str) -> ClusterSettings | None:
    return lookup_settings(build_parser().parse_args([*BASE, *flags]))


def test_defaults_join_the_cluster_with_kafka_friendly_settings() -> None:
    found = settings()
    assert found is not None
    assert found.ownership.session_timeout_ms == 6000
    assert found.ownership.slots == 64
    assert found.lookup.max_pending_lookups == 50_000
    assert found.auth is None
    assert settings("--no-lookup") is None


def test_flags_are_carried_over(tmp_path: Path) -> None:
    auth = tmp_path / "auth.json"
    auth.write_text(json.dumps({"tokens": {"t": "admin"}, "superUserRoles": ["admin"]}))
    found = settings(
        "--session-timeout-ms", "1000", "--ownership-slots", "8", "--broker-name", "broker-a",
        "--replica-id", "1", "--advertised-listener", "internal=pulsar://10.0.0.1:6650",
        "--advertised-listener", "tls=pulsar://h:1,pulsar+ssl://h:2",
        "--auth-config", str(auth), "--max-pending-lookups", "7",
    )  # fmt: skip
    assert found is not None
    assert found.ownership.session_timeout_ms == 1000 and found.ownership.slots == 8
    assert found.broker_name == "broker-a" and found.replica_id == 1
    assert dict(found.advertised_listeners) == {
        "internal": ListenerUrls("pulsar://10.0.0.1:6650", None),
        "tls": ListenerUrls("pulsar://h:1", "pulsar+ssl://h:2"),
    }
    assert found.auth is not None and found.auth.tokens == {"t": "admin"}
    assert found.lookup.max_pending_lookups == 7


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--cluster", "a/b"), "--cluster"),
        (("--session-timeout-ms", "100"), "below 500 ms"),
        (("--ownership-slots", "0"), "slots"),
        (("--advertised-listener", "nope"), "NAME=URL"),
        (("--advertised-listener", "x=http://h:1"), "pulsar://"),
        (("--broker-url-tls", "pulsar://h:1"), r"pulsar\+ssl"),
        (("--max-pending-lookups", "0"), "max-pending-lookups"),
    ],
)
def test_bad_flags_are_refused_at_the_edge(flags: tuple[str, ...], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        settings(*flags)


def test_tls_flags_are_checked_before_any_port_is_bound(tmp_path: Path) -> None:
    from broker_shim._tls import TlsSettings
    from broker_shim.cli.shim import tls_settings
    from tests.support.tls import make_tls_files

    def tls(*flags: str) -> object:
        return tls_settings(build_parser().parse_args([*BASE, *flags]))

    files = make_tls_files(tmp_path)
    assert tls() is None
    found = tls(
        "--broker-port-tls", "0", "--tls-cert-file", str(files.cert),
        "--tls-key-file", str(files.key), "--tls-trust-cert-file", str(files.ca),
        "--tls-require-trusted-client-cert",
    )  # fmt: skip
    assert found is not None
    https_only = tls(
        "--http-port-tls", "0", "--tls-cert-file", str(files.cert), "--tls-key-file",
        str(files.key),
    )  # fmt: skip
    assert isinstance(https_only, TlsSettings) and not https_only.require_client_cert
    for flags, message in (
        (("--tls-cert-file", str(files.cert)), "need --broker-port-tls or --http-port-tls"),
        (("--broker-port-tls", "0"), "--broker-port-tls needs --tls-cert-file and --tls-key-file"),
        (("--http-port-tls", "0"), "--http-port-tls needs --tls-cert-file and --tls-key-file"),
        (
            ("--http-port-tls", "0", "--broker-port-tls", "0", "--tls-key-file", str(files.key)),
            "--broker-port-tls and --http-port-tls need --tls-cert-file",
        ),
        (
            ("--http-port-tls", "0", "--tls-cert-file", str(files.key),
             "--tls-key-file", str(files.key)),
            "--tls-cert-file",
        ),
        (
            ("--broker-port-tls", "0", "--tls-cert-file", str(files.cert),
             "--tls-key-file", str(tmp_path / "nope.key")),
            "--tls-cert-file",
        ),
    ):  # fmt: skip
        with pytest.raises(ConfigurationError, match=message):
            tls(*flags)
