"""Two clusters as geoctl runs them, on real Kafka and the real MirrorMaker 2: each cluster's
global topic reaches the other as ``<origin>.policy-sync-global-events`` with key, value,
headers and partition, committed records only, and ``__change_events`` never crosses; both
clusters are registered in each other as Pulsar registers them, and refusals write nothing."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Sequence
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from sync.constants import (
    CHANGE_EVENTS_TOPIC,
    GLOBAL_EVENTS_TOPIC,
    HEADER_CLUSTER,
    HEADER_EVENT_ID,
    HEADER_HLC,
)
from sync.geo import GlobalTable, Stamp, pack_hlc
from sync.transport import KafkaConfig, KafkaTransport
from tests.support.http import request_json
from tests.support.sidecars import run_cli
from tests.support.waits import wait_for


def _transactions(bootstrap: str, tag: str) -> None:
    """Committed ``first``, aborted ``aborted``, committed ``last``: one key, partition 1."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"geo-{tag}"})
    producer.init_transactions()
    for value, commit in (("first", True), ("aborted", False), ("last", True)):
        producer.begin_transaction()
        producer.produce(
            GLOBAL_EVENTS_TOPIC,
            key=tag.encode(),
            value=f"{value}-{tag}".encode(),
            partition=1,
            headers=[("policy-sync.cluster", tag.encode())],
        )
        producer.flush()
        if commit:
            producer.commit_transaction()
        else:
            producer.abort_transaction()


def _mirrored(bootstrap: str, topic: str, tag: str) -> list[tuple[int, bytes | None, Any]]:
    """Every record of ``tag`` in ``topic`` (uncommitted ones too: read_uncommitted), once the
    ``last`` one has arrived."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"geo-check-{tag}",
            "isolation.level": "read_uncommitted",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(4)])
    seen: list[tuple[int, bytes | None, Any]] = []

    def arrived() -> bool:
        message = consumer.poll(0.2)
        if message is not None and not message.error() and message.key() == tag.encode():
            seen.append((int(message.partition() or 0), message.value(), message.headers()))
        return any(v == f"last-{tag}".encode() for _, v, _ in seen)

    try:
        wait_for(arrived, f"{tag}'s last record in {topic} at {bootstrap}", timeout_s=60)
    finally:
        consumer.close()
    return seen


def test_committed_records_cross_both_ways_and_aborted_ones_never(geo: dict[str, Any]) -> None:
    for origin, peer in (("east", "west"), ("west", "east")):
        tag = f"{origin}-{uuid.uuid4().hex[:8]}"
        _transactions(geo[origin]["bootstrap"], tag)
        seen = _mirrored(geo[peer]["bootstrap"], f"{origin}.{GLOBAL_EVENTS_TOPIC}", tag)
        header = [("policy-sync.cluster", tag.encode())]
        assert seen == [
            (1, f"first-{tag}".encode(), header),
            (1, f"last-{tag}".encode(), header),
        ]


def test_only_the_global_topic_and_its_mirror_exist_across(geo: dict[str, Any]) -> None:
    for name, peer in (("east", "west"), ("west", "east")):
        topics = set(
            AdminClient({"bootstrap.servers": geo[name]["bootstrap"]})
            .list_topics(timeout=30)
            .topics
        )
        assert {GLOBAL_EVENTS_TOPIC, f"{peer}.{GLOBAL_EVENTS_TOPIC}"} <= topics
        assert CHANGE_EVENTS_TOPIC in topics  # the sidecars run
        # Only the mirror crosses (the sidecars' quarantine of it, ``….dlq``, is local).
        mirror = f"{peer}.{GLOBAL_EVENTS_TOPIC}"
        assert {t for t in topics if t.startswith(f"{peer}.")} <= {mirror, f"{mirror}.dlq"}
        assert len(geo[name]["sidecars"]) == 2


def test_both_clusters_are_registered_everywhere_as_pulsar_does(geo: dict[str, Any]) -> None:
    """geoctl registered both clusters, tenant geo and namespace geo/ns in each cluster
    (independent configuration stores); every sidecar of the cluster sees them."""
    for name in ("east", "west"):
        for url in geo[name]["sidecars"]:
            admin = f"{url}/admin/v2"

            def listed(admin: str = admin) -> bool:
                return request_json("GET", f"{admin}/clusters") == (200, ["east", "west"])

            wait_for(listed, f"{admin} lists east and west", timeout_s=30)
            assert request_json("GET", f"{admin}/tenants/geo")[1]["allowedClusters"] == [
                "east",
                "west",
            ]
            replication = request_json("GET", f"{admin}/namespaces/geo/ns/replication")
            assert replication == (200, ["east", "west"])


def test_refusals_write_nothing_on_real_kafka(geo: dict[str, Any]) -> None:
    admin = f"{geo['east']['sidecars'][0]}/admin/v2"
    assert request_json("PUT", f"{admin}/clusters/bad%20name", {}) == (
        412,
        {"reason": "Cluster name is not valid"},
    )
    assert request_json("POST", f"{admin}/namespaces/geo/ns/replication", ["east", "nowhere"]) == (
        403,
        {"reason": "Invalid cluster id: nowhere"},
    )
    assert request_json("DELETE", f"{admin}/clusters/west") == (
        412,
        {"reason": "Cluster not empty"},
    )
    other = f"{geo['east']['sidecars'][1]}/admin/v2"
    assert request_json("GET", f"{other}/clusters") == (200, ["east", "west"])
    assert request_json("GET", f"{other}/namespaces/geo/ns/replication") == (200, ["east", "west"])
    # A topic of geo/ns may now name both clusters, locally and globally.
    topic = f"{admin}/persistent/geo/ns/t-{uuid.uuid4().hex[:6]}"
    assert request_json("PUT", topic)[0] == 204
    assert request_json("POST", f"{topic}/replication", ["east", "west"])[0] == 204
    assert request_json("POST", f"{topic}/replication?isGlobal=true", ["east", "west"])[0] == 204
    wait_for(
        lambda: (
            request_json("GET", f"{topic.replace(admin, other)}/replication")
            == (200, ["east", "west"])
        ),
        "the other east sidecar sees the topic's replication clusters",
        timeout_s=30,
    )


def _stamped(
    bootstrap: str, records: Sequence[tuple[str, str | None, Stamp]], *, commit: bool
) -> None:
    """``records`` in one transaction of the cluster's global topic, stamped in headers."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"geo-{uuid.uuid4()}"})
    producer.init_transactions()
    producer.begin_transaction()
    for key, value, stamp in records:
        producer.produce(
            GLOBAL_EVENTS_TOPIC,
            key=key.encode(),
            value=None if value is None else value.encode(),
            headers=[
                (HEADER_HLC, str(stamp.hlc).encode()),
                (HEADER_CLUSTER, stamp.cluster.encode()),
                (HEADER_EVENT_ID, stamp.event_id.encode()),
            ],
        )
    producer.flush()
    if commit:
        producer.commit_transaction()
    else:
        producer.abort_transaction()


