"""``policy-audit geo`` and ``reconcile`` across clusters on a real broker and a real local
Spark: two clusters' global topics (here two plain topics of one broker, written with the
stamp headers a geo writer puts on every record: the same Spark job reads them as it reads
two clusters' ``policy-sync-global-events``). Expectations are written out by hand, and the
reconciled tables are built by the sidecars' own reader rule from the same records, read
back with a plain consumer -- independently of Spark. (On a real geo cluster with
MirrorMaker 2: ``tests/integration/sync/geo/test_geo_audit.py``.)"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from pyspark.sql import SparkSession

from sync import Codec
from sync.audit import (
    GeoCluster,
    GeoWrite,
    KafkaSource,
    cross_cluster_lines,
    global_winners,
    reconcile_geo,
    run_geo_audit,
)
from sync.constants import (
    CHANGE_EVENTS_CREATE_CONFIG,
    GLOBAL_EVENTS_TOPIC,
    HEADER_CLUSTER,
    HEADER_EVENT_ID,
    HEADER_HLC,
    SIDECAR_GLOBAL_ENTRIES_PATH,
)
from sync.geo import LATER_HLC, TIE_CLUSTER, LwwTable, Stamp, judge_global, pack_hlc
from sync.geo import policy_decoder as decoder_of
from sync.transport import KafkaConfig, KafkaTransport, TopicSpec
from tests.support.events import change_event
from tests.support.http import JsonRoutes
from tests.support.sidecars import run_cli
from tests.support.spark import spark_cli_flags


@dataclass(frozen=True)
class Write:
    origin: str  # whose topic holds it
    key: str
    ms: int
    counter: int
    stamp_cluster: str | None  # None: no stamp headers at all
    event_id: str
    policies: dict[str, int] | None  # None: a DELETE event


def _key(name: str) -> str:
    return f"__G__persistent://geo/ns/{name}"


def _value(codec: Codec, w: Write) -> bytes:
    name = w.key.rsplit("/", 1)[-1]
    fields = None if w.policies is None else {**w.policies, "isGlobal": True}
    event = change_event(
        "geo", "ns", name, fields, action="DELETE" if w.policies is None else "UPDATE"
    )
    return codec.encode(event)


def _headers(w: Write) -> list[tuple[str, str | bytes | None]]:
    if w.stamp_cluster is None:
        return []
    return [
        (HEADER_HLC, str(pack_hlc(w.ms, w.counter)).encode()),
        (HEADER_CLUSTER, w.stamp_cluster.encode()),
        (HEADER_EVENT_ID, w.event_id.encode()),
    ]


WRITES = [
    # "tie": the same hybrid timestamp on both sides: the higher cluster id wins
    Write("east", _key("tie"), 1_000, 0, "east", "e-tie", {"maxConsumerPerTopic": 1}),
    Write("west", _key("tie"), 1_000, 0, "west", "w-tie", {"maxConsumerPerTopic": 2}),
    # "later": the later hybrid timestamp wins, whichever cluster
    Write("east", _key("later"), 2_000, 0, "east", "e-later", {"maxConsumerPerTopic": 3}),
    Write("west", _key("later"), 1_999, 7, "west", "w-later", {"maxConsumerPerTopic": 4}),
    # "gone": deleted in east after west's write
    Write("west", _key("gone"), 3_000, 0, "west", "w-gone", {"maxConsumerPerTopic": 5}),
    Write("east", _key("gone"), 3_000, 1, "east", "e-gone", None),
    # "solo": nothing competes
    Write("west", _key("solo"), 4_000, 0, "west", "w-solo", {"maxConsumerPerTopic": 6}),
    # poison: a stamp of the other cluster (it would win), and no stamp at all
    Write("west", _key("tie"), 9_000, 0, "east", "forged", {"maxConsumerPerTopic": 7}),
    Write("east", _key("later"), 9_000, 0, None, "unstamped", {"maxConsumerPerTopic": 8}),
]


@pytest.fixture(scope="module")
def clusters(kafka_bootstrap: str) -> Iterator[list[GeoCluster]]:
    """Both clusters' global topics, written once for the module."""
    tag = uuid.uuid4().hex[:8]
    topics = {c: f"geo-audit-{c}-{tag}" for c in ("east", "west")}
    admin = KafkaTransport(KafkaConfig(kafka_bootstrap)).admin()
    for topic in topics.values():
        admin.ensure_topic(TopicSpec(topic, 2))
    codec = Codec()
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for w in WRITES:
        producer.produce(topics[w.origin], key=w.key.encode(), value=_value(codec, w),
                         headers=_headers(w), partition=len(w.key) % 2)  # fmt: skip
    assert producer.flush(30) == 0
    yield [GeoCluster(c, KafkaSource(kafka_bootstrap, t)) for c, t in topics.items()]


