"""MirrorMaker 2's configuration: the rendered file is the reviewed one (golden file), and
settings MM2 would misread are refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sync.constants import GLOBAL_EVENTS_TOPIC
from sync.geo import Mm2Cluster, Mm2Settings, render_mm2_properties

GOLDEN = Path(__file__).with_name("mm2.golden.properties")


def _settings(**overrides: object) -> Mm2Settings:
    clusters = (Mm2Cluster("east", "127.0.0.1:21092"), Mm2Cluster("west", "127.0.0.1:23092"))
    return Mm2Settings(clusters=clusters, topic=GLOBAL_EVENTS_TOPIC, **overrides)  # type: ignore[arg-type]


def test_rendered_file_equals_the_golden_file() -> None:
    rendered = render_mm2_properties(_settings())
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.write_text(rendered)
    assert rendered == GOLDEN.read_text()


def test_every_line_is_a_comment_or_one_key_without_an_inline_comment() -> None:
    # .properties has no inline comments: "a = b  # c" would make the value "b  # c".
    for line in render_mm2_properties(_settings()).splitlines():
        if line.startswith("#"):
            continue
        key, sep, value = line.partition(" = ")
        assert sep and key and value and "#" not in value, line


def test_every_cluster_reads_committed_records_only() -> None:
    text = render_mm2_properties(_settings())
    assert "east.consumer.isolation.level = read_committed" in text.splitlines()
    assert "west.consumer.isolation.level = read_committed" in text.splitlines()


def test_both_directions_between_three_clusters() -> None:
    clusters = tuple(Mm2Cluster(n, f"h:{i}") for i, n in enumerate(("a", "b", "c")))
    lines = render_mm2_properties(Mm2Settings(clusters, GLOBAL_EVENTS_TOPIC)).splitlines()
    enabled = {line.split(".", 1)[0] for line in lines if line.endswith(".enabled = true")}
    assert enabled == {"a->b", "a->c", "b->a", "b->c", "c->a", "c->b"}


@pytest.mark.parametrize(
    ("clusters", "topic"),
    [
        ((("east", "b:1"),), GLOBAL_EVENTS_TOPIC),  # one cluster
        ((("east", "b:1"), ("east", "b:2")), GLOBAL_EVENTS_TOPIC),  # twice the same
        ((("east", "b:1"), ("west", "b:2")), "__change_events"),  # MM2 never mirrors __*
        ((("east", "b:1"), ("west", "b:2")), "policy.sync"),  # "." reads as a prefix
    ],
)
def test_refused_settings(clusters: tuple[tuple[str, str], ...], topic: str) -> None:
    with pytest.raises(ValueError):
        Mm2Settings(tuple(Mm2Cluster(n, b) for n, b in clusters), topic)


@pytest.mark.parametrize("name", ["us.east", "", "east west"])
def test_refused_cluster_alias(name: str) -> None:
    with pytest.raises(ValueError):
        Mm2Cluster(name, "127.0.0.1:1")


def test_extra_settings_come_last_and_must_be_one_line_each() -> None:
    clusters = (Mm2Cluster("east", "127.0.0.1:1"), Mm2Cluster("west", "127.0.0.1:2"))
    extra = (
        ("east.consumer.fetch.max.wait.ms", "10"),
        ("east->west.consumer.poll.timeout.ms", "5"),
    )
    text = render_mm2_properties(Mm2Settings(clusters, "policy-sync-global-events", extra=extra))
    assert text.splitlines()[-2:] == [
        "east.consumer.fetch.max.wait.ms = 10",
        "east->west.consumer.poll.timeout.ms = 5",
    ]
    for bad in ((" ", "1"), ("a=b", "1"), ("k", "1\nevil = 2")):
        with pytest.raises(ValueError, match="not one properties line"):
            Mm2Settings(clusters, "policy-sync-global-events", extra=(bad,))
