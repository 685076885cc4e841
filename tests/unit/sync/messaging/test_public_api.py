"""Pin the exported names of ``sync.messaging``: changing its public surface must be deliberate."""

from __future__ import annotations

import sync.messaging


def test_messaging_exports() -> None:
    assert sorted(sync.messaging.__all__) == sorted(
        [
            "AutoTopicCreation", "TopicCreator", "TopicType", "validate_override",
            "BACKLOG_EXCEEDED", "BacklogAction", "BacklogQuotas", "DuplicateInFlightError",
            "CompactedView", "CompactionState", "CompactionStatus", "Compactor",
            "compacted_topic_of", "EntryCodec", "EntryMessage",
            "ProducerBlockedQuotaExceededError", "ProducerBlockedQuotaExceededException",
            "CloseCause", "CloseReason", "Consumer", "ConsumerBusyError", "ConsumerState",
            "Delivery", "InitialPosition", "LocalOwnership", "MemoryTopicEpochs", "MessageId",
            "MessagingConfig",
            "OutboundMessage",
            "MessagingEngine", "MessagingError", "NotAllowedError", "OwnerInfo",
            "PartitionedProducer", "ProducerAccessFencedError", "ProducerAccessMode",
            "ProducerBusyError", "ProducerClient", "ProducerConfig",
            "ProducerHandle", "ProducerState", "RateSpec", "StateTransitionError",
            "Subscription", "SubscriptionBusyError", "SubscriptionState", "SubscriptionType",
            "TopicEpochStore", "TopicLimits", "TopicOwnership", "TopicState", "decode_ack_ranges",
            "decode_origin", "decode_properties", "encode_ack_ranges", "subscription_group",
        ]
    )  # fmt: skip
