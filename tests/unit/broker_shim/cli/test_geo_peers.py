"""``broker-shim run --geo-peers``: MirrorMaker 2 aliases only, other clusters than its own."""

from __future__ import annotations

import argparse

import pytest

from broker_shim.cli._cluster_flags import geo_peers
from sync import ConfigurationError


def _args(cluster: str, peers: str) -> argparse.Namespace:
    return argparse.Namespace(cluster=cluster, geo_peers=peers)


def test_peers_are_parsed_and_none_means_not_geo() -> None:
    assert geo_peers(_args("east", "west, south")) == ("west", "south")
    assert geo_peers(_args("standalone", "")) == ()
    assert geo_peers(_args("us.east", "")) == ()  # a '.' only matters with MirrorMaker 2


@pytest.mark.parametrize(
    ("cluster", "peers"),
    [("east", "east"), ("east", "west,west"), ("us.east", "west"), ("east", "us.west")],
)
def test_bad_peers_are_refused(cluster: str, peers: str) -> None:
    with pytest.raises(ConfigurationError):
        geo_peers(_args(cluster, peers))
