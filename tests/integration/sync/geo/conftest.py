"""One geo setup for the whole package: two real Kafka clusters (east, west), two sidecars
each and the real MirrorMaker 2, started once by ``docker/geo/geoctl.py up --free-ports``
(tests never use fixed ports: other runs share the machine) and stopped with ``down
--purge`` after the package's last test. The fault tests (``test_outages.py``) run after
the others and leave the setup whole."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from chaos.geo import GeoCluster


@pytest.fixture(scope="package")
def geo_cluster() -> Iterator[GeoCluster]:
    """The running geo setup (faults and heals go through it)."""
    cluster = GeoCluster()
    try:
        yield cluster.up()
    finally:
        cluster.down()


@pytest.fixture(scope="package")
def geo(geo_cluster: GeoCluster) -> dict[str, Any]:
    """``endpoints.json`` of the running setup: ``{"east": {"bootstrap", "sidecars"}, …}``."""
    return geo_cluster.raw
