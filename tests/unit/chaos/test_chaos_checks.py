"""The chaos soak's verdicts on recorded histories (no broker): each check can fail."""

from __future__ import annotations

import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from chaos import (
    HEADER,
    KINDS,
    ChaosConfig,
    Failover,
    Fault,
    HealthPoller,
    MessagingStats,
    OwnershipObserver,
    PoisonFuzz,
    Soak,
    World,
    Writer,
    kafka_outages,
    lost_writes,
    overlaps,
    percentile,
)
from chaos.procs import KafkaCluster, Restart, SidecarProc


def world() -> World:
    return World(ChaosConfig(seed=7), Path("/nonexistent"), KafkaCluster())


def test_a_final_value_older_than_the_last_acknowledged_write_is_lost() -> None:
    writer = Writer(world(), 0)
    writer.stats.record(1, "maxConsumerPerTopic", 1, True)
    writer.stats.record(1, "maxConsumerPerTopic", 2, True)
    writer.stats.record(2, "maxConsumerPerTopic", 3, True)
    writer.stats.record(2, "maxConsumerPerTopic", 4, False, "HTTP 503")  # may have landed
    final: dict[int, dict[str, object]] = {
        1: {"maxConsumerPerTopic": 2},
        2: {"maxConsumerPerTopic": 4},
    }
    assert lost_writes([writer], final) == []
    lost = lost_writes([writer], {1: {"maxConsumerPerTopic": 1}, 2: {}})
    assert len(lost) == 2 and "last acked 2" in lost[0] and "final None" in lost[1]


def test_messages_lost_and_duplicated_without_a_redelivery_count() -> None:
    m = MessagingStats()
    m.acked = {"0:1", "0:2", "0:3"}
    m.deliveries = {"0:1": [0], "0:2": [0, 1], "0:4": [0, 0]}
    assert m.lost() == ["0:3"]
    assert m.duplicates_without_count() == ["0:4"]
    assert m.redelivered() == 2


def _view(broker: str, inc: str = "a", state: str = "Owned") -> dict[str, Any]:
    return {"b1": {"state": state, "broker": broker, "incarnation": inc}}


def test_two_healthy_sidecars_naming_different_owners_is_a_double_owner() -> None:
    obs = OwnershipObserver(world())
    obs._round({"1": _view("1"), "2": _view("2")}, healthy={"1", "2"}, live={"1", "2"})
    assert obs.stats.double_owner_rounds == 1
    obs._round({"1": _view("1"), "2": _view("2")}, healthy={"1"}, live={"1", "2"})
    obs._round({"1": _view("1"), "2": _view("1", state="Releasing")}, {"1", "2"}, {"1", "2"})
    assert obs.stats.double_owner_rounds == 1 and obs.stats.rounds == 3


def _at(broker: str, version: int) -> dict[str, Any]:
    return {"b1": {"state": "Owned", "broker": broker, "incarnation": "a", "versionId": version}}


def test_a_bystander_behind_a_move_is_view_lag_a_stale_self_owner_is_a_double_owner() -> None:
    obs = OwnershipObserver(world())
    both = {"1", "2", "3"}
    # The soak's round beside two CPU hogs: the bundle moved from 3 to 1 (version 5 → 6);
    # sidecar 3 already names 1, bystander 2 still names 3. Nobody serves it twice.
    obs._round({"2": _at("3", 5), "3": _at("1", 6)}, healthy=both, live=both)
    assert (obs.stats.double_owner_rounds, obs.stats.view_lag_rounds) == (0, 1)
    # Sidecar 3 itself still names 3 from the older record: it would serve it beside 1.
    obs._round({"1": _at("1", 6), "3": _at("3", 5)}, healthy=both, live=both)
    # Two owners named at one version: the log itself would disagree.
    obs._round({"2": _at("1", 6), "3": _at("3", 6)}, healthy=both, live=both)
    assert (obs.stats.double_owner_rounds, obs.stats.view_lag_rounds) == (2, 1)


def test_a_failover_ends_when_every_survivor_names_one_live_owner() -> None:
    f = Failover("1", {"b1": "dead"}, 0.0, "kill9")
    settle = OwnershipObserver._settled
    assert not settle(f, {"2": _view("1", "dead"), "3": _view("2")}, live={"2", "3"})
    assert not settle(f, {"2": _view("2"), "3": _view("3")}, live={"2", "3"})
    assert not settle(f, {"2": _view("1", "dead"), "3": _view("1", "dead")}, live={"1", "2"})
    assert settle(f, {"2": _view("2"), "3": _view("2")}, live={"2", "3"})
    # the victim restarted with the same broker id: its new incarnation is a live owner
    assert settle(f, {"1": _view("1", "new"), "2": _view("1", "new")}, live={"1", "2"})


def test_percentile_is_nearest_rank() -> None:
    assert percentile([1.0, 2.0, 3.0], 0.5) == 2.0
    assert percentile([5.0] * 98 + [50.0, 60.0], 0.99) == 50.0
    assert percentile([5.0] * 10 + [60.0], 0.99) == 60.0
    assert percentile([5.0] * 100, 0.99) == 5.0


