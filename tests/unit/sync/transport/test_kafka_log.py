"""librdkafka's reconnect failures: one WARNING per client and window, the rest counted;
a transactional producer's lost fence: INFO."""

from __future__ import annotations

import logging

import pytest

from sync.transport._kafka_clients import RDKAFKA_LOG
from sync.transport._kafka_log import ConnectionFailureFilter

_CONNECT_FAILED = "127.0.0.1:9092/bootstrap: Connect to ipv4#127.0.0.1:9092 failed"


def _line(
    client: str,
    facility: str = "FAIL",
    level: int = logging.ERROR,
    message: str = _CONNECT_FAILED,
) -> logging.LogRecord:
    # as confluent-kafka hands it over: log(level, "%s [%s] %s", facility, name, message)
    return logging.LogRecord(
        "sync.librdkafka", level, __file__, 1, "%s [%s] %s", (facility, client, message), None
    )


def test_a_clients_failures_pass_once_a_window_as_warnings_with_the_count() -> None:
    now = [0.0]
    f = ConnectionFailureFilter(window_s=60.0, clock=lambda: now[0])
    first = _line("a#consumer-1")
    assert f.filter(first)
    assert (first.levelno, first.levelname) == (logging.WARNING, "WARNING")
    assert [f.filter(_line("a#consumer-1")) for _ in range(5)] == [False] * 5
    assert f.filter(_line("b#producer-2"))  # another client has its own window
    now[0] = 61.0
    again = _line("a#consumer-1")
    assert f.filter(again)
    assert again.getMessage().endswith("(and 5 like it in the last 60 s)")


def test_other_lines_pass_untouched() -> None:
    f = ConnectionFailureFilter()
    for _ in range(3):
        other = _line("a#consumer-1", facility="ADDPARTS")
        assert f.filter(other)
        assert other.levelno == logging.ERROR
    plain = logging.LogRecord("x", logging.ERROR, __file__, 1, "no args", None, None)
    assert f.filter(plain)


def test_the_librdkafka_logger_carries_the_filter(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="sync.librdkafka"):
        for _ in range(10):
            RDKAFKA_LOG.error(
                "%s [%s] %s", "FAIL", "unit-test#consumer-0", "Connect to ipv4#x failed"
            )
    lines = [r for r in caplog.records if "unit-test#consumer-0" in r.getMessage()]
    assert [r.levelname for r in lines] == ["WARNING"]


@pytest.mark.parametrize(
    ("facility", "level", "message"),
    [  # the three lines a table writer of one sidecar logged when another one wrote
        (
            "ADDPARTS",
            logging.ERROR,
            'TxnCoordinator/1: Failed to add partition "__policy_sync.registry" [0] to '
            "transaction: Broker: Producer attempted an operation with an old epoch",
        ),
        (
            "TXNERR",
            logging.CRITICAL,
            "Fatal transaction error: Failed to add partitions to transaction: Local: This "
            "instance has been fenced by a newer instance (_FENCED)",
        ),
        (
            "FATAL",
            logging.CRITICAL,
            "Fatal error: Local: This instance has been fenced by a newer instance: Failed to "
            "add partitions to transaction: Local: This instance has been fenced by a newer "
            "instance",
        ),
    ],
)
def test_a_lost_fence_passes_as_info(facility: str, level: int, message: str) -> None:
    f = ConnectionFailureFilter()
    line = _line("s.txn.sync.table._fenced_writer#producer-21", facility, level, message)
    assert f.filter(line)
    assert (line.levelno, line.levelname) == (logging.INFO, "INFO")
    other = _line("s#producer-3", "TXNERR", logging.CRITICAL, "Fatal error: Local: timed out")
    assert f.filter(other)
    assert other.levelno == logging.CRITICAL  # any other fatal error keeps its level
