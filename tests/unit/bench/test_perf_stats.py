"""The figures ``make bench`` reads from pulsar-perf-go's output (v0.19.0, logrus text
format: the publish line's message holds an escaped newline)."""

from __future__ import annotations

from bench.perf import consume_rates, publish_stats

PRODUCE = (
    'time="04:22:19.495" level=info msg="Stats - Publish rate: 1200.0 msg/s -    0.9 Mbps - '
    '\\n\\t\\t\\t\\tLatency ms: 50%   3.1 -95%   8.0 - 99%  12.5 - 99.9%  20.0 - max  31.0"\n'
    'time="04:22:29.495" level=info msg="Stats - Publish rate: 7580.6 msg/s -    5.8 Mbps - '
    '\\n\\t\\t\\t\\tLatency ms: 50%  71.2 -95% 581.1 - 99% 1015.3 - 99.9% 1015.3 - max 1015.3"\n'
)
CONSUME = (
    'time="04:22:57.828" level=info msg="Stats - Consume rate: 2091.3 msg/s -    1.6 Mbps"\n'
    'time="04:23:07.828" level=info msg="Stats - Consume rate:    0.0 msg/s -    0.0 Mbps"\n'
)


def test_publish_and_consume_figures_are_read_per_interval() -> None:
    assert publish_stats(PRODUCE) == [(1200.0, 3.1, 12.5), (7580.6, 71.2, 1015.3)]
    assert consume_rates(CONSUME) == [2091.3, 0.0]
    assert publish_stats("") == [] and consume_rates("nothing here") == []