def test_every_poison_kind_changes_a_real_record() -> None:
    fuzz = PoisonFuzz(world(), spread_s=1.0)
    value = b"\xc3\x01" + bytes(range(8)) + b"\x00\x00" + b"body-of-a-real-record"
    for kind in KINDS:
        for _ in range(50):
            out = fuzz.mutate(kind, value)
            assert out != value, kind
            if kind == "truncated":
                assert len(out) < len(value)
            if kind == "bad_magic":
                assert out[:2] != b"\xc3\x01"
            if kind == "unknown_fingerprint":
                assert out[:2] == b"\xc3\x01" and out[2:HEADER] != value[2:HEADER]
            if kind == "undecodable_class":
                assert out[:HEADER] == value[:HEADER]


@pytest.mark.parametrize("time_checks", [True, False])
def test_a_missed_speed_target_is_a_violation_only_when_time_checks_are_on(
    time_checks: bool, tmp_path: Path
) -> None:
    soak = Soak(ChaosConfig(seconds=1, time_checks=time_checks), tmp_path)
    soak._missed_speed("failover p99 9.00s > 2 x liveness (4.0s)")
    checked = ["failover p99 9.00s > 2 x liveness (4.0s)"]
    assert soak.violations == (checked if time_checks else [])
    assert soak.timing_misses == ([] if time_checks else checked)


def test_failovers_during_a_kafka_broker_outage_are_told_apart() -> None:
    faults = [
        Fault("kill9_broker", "kafka-3", 100.0, 130.0, "down 6s; not back within 30s"),
        Fault("kill9_broker", "kafka-1", 140.0, 140.0, "skipped: kafka-[3] still restarting"),
        Fault("kill9_broker", "kafka-2", 300.0, 330.0, "down 5s"),
    ]
    restarts = [Restart(node=3, started_s=106.0, took_s=60.0), Restart(node=2, started_s=305.0)]
    windows = kafka_outages(faults, restarts)
    assert windows == [(100.0, 166.0), (300.0, math.inf)]
    assert overlaps(150.0, 2.0, windows)  # inside the first outage
    assert overlaps(95.0, 6.0, windows)  # runs into it
    assert not overlaps(170.0, 3.0, windows)  # after the broker was back
    assert overlaps(400.0, 1.0, windows)  # the second broker never came back


def test_a_500_to_valid_input_is_a_violation_and_a_503_is_not(tmp_path: Path) -> None:
    soak = Soak(ChaosConfig(seconds=1, poison_records=0), tmp_path)
    soak.fuzz._note("GET lookup", 503, "bundle in transit", malformed=False)
    soak._check_fuzz()
    assert soak.violations == []
    assert soak.result["http_fuzz"]["five_xx_to_valid_requests"] == {"503": 1}
    soak.fuzz._note("GET lookup", 500, "Server got itself in trouble", malformed=False)
    soak._check_fuzz()
    assert len(soak.violations) == 1 and "other than 503" in soak.violations[0]
    assert "500 GET lookup" in soak.violations[0]


class _Answering(BaseHTTPRequestHandler):
    """Answers every POST with the status and Retry-After named in its path."""

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        status, retry = self.server.answers.pop(0)  # type: ignore[attr-defined]
        self.send_response(status)
        if retry:
            self.send_header("Retry-After", "1")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: object) -> None:
        pass


def test_a_writers_5xx_other_than_503_with_retry_after_is_a_violation(tmp_path: Path) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Answering)
    server.answers = [(503, True), (503, False), (500, True), (204, False)]  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        soak = Soak(ChaosConfig(seconds=1, poison_records=0), tmp_path)
        sidecar = SidecarProc("1", "unused:9092", tmp_path, 6_000)
        sidecar.url = f"http://127.0.0.1:{server.server_address[1]}"
        soak.world.sidecars = [sidecar]
        writer = soak.writers[0]
        answers = [writer._rest(1, v)[0] for v in range(4)]
    finally:
        server.shutdown()
    assert answers == [False, False, False, True]
    assert len(writer.stats.bad_5xx) == 2  # the 503 without Retry-After and the 500
    assert "503 (no Retry-After)" in writer.stats.bad_5xx[0] and " 500 " in writer.stats.bad_5xx[1]
    soak._check_writer_answers()
    assert len(soak.violations) == 1 and "2 valid policy writes" in soak.violations[0]


def test_a_websocket_connect_answered_5xx_other_than_503_is_a_violation(tmp_path: Path) -> None:
    soak = Soak(ChaosConfig(seconds=1, poison_records=0), tmp_path)
    soak.messaging.stats.acked = {"0:1"}
    soak.messaging.stats.deliveries = {"0:1": [0]}
    soak.messaging.stats.connect_status.update({101: 3, 503: 2})
    soak._check_messages()
    assert soak.violations == []
    soak.messaging.stats.connect_status[502] += 1
    soak._check_messages()
    assert len(soak.violations) == 1 and "{502: 1}" in soak.violations[0]


def test_the_election_report_names_when_holders_agreed_and_the_longest_gap(
    tmp_path: Path,
) -> None:
    poller = HealthPoller(world())
    poller.world.sidecars = [SidecarProc(i, "unused:9092", tmp_path, 6_000) for i in "12"]
    t0 = poller.started
    poller.holders = [
        (t0 + 1, "1", None), (t0 + 2, "2", None), (t0 + 3, "1", "h"), (t0 + 4, "2", "h"),
        (t0 + 5, "2", None), (t0 + 7.5, "2", "h"),
    ]  # fmt: skip
    report = poller.election()
    assert report["agreed_holder_after_start_s"] == 4.0
    assert report["longest_without_holder_s"] == {"1": 2.0, "2": 2.5}
