"""``policy-audit`` refuses bad input with exit 2 before it starts Spark or talks to Kafka."""

from __future__ import annotations

import pytest

from broker_shim.cli import audit as cli


def _exit_code(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    code = exc.value.code
    assert isinstance(code, int)
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--output", "/tmp/x", "--master", "bogus"], "not a Spark master URL"),
        (["--output", "/tmp/x", "--conf", "novalue"], "expected KEY=VALUE"),
        (["--output", "/tmp/x", "--burst-threshold", "0"], "must be >= 1"),
        (["--master", "local[2]"], "--output"),
        (["archive", "--output", "/tmp/x"], "--checkpoint"),
        (["reconcile"], "--sidecar"),
        (["geo"], "--cluster"),
    ],
)
def test_bad_flags_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = _exit_code(argv, capsys)
    assert code == 2
    assert message in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--output", "/tmp/x", "--bootstrap-servers", "no-port"], "is not host:port"),
        (
            ["--output", "/tmp/x", "--kafka-option", "kafka.isolation.level=read_uncommitted"],
            "set by the audit",
        ),
        (["--output", "/tmp/x", "--out-of-order-tolerance-ms", "-5"], "must be >= 0"),
        (["reconcile", "--sidecar", "ftp://h:1"], "not an http(s)://HOST:PORT URL"),
        (["geo", "--cluster", "east"], "expected NAME=BOOTSTRAP_SERVERS"),
        (["geo", "--cluster", "east=no-port"], "is not host:port"),
        (["geo", "--cluster", "e=h:1", "--cluster", "e=h:2"], "--cluster names repeat: e, e"),
        (
            ["reconcile", "--cluster", "e=h:1", "--sidecar", "ftp://h:1"],
            "not an http(s)://HOST:PORT URL",
        ),
    ],
)
def test_bad_values_exit_2_with_the_reason(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = _exit_code(argv, capsys)
    assert code == 2
    assert message in err
    assert err.startswith("policy-audit") or "error:" in err


def test_bootstrap_default_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "kafka.example:9093")
    args = cli.build_parser("audit").parse_args(["--output", "/tmp/x"])
    assert args.bootstrap_servers == "kafka.example:9093"
    assert args.topic == "__change_events"
    assert args.master is None  # spark-submit's master, else local[*]
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS")
    args = cli.build_parser("reconcile").parse_args(
        ["--sidecar", "http://a:1", "--sidecar", "http://b:2"]
    )
    assert args.bootstrap_servers == "127.0.0.1:9092"
    assert args.sidecar == ["http://a:1", "http://b:2"]


def test_every_subcommand_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--help"], ["archive", "--help"], ["reconcile", "--help"], ["jars", "--help"]):
        with pytest.raises(SystemExit) as exc:
            cli.main(argv)
        assert exc.value.code == 0
        assert "usage: policy-audit" in capsys.readouterr().out
