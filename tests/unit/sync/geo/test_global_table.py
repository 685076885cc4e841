"""The merged global table on the in-memory twin: own topic + a mirror, one LWW state;
records without a readable stamp, or stamped by another cluster than the topic's origin, are
quarantined and never win. (The same on real Kafka + MirrorMaker 2:
``tests/integration/sync/geo/test_mirror.py``.)"""

from __future__ import annotations

import random

from sync.constants import GLOBAL_EVENTS_TOPIC, HEADER_CLUSTER, HEADER_EVENT_ID, HEADER_HLC
from sync.geo import GlobalTable, mirror_topic, pack_hlc
from sync.transport import MemoryTransport, TopicSpec
from tests.support.waits import wait_for


def _decode(_key: bytes, raw: bytes | None) -> str | None:
    return None if raw is None else raw.decode()


def _put(
    transport: MemoryTransport, topic: str, key: str, value: str | None, stamp: tuple[int, str, str]
) -> None:
    hlc, cluster, event_id = stamp
    headers = [
        (HEADER_HLC, str(hlc).encode()),
        (HEADER_CLUSTER, cluster.encode()),
        (HEADER_EVENT_ID, event_id.encode()),
    ]
    producer = transport.producer()
    producer.produce(
        topic, key.encode(), None if value is None else value.encode(), headers=headers
    )
    producer.flush(10)


def test_own_topic_and_mirror_merge_by_last_writer_wins_and_bad_stamps_never_win() -> None:
    rng = random.Random(7)
    east, west = MemoryTransport(), MemoryTransport()
    for transport, other in ((east, "west"), (west, "east")):
        for topic in (GLOBAL_EVENTS_TOPIC, mirror_topic(other)):
            transport.admin().ensure_topic(TopicSpec(topic, 4))
    written: list[tuple[str, str | None, tuple[int, str, str]]] = []
    for i in range(60):
        cluster = rng.choice(("east", "west"))
        stamp = (pack_hlc(1000 + rng.randrange(4), rng.randrange(2)), cluster, f"e{i:03d}")
        value = None if rng.random() < 0.15 else f"{cluster}-{i}"
        written.append((rng.choice("abc"), value, stamp))
    # Each origin's records in its own topic, and (as MM2 copies them) in the peer's mirror,
    # there in another order and partly twice.
    for key, value, stamp in written:
        origin = stamp[1]
        _put(east if origin == "east" else west, GLOBAL_EVENTS_TOPIC, key, value, stamp)
    copies = written[:]
    rng.shuffle(copies)
    for key, value, stamp in copies + copies[:10]:
        _put(west if stamp[1] == "east" else east, mirror_topic(stamp[1]), key, value, stamp)
    # Poison: a stamp of the wrong cluster in a mirror, and no stamp at all.
    _put(west, mirror_topic("east"), "a", "forged", (pack_hlc(9999, 0), "west", "zz"))
    producer = east.producer()
    producer.produce(GLOBAL_EVENTS_TOPIC, b"b", b"unstamped")
    producer.flush(10)

    tables = [
        GlobalTable(east, "east", ["west"], _decode).start(),
        GlobalTable(west, "west", ["east"], _decode).start(),
    ]
    try:
        for table in tables:
            table.wait_ready(20)
        expected = {}
        for key in {k for k, _, _ in written}:
            best = max(
                (w for w in written if w[0] == key),
                key=lambda w: (w[2][0], w[2][1].encode(), w[2][2]),
            )
            expected[key] = best[1]

        def converged() -> bool:
            return all({k: t.get(k) for k in expected} == expected for t in tables) and tables[
                0
            ].digest(str.encode) == tables[1].digest(str.encode)

        wait_for(converged, "both clusters' tables equal the last writer of every key", 20)
        wait_for(lambda: sum(t.poison for t in tables) == 2, "two records quarantined", 20)
    finally:
        for table in tables:
            table.close()