Record = tuple[str, bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def _sidecar_table(bootstrap: str, cluster: GeoCluster) -> list[Record]:
    """Every record of one cluster's topic, with a plain consumer."""
    settings = {
        "bootstrap.servers": bootstrap,
        "group.id": f"geo-audit-{uuid.uuid4()}",
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
    }
    consumer = Consumer(settings)
    topic = cluster.source.topic
    consumer.assign([TopicPartition(topic, p, 0) for p in range(2)])
    out: list[Record] = []
    try:
        while len(out) < sum(1 for w in WRITES if w.origin == cluster.name):
            msg = consumer.poll(1.0)
            if msg is None or msg.error():
                continue
            headers: list[tuple[str, bytes | None]] = []
            given: Any = msg.headers() or []
            for name, raw in given:
                headers.append((name, raw))
            out.append((cluster.name, msg.key(), msg.value(), headers))
    finally:
        consumer.close()
    return out


def _reader_state(bootstrap: str, clusters: list[GeoCluster]) -> dict[str, tuple[Stamp, bool]]:
    """What a sidecar reading both topics holds, by the readers' rule (no Spark)."""
    table: LwwTable[object] = LwwTable()
    decode = decoder_of(Codec())
    for cluster in clusters:
        for origin, key, value, headers in _sidecar_table(bootstrap, cluster):
            record = judge_global(origin, key, value, headers, decode)
            if record.refused is None and record.stamp is not None and key is not None:
                table.offer(key.decode(), record.stamp, record.value)
    return {k: (v.stamp, v.value is None) for k, v in table.items()}


def test_every_write_is_listed_with_the_winner_and_why(
    spark: SparkSession, clusters: list[GeoCluster]
) -> None:
    writes = run_geo_audit(spark, clusters)
    got = {(w.key, w.event_id): (w.origin, w.action, w.outcome, w.reason) for w in writes}
    forged = "stamped by 'east' in 'west''s topic"
    assert got == {
        (_key("tie"), "w-tie"): ("west", "UPDATE", "won", TIE_CLUSTER),
        (_key("tie"), "e-tie"): ("east", "UPDATE", "lost", TIE_CLUSTER),
        (_key("tie"), "forged"): ("west", None, "quarantined", forged),
        (_key("later"), "e-later"): ("east", "UPDATE", "won", LATER_HLC),
        (_key("later"), "w-later"): ("west", "UPDATE", "lost", LATER_HLC),
        (_key("later"), None): ("east", None, "quarantined", "no readable stamp headers"),
        (_key("gone"), "e-gone"): ("east", "DELETE", "won", LATER_HLC),
        (_key("gone"), "w-gone"): ("west", "UPDATE", "lost", LATER_HLC),
        (_key("solo"), "w-solo"): ("west", "UPDATE", "won", "only write"),
    }
    # Each key's winner comes first, and its hybrid timestamp is unpacked as written.
    firsts: dict[str | None, GeoWrite] = {}
    for w in writes:
        firsts.setdefault(w.key, w)
    assert all(w.outcome == "won" for w in firsts.values())
    assert firsts[_key("later")].hlc == pack_hlc(2_000, 0)


def test_reconcile_across_clusters_finds_a_lagging_sidecar(
    spark: SparkSession, kafka_bootstrap: str, clusters: list[GeoCluster]
) -> None:
    correct = _reader_state(kafka_bootstrap, clusters)
    assert global_winners(spark, clusters) == correct
    lagging = dict(correct)
    lagging[_key("later")] = (Stamp(pack_hlc(1_999, 7), "west", "w-later"), False)  # older
    del lagging[_key("solo")]  # missing
    tables = {"http://east-1:1": ("east", correct), "http://west-1:1": ("west", correct),
              "http://west-2:1": ("west", lagging)}  # fmt: skip

    def fetch(url: str, _timeout: float) -> tuple[str, dict[str, tuple[Stamp, bool]]]:
        cluster, entries = tables[url]
        return cluster, dict(entries)

    results = reconcile_geo(spark, clusters, list(tables), settle_s=0, fetch=fetch)
    assert [r.diverged for r in results] == [False, False, True]
    bad = results[2]
    assert (bad.matching, bad.older, bad.missing, bad.extra, bad.newer) == (2, 1, 1, 0, 0)
    assert [kind for _, kind, _, _ in bad.examples] == ["older", "missing"]
    lines = cross_cluster_lines(results)
    assert lines[0] == "3 sidecars of east, west hold 2 different tables:"


def _fake_geo_sidecar(cluster: str, entries: dict[str, dict[str, Any]]) -> JsonRoutes:
    """Serves ``/policy-sync/v1/global-entries`` with the table we choose."""
    return JsonRoutes({SIDECAR_GLOBAL_ENTRIES_PATH: {"cluster": cluster, "entries": entries}})


def test_cli_reconcile_across_clusters_exits_1_on_divergence(kafka_bootstrap: str) -> None:
    """The command line end to end: ``--cluster NAME=BOOTSTRAP`` reads that cluster's own
    ``policy-sync-global-events`` (here the session broker's, where other tests may have
    written too: only this test's key is looked at)."""
    KafkaTransport(KafkaConfig(kafka_bootstrap)).admin().ensure_topic(
        TopicSpec(GLOBAL_EVENTS_TOPIC, 4, config=dict(CHANGE_EVENTS_CREATE_CONFIG))
    )
    write = Write("east", _key(f"cli-{uuid.uuid4().hex[:8]}"), 5_000, 3, "east", "e-cli",
                  {"maxConsumerPerTopic": 9})  # fmt: skip
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(GLOBAL_EVENTS_TOPIC, key=write.key.encode(), value=_value(Codec(), write),
                     headers=_headers(write))  # fmt: skip
    assert producer.flush(30) == 0
    stale = {"hlc": pack_hlc(4_000, 0), "cluster": "east", "eventId": "e-old", "deleted": False}
    fake = _fake_geo_sidecar("east", {write.key: stale})
    try:
        done = run_cli(
            "policy-audit", "reconcile", "--cluster", f"east={kafka_bootstrap}",
            "--sidecar", fake.url, "--settle", "0", "--max-keys", "100000", *spark_cli_flags(),
            bootstrap=kafka_bootstrap, timeout=280,
        )  # fmt: skip
    finally:
        fake.close()
    assert done.returncode == 1, done.stderr
    assert f"{fake.url} (east): DIVERGED" in done.stdout, done.stdout
    mine = [line.split() for line in done.stdout.splitlines() if write.key in line]
    assert [(words[0], words[1]) for words in mine] == [("older", write.key)], done.stdout
    assert "0 of 1 sidecars in sync with the global topics of east" in done.stdout