def test_both_clusters_merge_global_records_to_one_state(geo: dict[str, Any]) -> None:
    """Each cluster's merged global table (own topic + the MM2 mirror, last writer wins)
    ends equal in both clusters: same key written on both sides, ties, deletes, an aborted
    transaction (never wins) and a forged stamp (quarantined)."""
    tag = uuid.uuid4().hex[:6]
    now = pack_hlc(1_800_000_000_000, 0)
    east = [
        (f"{tag}-shared", "east-1", Stamp(now, "east", "a1")),
        (f"{tag}-tie", "east-tie", Stamp(now + 5, "east", "a2")),
        (f"{tag}-east-only", "e", Stamp(now + 1, "east", "a3")),
        (f"{tag}-deleted", "will-go", Stamp(now, "east", "a4")),
    ]
    west = [
        (f"{tag}-shared", "west-later", Stamp(now + 2, "west", "b1")),
        (f"{tag}-tie", "west-tie", Stamp(now + 5, "west", "b2")),  # tie: "west" > "east"
        (f"{tag}-deleted", None, Stamp(now + 3, "west", "b3")),
        (f"{tag}-forged", "x", Stamp(now + 9, "east", "b4")),  # stamped by the wrong cluster
    ]
    _stamped(geo["east"]["bootstrap"], east, commit=True)
    _stamped(geo["west"]["bootstrap"], west, commit=True)
    _stamped(
        geo["east"]["bootstrap"],
        [(f"{tag}-shared", "aborted", Stamp(now + 99, "east", "z"))],
        commit=False,
    )
    expected = {
        f"{tag}-shared": "west-later",
        f"{tag}-tie": "west-tie",
        f"{tag}-east-only": "e",
        f"{tag}-deleted": None,
        f"{tag}-forged": None,
    }

    def decode(_key: bytes, raw: bytes | None) -> str | None:
        return None if raw is None else raw.decode()

    tables = [
        GlobalTable(KafkaTransport(KafkaConfig(geo[n]["bootstrap"])), n, [p], decode).start()
        for n, p in (("east", "west"), ("west", "east"))
    ]
    try:
        for table in tables:
            table.wait_ready(60)

        def converged() -> bool:
            seen = [{k: t.get(k) for k in expected} for t in tables]
            mine = [{k: v for k, v in t.table.items() if k.startswith(tag)} for t in tables]
            return all(s == expected for s in seen) and mine[0] == mine[1]

        wait_for(converged, "east's and west's merged tables equal the last writers", 60)
        assert all(t.poison >= 1 for t in tables)  # the forged record, in both clusters
    finally:
        for table in tables:
            table.close()


