"""docker/geo/geoctl.py is stdlib only, so it repeats a few of the package's constants and
pins: each copy must equal its original."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from sync._constants import CHANGE_EVENTS_CREATE_CONFIG, GLOBAL_EVENTS_TOPIC
from sync.geo import Mm2Cluster, Mm2Settings, render_mm2_properties

ROOT = Path(__file__).resolve().parents[3]


def _geoctl() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "geoctl_under_test", ROOT / "docker/geo/geoctl.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _kafka_version(pom: Path) -> str:
    match = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", pom.read_text())
    assert match is not None, pom
    return match.group(1)


def test_topic_name_and_config_equal_the_package_constants() -> None:
    geoctl = _geoctl()
    assert geoctl.GLOBAL_EVENTS_TOPIC == GLOBAL_EVENTS_TOPIC
    assert dict(CHANGE_EVENTS_CREATE_CONFIG) == geoctl.TOPIC_CONFIG


def test_mirrormaker_and_broker_pin_the_same_kafka_version() -> None:
    assert _kafka_version(ROOT / "docker/geo/pom.xml") == _kafka_version(
        ROOT / "docker/kafka/pom.xml"
    )


def test_geoctl_renders_what_the_package_renders() -> None:
    mm2 = _geoctl().load_mm2()
    clusters = (("east", "127.0.0.1:1"), ("west", "127.0.0.1:2"))
    by_path = mm2.render_mm2_properties(
        mm2.Mm2Settings(tuple(mm2.Mm2Cluster(n, b) for n, b in clusters), GLOBAL_EVENTS_TOPIC)
    )
    package = render_mm2_properties(
        Mm2Settings(tuple(Mm2Cluster(n, b) for n, b in clusters), GLOBAL_EVENTS_TOPIC)
    )
    assert by_path == package


def test_fixed_ports_are_below_the_ephemeral_range_and_distinct() -> None:
    geoctl = _geoctl()
    ports = [
        p
        for name in geoctl.CLUSTERS
        for p in (
            geoctl.DEFAULT_KAFKA_PORTS[name],
            geoctl.DEFAULT_KAFKA_PORTS[name] + 1,
            *geoctl.DEFAULT_SIDECAR_PORTS[name],
        )
    ]
    assert len(set(ports)) == len(ports)
    assert all(p < 32768 for p in ports)


def test_mm2_set_lines_are_parsed_for_up_and_mm2_start() -> None:
    parser = _geoctl().build_parser()
    args = parser.parse_args(["up", "--mm2-set", "east.consumer.fetch.max.wait.ms=10"])
    assert args.mm2_set == [("east.consumer.fetch.max.wait.ms", "10")]
    assert parser.parse_args(["mm2-start", "--mm2-set", "k = v"]).mm2_set == [("k", "v")]
    with pytest.raises(SystemExit):
        parser.parse_args(["up", "--mm2-set", "novalue"])


def test_kafka_stop_and_start_name_one_known_cluster() -> None:
    geoctl = _geoctl()
    parser = geoctl.build_parser()
    args = parser.parse_args(["kafka-stop", "--cluster", "west", "--state-dir", "/x"])
    assert (args.command, args.cluster, args.func) == ("kafka-stop", "west", geoctl.cmd_kafka)
    assert parser.parse_args(["kafka-start", "--cluster", "east"]).cluster == "east"
    with pytest.raises(SystemExit):
        parser.parse_args(["kafka-stop", "--cluster", "north"])
