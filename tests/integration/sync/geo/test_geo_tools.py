"""The geo tools on the real thing: two Kafka clusters joined by MirrorMaker 2, two sidecars each
(the package's ``geo`` fixture, shared with the other modules of this package). The same global
key written on both sides at once ends with one winner on all four sidecars, and the audit
across clusters names that winner and why; reconciliation finds every sidecar in sync (and
reports the one that cannot be read); the ``make geo-demo`` tour and the geo benchmark's
measurement run their steps here."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from typing import Any

from pyspark.sql import SparkSession

from bench.geo import _measure
from examples.geo_demo import tour
from sync.audit import cross_cluster_lines, geo_cluster, reconcile_geo, run_geo_audit
from sync.geo import LATER_HLC, TIE_CLUSTER
from tests.support.http import request_json
from tests.support.waits import wait_for


def _topic_in_both(geo: dict[str, Any], prefix: str) -> str:
    path = f"/admin/v2/persistent/geo/ns/{prefix}-{uuid.uuid4().hex[:8]}"
    for cluster in ("east", "west"):
        assert request_json("PUT", geo[cluster]["sidecars"][0] + path)[0] == 204
    return path


def test_concurrent_writes_one_winner_audited_and_reconciled(
    geo: dict[str, Any], spark: SparkSession
) -> None:
    path = _topic_in_both(geo, "audit")
    every = [u for n in ("east", "west") for u in geo[n]["sidecars"]]
    writes = [(geo["east"]["sidecars"][0], 111), (geo["west"]["sidecars"][1], 222)]
    answers: list[int] = []
    threads = [
        threading.Thread(
            target=lambda u=u, v=v: answers.append(
                request_json("POST", f"{u}{path}/messageTTL?isGlobal=true", v)[0]
            )
        )
        for u, v in writes
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert answers == [204, 204]

    def one_value() -> bool:
        seen = {
            json.dumps(request_json("GET", f"{u}{path}/messageTTL?isGlobal=true")[1]) for u in every
        }
        return len(seen) == 1 and seen <= {"111", "222"}

    wait_for(one_value, "all four sidecars show one of the two writes", timeout_s=90)
    shown = request_json("GET", f"{every[0]}{path}/messageTTL?isGlobal=true")[1]

    clusters = [geo_cluster(f"{n}={geo[n]['bootstrap']}") for n in ("east", "west")]
    key = "__G__persistent://geo/ns/" + path.rsplit("/", 1)[1]
    mine = [w for w in run_geo_audit(spark, clusters) if w.key == key]
    assert sorted((w.origin, w.outcome) for w in mine) in (
        [("east", "lost"), ("west", "won")],
        [("east", "won"), ("west", "lost")],
    )
    (winner,) = [w for w in mine if w.outcome == "won"]
    assert winner.origin == ("east" if shown == 111 else "west")  # what every sidecar shows
    assert {w.reason for w in mine} <= {LATER_HLC, TIE_CLUSTER}

    results = reconcile_geo(spark, clusters, [*every, "http://127.0.0.1:1"], settle_s=60)
    assert [r.diverged for r in results] == [False, False, False, False, True]
    assert results[4].error is not None
    assert {r.cluster for r in results[:4]} == {"east", "west"}
    assert cross_cluster_lines(results) == ["4 sidecars of east, west hold the same global table"]


def test_the_geo_demo_tour(geo: dict[str, Any]) -> None:
    lines: list[str] = []
    seen = tour(geo, out=lines.append)
    assert seen["crossed"] == [5, 5]
    assert len(seen["winners"]) == 1  # one stamp on all four sidecars
    assert seen["local_in_west"] == [None, None]
    assert seen["refusal"] == (403, "Invalid cluster id: nowhere")
    assert seen["replication_after"] is None  # nothing written
    assert any("winner:" in line for line in lines)


def test_the_geo_benchmark_measures_local_and_remote_visibility(geo: dict[str, Any]) -> None:
    path = _topic_in_both(geo, "bench") + "/maxConsumers?isGlobal=true"
    measured = asyncio.run(_measure(geo, path, writes=3, rate=20.0, poll_s=0.002))
    assert measured["errors"] == []
    assert len(measured["local"]) == len(measured["geo"]) == 3
    for url in [*geo["east"]["sidecars"], *geo["west"]["sidecars"]]:
        assert request_json("GET", url + path)[1] == 3  # the last write, everywhere
