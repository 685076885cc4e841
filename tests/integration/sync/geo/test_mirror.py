"""Two clusters as geoctl runs them, on real Kafka and the real MirrorMaker 2: each cluster's
global topic reaches the other as ``<origin>.policy-sync-global-events`` with key, value,
headers and partition, committed records only, and ``__change_events`` never crosses; both
clusters are registered in each other as Pulsar registers them, and refusals write nothing."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from sync.constants import CHANGE_EVENTS_TOPIC, GLOBAL_EVENTS_TOPIC
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
        assert not {
            t for t in topics if t.startswith(f"{peer}.") and t != f"{peer}.{GLOBAL_EVENTS_TOPIC}"
        }
        assert len(geo[name]["sidecars"]) == 2


def _http(method: str, url: str, body: object = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(  # noqa: S310 - a loopback test URL
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:  # noqa: S310
            raw = resp.read()
            return int(resp.status), json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        return exc.code, json.loads(raw) if raw else None


def test_both_clusters_are_registered_everywhere_as_pulsar_does(geo: dict[str, Any]) -> None:
    """geoctl registered both clusters, tenant geo and namespace geo/ns in each cluster
    (independent configuration stores); every sidecar of the cluster sees them."""
    for name in ("east", "west"):
        for url in geo[name]["sidecars"]:
            admin = f"{url}/admin/v2"

            def listed(admin: str = admin) -> bool:
                return _http("GET", f"{admin}/clusters") == (200, ["east", "west"])

            wait_for(listed, f"{admin} lists east and west", timeout_s=30)
            assert _http("GET", f"{admin}/tenants/geo")[1]["allowedClusters"] == ["east", "west"]
            replication = _http("GET", f"{admin}/namespaces/geo/ns/replication")
            assert replication == (200, ["east", "west"])


def test_refusals_write_nothing_on_real_kafka(geo: dict[str, Any]) -> None:
    admin = f"{geo['east']['sidecars'][0]}/admin/v2"
    assert _http("PUT", f"{admin}/clusters/bad%20name", {}) == (
        412,
        {"reason": "Cluster name is not valid"},
    )
    assert _http("POST", f"{admin}/namespaces/geo/ns/replication", ["east", "nowhere"]) == (
        403,
        {"reason": "Invalid cluster id: nowhere"},
    )
    assert _http("DELETE", f"{admin}/clusters/west") == (412, {"reason": "Cluster not empty"})
    other = f"{geo['east']['sidecars'][1]}/admin/v2"
    assert _http("GET", f"{other}/clusters") == (200, ["east", "west"])
    assert _http("GET", f"{other}/namespaces/geo/ns/replication") == (200, ["east", "west"])
    # A topic of geo/ns may now name both clusters, locally and globally.
    topic = f"{admin}/persistent/geo/ns/t-{uuid.uuid4().hex[:6]}"
    assert _http("PUT", topic)[0] == 204
    assert _http("POST", f"{topic}/replication", ["east", "west"])[0] == 204
    assert _http("POST", f"{topic}/replication?isGlobal=true", ["east", "west"])[0] == 204
    wait_for(
        lambda: (
            _http("GET", f"{topic.replace(admin, other)}/replication") == (200, ["east", "west"])
        ),
        "the other east sidecar sees the topic's replication clusters",
        timeout_s=30,
    )
