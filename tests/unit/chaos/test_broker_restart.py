"""The soak's bounded restart of a killed Kafka broker (no broker: ``up`` is scripted)."""

from __future__ import annotations

import socket
import threading

import pytest

from chaos import procs
from chaos.procs import KafkaCluster, port_bindable


class _ScriptedCluster(KafkaCluster):
    """``up`` answers from a script: an exception to raise, or an event to wait for."""

    def __init__(self, script: list[object]) -> None:
        super().__init__()
        self.script = script
        self.calls = 0

    def up(self, attempts: int = 3) -> str:
        self.calls += 1
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        if isinstance(step, threading.Event):
            step.wait(30)
        self.down_nodes.clear()
        return "127.0.0.1:1"


@pytest.fixture(autouse=True)
def _fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(procs, "NODE_PORTS", {1: ()})  # no real ports to wait for


def test_a_port_held_by_any_socket_is_not_bindable_even_if_nothing_listens() -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))  # bound, not listening: a connect would be refused
    port = holder.getsockname()[1]
    assert not port_bindable(port)
    holder.close()
    assert port_bindable(port)


def test_address_in_use_is_retried_with_back_off() -> None:
    cluster = _ScriptedCluster([RuntimeError("BindException: Address already in use"), "ok"])
    cluster.down_nodes.add(1)
    note = cluster.restart(at_s=5.0, budget_s=20)
    assert note.startswith("restarted in") and "2 attempts: address in use" in note
    assert cluster.calls == 2 and not cluster.down_nodes
    assert cluster.restarts[0].started_s == 5.0 and cluster.restarts[0].took_s is not None


def test_a_slow_restart_is_reported_and_does_not_hold_the_soak() -> None:
    release = threading.Event()
    cluster = _ScriptedCluster([release])
    cluster.down_nodes.add(1)
    note = cluster.restart(at_s=1.0, budget_s=0.3)
    assert "not back within 0s" in note and "soak goes on" in note
    assert cluster.restarting() and cluster.restarts[0].gave_up_waiting
    assert cluster.restart(at_s=2.0, budget_s=0.1).startswith("not back")  # same restart
    assert len(cluster.restarts) == 1
    release.set()
    assert cluster.wait_restarted(30)
    assert not cluster.down_nodes and cluster.restarts[0].took_s is not None
