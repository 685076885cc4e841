"""policyctl as a user runs it: contract of commands, output and exit codes."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from sync.transport import KafkaConfig, KafkaTransport
from tests.support.sidecars import run_cli


class Ctl:
    """policyctl bound to one broker and one change-events topic."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic

    def __call__(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return run_cli(
            "policyctl", "--topic", self.topic, *args, bootstrap=self.bootstrap, stdin=stdin
        )


@pytest.fixture
def ctl(kafka_bootstrap: str, unique_name: Callable[[str], str]) -> Ctl:
    return Ctl(kafka_bootstrap, unique_name("ce"))


@pytest.fixture(scope="module")
def seeded(kafka_bootstrap: str) -> Ctl:
    """A topic holding one write, for the commands that must write nothing (each checks
    the log's end offsets before and after itself)."""
    seeded = Ctl(kafka_bootstrap, f"ce-{uuid.uuid4().hex[:10]}")
    r = seeded("set", "seed", "--json", '{"maxConsumerPerTopic": 1}')
    assert r.returncode == 0, r.stderr
    return seeded


def _end_offsets(bootstrap: str, topic: str) -> int:
    transport = KafkaTransport(KafkaConfig(bootstrap))
    desc = transport.admin().describe_topic(topic)
    if desc is None:
        return 0
    consumer = transport.consumer()
    try:
        return sum(consumer.end_offsets(topic, list(range(desc.partitions))).values())
    finally:
        consumer.close()


def test_set_get_applied_global_delete(ctl: Ctl) -> None:
    r = ctl("set", "persistent://acme/ops/orders", "--json", '{"maxConsumerPerTopic": 5}')
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"maxConsumerPerTopic": 5}
    r = ctl("set", "acme/ops/orders", "--json", '{"messageTTLInSeconds": 60}')
    assert json.loads(r.stdout) == {"maxConsumerPerTopic": 5, "messageTTLInSeconds": 60}
    ctl("set", "acme/ops", "--json", '{"maxProducerPerTopic": 3, "maxConsumerPerTopic": 1}')
    ctl("set", "acme/ops/orders", "--global", "--json", '{"maxSubscriptionsPerTopic": 7}')
    r = ctl("set", "acme/ops/orders", "--json", '{"messageTTLInSeconds": null}')
    assert json.loads(r.stdout) == {"maxConsumerPerTopic": 5}
    r = ctl("get", "acme/ops/orders-partition-3", "--applied")
    assert json.loads(r.stdout) == {
        "maxConsumerPerTopic": 5,
        "maxProducerPerTopic": 3,
        "maxSubscriptionsPerTopic": 7,
    }
    r = ctl("get", "acme/ops/orders", "--global")
    assert json.loads(r.stdout) == {"maxSubscriptionsPerTopic": 7}
    r = ctl("list", "acme/ops")
    assert set(json.loads(r.stdout)) == {
        "persistent://acme/ops/orders",
        "__G__persistent://acme/ops/orders",
        "__NS__acme/ops",
    }
    assert ctl("delete", "acme/ops/orders").returncode == 0
    r = ctl("get", "acme/ops/orders")
    assert r.returncode == 3 and "no policies are set" in r.stderr
    assert ctl("delete", "acme/ops/orders").returncode == 3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["set", "orders", "--json", '{"maxConsumerPerTopic": -1}'], "must be between 0"),
        (["set", "orders", "--json", '{"nope": 1}'], "unknown policy field 'nope'"),
        (["set", "orders", "--json", '{"maxConsumerPerTopic": "x"}'], "expected an integer"),
        (["set", "orders", "--json", '{"maxConsumerPerTopic": 1'], "malformed JSON"),
        (["set", "a/b/c/d", "--json", "{}"], "Invalid short topic name"),
        (["set", "bogus://t/n/x", "--json", "{}"], "Invalid topic domain"),
        (["set", "t/ns", "--global", "--json", "{}"], "--global applies to topics"),
        (["list", "nons"], "namespace"),
        (["set", "orders"], "--json"),
    ],
)
def test_refused_input_exits_2_and_writes_nothing(
    seeded: Ctl, kafka_bootstrap: str, args: list[str], message: str
) -> None:
    before = _end_offsets(kafka_bootstrap, seeded.topic)
    r = seeded(*args)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr
    assert _end_offsets(kafka_bootstrap, seeded.topic) == before


def test_import_and_export_round_trip(ctl: Ctl, tmp_path: Path) -> None:
    lines = [
        json.dumps(
            {"target": f"persistent://acme/ops/t{i}", "policies": {"maxConsumerPerTopic": i}}
        )
        for i in range(300)
    ]
    lines.append(json.dumps({"target": "acme/ops", "policies": {"messageTTLInSeconds": 9}}))
    lines.append(
        json.dumps(
            {
                "target": "persistent://acme/ops/t1",
                "global": True,
                "policies": {"maxProducerPerTopic": 2},
            }
        )
    )
    src = tmp_path / "in.ndjson"
    src.write_text("\n".join(lines) + "\n")
    r = ctl("import", str(src))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"read": 302, "changed": 302}
    r = ctl("export")
    exported = [json.loads(line) for line in r.stdout.splitlines()]
    assert sorted(map(json.dumps, exported)) == sorted(
        json.dumps(json.loads(line), sort_keys=True) for line in lines
    )
    again = ctl("import", "-", stdin=r.stdout)
    assert json.loads(again.stdout) == {"read": 302, "changed": 0}


def test_bad_import_line_refuses_the_whole_file(
    ctl: Ctl, kafka_bootstrap: str, tmp_path: Path
) -> None:
    ctl("set", "seed", "--json", '{"maxConsumerPerTopic": 1}')
    before = _end_offsets(kafka_bootstrap, ctl.topic)
    src = tmp_path / "bad.ndjson"
    src.write_text(
        '{"target": "a/b/c", "policies": {"maxConsumerPerTopic": 1}}\n'
        '{"target": "a/b/d", "policies": {"maxConsumerPerTopic": -4}}\n'
    )
    r = ctl("import", str(src))
    assert r.returncode == 2 and f"{src}:2:" in r.stderr
    assert _end_offsets(kafka_bootstrap, ctl.topic) == before
    assert ctl("import", str(tmp_path / "missing")).returncode == 2


def test_unreachable_broker_is_exit_1(unique_name: Callable[[str], str]) -> None:
    r = run_cli("policyctl", "--timeout", "3", "get", "orders", bootstrap="127.0.0.1:1", timeout=60)
    assert r.returncode == 1 and "error" in r.stderr
