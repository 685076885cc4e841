"""Issue 15: the backlog counted exactly (individual acks above the committed offset), its
size from the records' sizes, and positions moved forward keeping the acks above them."""

from __future__ import annotations

from sync.messaging._backlog import (
    BacklogMeasure,
    BacklogQuotas,
    PartitionSizes,
    RecordSizes,
    measure_backlog,
    moved_position,
)
from sync.messaging._cursor import decode_ack_ranges, decode_ack_state, encode_ack_ranges
from sync.transport import MemoryTransport, TopicSpec


def _evict(limit: int) -> BacklogQuotas:
    return BacklogQuotas.from_policy(
        {"destination_storage": {"limitSize": limit, "policy": "consumer_backlog_eviction"}}
    )


def test_individual_acks_above_the_position_are_not_backlog() -> None:
    m = BacklogMeasure(
        end={0: 100},
        positions={0: {"a": 80, "b": 90}},
        acked={0: {"a": [(85, 95)]}},
    )
    assert m.unacked(0, "a") == 10  # 80..84 and 95..99
    assert m.unacked(0, "b") == 10
    assert m.messages() == 10
    m2 = BacklogMeasure(end={0: 100}, positions={0: {"a": 80}}, acked={0: {"a": [(81, 200)]}})
    assert m2.unacked(0, "a") == 1  # ranges are clipped to the end


def test_partition_sizes_prefix_sums_gaps_and_floor() -> None:
    s = PartitionSizes(10)
    for offset, size in ((10, 5), (11, 7), (13, 3)):  # offset 12 has no record
        s.add(offset, size)
    assert s.upto == 14
    assert s.bytes_between(10, 14) == 15
    assert s.bytes_between(11, 13) == 7
    assert s.bytes_between(12, 13) == 0
    assert s.floor_for(14, 3) == 12  # [12, 14) is 3 bytes; [11, 14) is 10
    assert s.floor_for(14, 100) == 10
    s.drop_below(11)
    assert (s.base, s.bytes_between(11, 14)) == (11, 10)
    # Outside the index: the average of the indexed records (10 bytes / 3 offsets).
    assert s.bytes_between(8, 11) == 10


def test_size_eviction_uses_the_record_sizes() -> None:
    sizes = PartitionSizes(0)
    for offset in range(10):
        sizes.add(offset, 100 if offset < 5 else 10)  # five big, then five small
    m = BacklogMeasure(
        end={0: 10},
        positions={0: {"slow": 0, "fast": 8}},
        acked={0: {"slow": [(2, 3)]}},
        sizes={0: sizes},
    )
    assert m.unacked_bytes(0, "slow") == 450  # 550 minus the acked offset 2
    assert m.size_bytes() == 450
    assert m.over_size(_evict(100))
    # Keep at most 100 bytes: everything big goes, the five small ones (50 bytes) stay.
    assert m.eviction_targets(_evict(100)) == {"slow": {0: 5}}
    assert m.eviction_targets(_evict(60)) == {"slow": {0: 5}}
    assert m.eviction_targets(_evict(25)) == {"slow": {0: 8}}
    assert m.eviction_targets(_evict(15)) == {"slow": {0: 9}, "fast": {0: 9}}


def test_moved_position_keeps_the_acks_above_it() -> None:
    offset, metadata = moved_position(10, [(5, 8), (12, 14), (20, 21)])
    assert offset == 10
    assert decode_ack_ranges(offset, metadata) == [(12, 14), (20, 21)]
    # A range covering the new position carries the offset past it.
    offset, metadata = moved_position(10, [(9, 12), (15, 16)])
    assert offset == 12
    assert decode_ack_ranges(offset, metadata) == [(15, 16)]
    assert moved_position(10, []) == (10, "")
    # Partially acknowledged entries at or above the new position are kept (ps2).
    partials = [(7, 4, 0b11), (12, 4, 0b01), (16, 3, 0b100)]
    offset, metadata = moved_position(10, [(9, 12), (15, 16)], partials=partials)
    assert offset == 12
    assert decode_ack_state(offset, metadata) == ([(15, 16)], partials[1:])


def test_measure_reads_positions_acks_and_record_sizes_from_kafka() -> None:
    transport = MemoryTransport()
    admin = transport.admin()
    admin.ensure_topic(TopicSpec("t", partitions=1))
    producer = transport.producer()
    for i in range(10):
        producer.produce("t", None, b"x" * (10 + i), partition=0)
    producer.flush(5.0)
    metadata, _ = encode_ack_ranges(4, [(6, 9)], 4000)
    admin.alter_group_positions("g", "t", {0: (4, metadata)})
    quotas = _evict(1)
    sizes = RecordSizes("t")
    m = measure_backlog(admin, "t", 1, ["g"], quotas, transport=transport, sizes=sizes)
    assert m.messages() == 3  # 4, 5 and 9
    assert m.size_bytes() == 14 + 15 + 19
    assert m.eviction_targets(quotas) == {"g": {0: 10}}
    # The next measure reads only what is new, and forgets what every group acknowledged.
    for _ in range(2):
        producer.produce("t", None, b"y" * 100, partition=0)
    producer.flush(5.0)
    admin.alter_group_positions("g", "t", {0: (9, "")})
    m = measure_backlog(admin, "t", 1, ["g"], quotas, transport=transport, sizes=sizes)
    assert m.size_bytes() == 19 + 200
    assert sizes.parts[0].base == 9


def test_eviction_of_a_loaded_subscription_keeps_its_acks_above_the_new_position() -> None:
    from sync import TopicName
    from sync.messaging import SubscriptionType
    from tests.unit.sync.messaging.test_subscriptions import Env, quiet, run, take

    transport = MemoryTransport()

    async def first() -> None:
        async with Env(transport) as env:
            topic = env.topic("evict")
            c = await env.subscribe(topic, sub_type=SubscriptionType.Shared)
            env.publish(topic, 10)
            got = await take(c, 10)
            for d in got:
                if d.message_id.offset in (7, 8):
                    c.ack(d.message_id)
            c.subscription.skip_to({0: 5})  # what consumer_backlog_eviction does

    async def second() -> list[int]:
        async with Env(transport) as env:
            topic = TopicName.parse("persistent://t/ns/evict")
            c = await env.subscribe(topic, sub_type=SubscriptionType.Shared)
            got = await take(c, 3)
            assert await quiet(c, 0.3) == []
            return sorted(d.message_id.offset for d in got)

    run(first())
    assert run(second()) == [5, 6, 9]  # 0-4 evicted, 7 and 8 stay acknowledged