def _policy(url: str) -> Any:
    status, body = request_json("GET", url)
    assert status == 200, (url, status, body)
    return body


def _await_everywhere(urls: list[str], url_path: str, expected: Any, what: str) -> None:
    for url in urls:

        def shows(url: str = url) -> bool:
            return bool(_policy(f"{url}{url_path}") == expected)

        wait_for(shows, f"{what} at {url}", timeout_s=60)


def _topic_in_both(geo: dict[str, Any]) -> str:
    """A fresh topic of geo/ns created in both clusters (as Pulsar's namespace replication
    creates it in each); returns its admin path."""
    path = f"/admin/v2/persistent/geo/ns/g-{uuid.uuid4().hex[:8]}"
    for name in ("east", "west"):
        assert request_json("PUT", geo[name]["sidecars"][0] + path)[0] == 204
    return path


def test_a_global_write_reaches_every_sidecar_of_the_other_cluster_and_a_local_one_stays(
    geo: dict[str, Any],
) -> None:
    path = _topic_in_both(geo)
    every = [u for n in ("east", "west") for u in geo[n]["sidecars"]]
    east0, west0 = geo["east"]["sidecars"][0], geo["west"]["sidecars"][0]
    # A local write in east, then a global one: once the global one is seen in west, the
    # local one (written before it) would have been too, had it crossed.
    assert request_json("POST", f"{east0}{path}/maxProducers", 3)[0] == 204
    assert request_json("POST", f"{east0}{path}/maxConsumers?isGlobal=true", 7)[0] == 204
    _await_everywhere(every, f"{path}/maxConsumers?isGlobal=true", 7, "the global write")
    for url in geo["west"]["sidecars"]:
        assert _policy(f"{url}{path}/maxProducers") is None  # the local write stayed in east
        assert _policy(f"{url}{path}/maxConsumers?applied=true") == 7
    wait_for(
        lambda: _policy(f"{geo['east']['sidecars'][1]}{path}/maxProducers") == 3,
        "the local write on the other east sidecar",
        timeout_s=60,
    )
    # And the other way round.
    assert request_json("POST", f"{west0}{path}/maxConsumers?isGlobal=true", 9)[0] == 204
    _await_everywhere(every, f"{path}/maxConsumers?isGlobal=true", 9, "west's later write")


def test_the_same_key_written_on_both_sides_converges_everywhere(geo: dict[str, Any]) -> None:
    path = _topic_in_both(geo) + "/messageTTL?isGlobal=true"
    every = [u for n in ("east", "west") for u in geo[n]["sidecars"]]
    writes = [(geo["east"]["sidecars"][0], 111), (geo["west"]["sidecars"][1], 222)]
    threads = [
        threading.Thread(target=lambda u=u, v=v: request_json("POST", f"{u}{path}", v))
        for u, v in writes
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    def one_value() -> bool:
        seen = {json.dumps(_policy(f"{u}{path}")) for u in every}
        return len(seen) == 1 and seen <= {"111", "222"}

    wait_for(one_value, "all four sidecars show one of the two writes", timeout_s=60)


def test_policyctl_global_writes_through_the_global_topic(geo: dict[str, Any]) -> None:
    path = _topic_in_both(geo)
    topic = "persistent://geo/ns/" + path.rsplit("/", 1)[1]
    done = run_cli(
        "policyctl",
        "--cluster",
        "west",
        "--geo-peers",
        "east",
        "set",
        topic,
        "--global",
        "--json",
        '{"maxConsumerPerTopic": 4}',
        bootstrap=geo["west"]["bootstrap"],
    )
    assert done.returncode == 0, done.stderr
    every = [u for n in ("east", "west") for u in geo[n]["sidecars"]]
    _await_everywhere(every, f"{path}/maxConsumers?isGlobal=true", 4, "policyctl's global write")
