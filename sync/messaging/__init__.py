"""Pulsar producers and subscriptions served by the sidecar, stored in Kafka.

One file per behaviour:

* ``_engine.py`` – the facade: topics served here, admission checks, live policy enforcement;
* ``_topic_state.py`` – one topic served here (Pulsar's ``PersistentTopic``);
* ``_topic_table.py`` – the topics served here: loaded on first use, locked, dropped;
* ``_policy_follow.py`` – when the live topics' policies are read again and applied;
* ``_subscriptions.py`` – opening, resetting and deleting subscriptions under the topic lock;
* ``_publish.py`` – the publish path: the producer handle and the shared Kafka producers;
* ``_monitors.py`` – the scheduler that runs the engine's table of periodic jobs;
* ``_compaction_jobs.py`` – compaction orchestration: threshold checks, admin compactions;
* ``_dedup_loader.py`` – deduplication orchestration: loading and snapshotting the state;
* ``_quota_monitor.py`` – backlog quotas enforced (Pulsar's ``BacklogQuotaManager``);
* ``_owned_sweeps.py`` – TTL and inactive-topic sweeps over owned topics not loaded here;
* ``_ownership_watch.py`` – closes the connections to names no longer served here;
* ``_live_limits.py`` – policies applied to live connections (rates, evictions);
* ``_admission.py`` – admission of consumers and producers: Pulsar's refusals, one table;
* ``_subscription.py`` – one subscription: reading, the four dispatch modes, acks, commits;
* ``_cursor.py`` – acknowledgement state per partition and its durable encoding;
* ``_consumer.py`` – one consumer connection: flow control and its outbox;
* ``_selectors.py`` – Failover's active consumer and Key_Shared's hash ring;
* ``_ratelimit.py`` – dispatch-rate token buckets;
* ``_backlog.py`` – backlog measurement and backlog-quota decisions;
* ``_topic_config.py`` – policies applied as the Kafka topic's own config;
* ``_compaction.py`` – topic compaction: the companion compacted topic, its view for
  ``readCompacted`` subscriptions, the owner's threshold check;
* ``_policy.py`` – the policies messaging reads;
* ``_reader.py`` – the thread that owns a subscription's Kafka consumer;
* ``_ownership.py`` – the seam to bundle ownership;
* ``_epoch_store.py`` – the seam to where topic epochs are kept (durable in the sidecar);
* ``_types.py`` – subscription types and the state machines;
* ``_config.py`` – settings;
* ``_autocreate.py`` – topic auto-creation: broker defaults and the namespace override.

* ``_producer.py`` – producing Pulsar messages to Kafka: routing, message ids, headers.

The front ends on top of this (WebSocket today) live in :mod:`broker_shim`.
"""

from sync._errors import (
    ConsumerBusyError,
    DuplicateInFlightError,
    MessagingError,
    NotAllowedError,
    ProducerAccessFencedError,
    ProducerBlockedQuotaExceededError,
    ProducerBlockedQuotaExceededException,
    ProducerBusyError,
    SubscriptionBusyError,
)

from ._autocreate import AutoTopicCreation, TopicCreator, TopicType, validate_override
from ._backlog import BACKLOG_EXCEEDED, BacklogAction, BacklogQuotas
from ._compaction import (
    CompactedView,
    CompactionState,
    CompactionStatus,
    Compactor,
    compacted_topic_of,
)
from ._config import MessagingConfig
from ._consumer import CloseCause, CloseReason, Consumer, Delivery
from ._cursor import decode_ack_ranges, encode_ack_ranges
from ._engine import MessagingEngine
from ._entry_codec import EntryCodec, EntryMessage
from ._epoch_store import MemoryTopicEpochs, TopicEpochStore
from ._ownership import LocalOwnership, OwnerInfo, TopicOwnership
from ._policy import RateSpec, TopicLimits
from ._producer import (
    MessageId,
    OutboundMessage,
    PartitionedProducer,
    ProducerClient,
    ProducerConfig,
    decode_origin,
    decode_properties,
)
from ._publish import ProducerHandle
from ._subscription import Subscription, subscription_group
from ._topic_state import TopicState
from ._types import (
    ConsumerState,
    InitialPosition,
    ProducerAccessMode,
    ProducerState,
    StateTransitionError,
    SubscriptionState,
    SubscriptionType,
)

__all__ = [
    "AutoTopicCreation",
    "TopicCreator",
    "TopicType",
    "validate_override",
    "BACKLOG_EXCEEDED",
    "BacklogAction",
    "BacklogQuotas",
    "CompactedView",
    "CompactionState",
    "CompactionStatus",
    "Compactor",
    "compacted_topic_of",
    "EntryCodec",
    "EntryMessage",
    "DuplicateInFlightError",
    "MessageId",
    "OutboundMessage",
    "PartitionedProducer",
    "ProducerClient",
    "ProducerConfig",
    "decode_origin",
    "decode_properties",
    "CloseCause",
    "CloseReason",
    "Consumer",
    "ConsumerBusyError",
    "ConsumerState",
    "Delivery",
    "InitialPosition",
    "ProducerAccessFencedError",
    "ProducerAccessMode",
    "LocalOwnership",
    "MemoryTopicEpochs",
    "MessagingConfig",
    "MessagingEngine",
    "MessagingError",
    "NotAllowedError",
    "OwnerInfo",
    "ProducerBlockedQuotaExceededError",
    "ProducerBlockedQuotaExceededException",
    "ProducerBusyError",
    "ProducerHandle",
    "ProducerState",
    "RateSpec",
    "StateTransitionError",
    "Subscription",
    "SubscriptionBusyError",
    "SubscriptionState",
    "SubscriptionType",
    "TopicLimits",
    "TopicEpochStore",
    "TopicOwnership",
    "TopicState",
    "decode_ack_ranges",
    "encode_ack_ranges",
    "subscription_group",
]
