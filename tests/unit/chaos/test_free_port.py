"""The test harness's port picker stays out of the ephemeral range."""

from __future__ import annotations

import socket

from chaos.procs import FREE_PORT_RANGE, free_port


def test_free_ports_are_bindable_and_below_the_ephemeral_range() -> None:
    low, high = FREE_PORT_RANGE
    assert high <= 19_092  # below the 3-broker cluster's fixed ports, and 32768
    for _ in range(20):
        port = free_port()
        assert low <= port < high
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
