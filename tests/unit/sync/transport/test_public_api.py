"""Pin the exported names of ``sync.transport``: changing its public surface must be deliberate."""

from __future__ import annotations

import sync.transport


def test_transport_exports() -> None:
    assert sorted(sync.transport.__all__) == sorted(
        [
            "OFFSET_INVALID", "GroupConsumer", "GroupDescription", "GroupMember", "GroupMetadata",
            "RebalanceListener", "BatchCallback", "BatchReport", "Record",
            "OFFSET_BEGINNING", "Admin", "Consumer", "DeliveryCallback", "DeliveryReport",
            "Header", "KafkaConfig", "KafkaTransport", "Message", "MemoryBroker",
            "MemoryTransport", "Producer", "TopicDescription", "TopicSpec", "Transport",
            "Probe", "Reachability", "ReachabilityConfig", "ReachabilityMonitor",
            "ReachabilityStatus",
        ]
    )  # fmt: skip
