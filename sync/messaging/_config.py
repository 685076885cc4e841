"""Settings of the messaging engine (one frozen dataclass, validated on construction)."""

from __future__ import annotations

from dataclasses import dataclass, fields

from sync._errors import ConfigurationError

__all__ = ["MessagingConfig"]


@dataclass(frozen=True, slots=True)
class MessagingConfig:
    """How the sidecar serves producers and subscriptions.

    Attributes:
        default_receiver_queue_size: consumer window when the client gives none; Pulsar's
            WebSocket API caps ``receiverQueueSize`` at 1000 (``max_receiver_queue_size``).
        read_ahead: messages buffered per partition and subscription before its fetching
            pauses (resumes at half).
        fetch_batch: records taken from Kafka per fetch.
        commit_interval_s: how long an acknowledgement may wait before it is committed
            to Kafka (the window in which a crash forgets it).
        commit_keepalive_s: re-commit an unchanged position this often, so Kafka's
            ``offsets.retention.minutes`` never expires a live subscription.
        ack_metadata_max_bytes: budget for the individual-ack set in commit metadata
            (Kafka's ``offset.metadata.max.bytes`` is 4096 by default).
        idle_subscription_close_s: how long a subscription without consumers keeps its
            Kafka consumer (its position stays committed either way).
        default_negative_ack_delay_s: redelivery delay of a negatively acknowledged
            message (Pulsar's client default is one minute).
        key_shared_lookahead: messages Key_Shared dispatch scans past a blocked key.
        default_max_message_size: ``maxMessageSize`` when no policy sets it (bytes; Kafka's
            default ``message.max.bytes`` is about 1 MiB).
        producer_linger_ms: ``linger.ms`` of the sidecar's shared Kafka producer. 5 ms
            rather than 1: WebSocket sends arrive one by one, and with 1 ms a busy
            producer's batches hold a handful of messages, so librdkafka's broker thread
            and the broker itself spend more per message on requests than on data (the
            publishing throughput is limited by acknowledgements in flight, not latency).
            A producer may ask for another (``ProducerConfig.linger_ms``): the binary
            protocol's SENDs arrive batched by the client and use 0.
        report_poll_interval_s: how often the event loop serves the shared producer's
            delivery reports while sends are in flight (an acknowledgement waits at most
            this long after Kafka answered).
        max_pending_per_producer: sends one WebSocket producer may have in flight before
            its connection stops being read (Pulsar's ``maxPendingMessages`` default).
        policy_check_s: how often live topics re-read their policies even without a
            change notification (and the policy service is looked up again).
        ownership_check_s: how often live topics ask whether they are still owned here
            (a backstop: a bundle moving away closes its topics at once, see
            :meth:`MessagingEngine.release_blocking`).
        release_wait_s: how long a bundle moving away waits for its topics to close here
            (their acknowledgements committed, their clients told) before the move goes
            on regardless.
        message_expiry_check_s: how often buffered messages are checked against
            ``messageTTLInSeconds`` (they are also checked as they are dispatched;
            Pulsar's ``messageExpiryCheckIntervalInMinutes`` is 5 minutes).
        backlog_check_s: how often the owner measures the backlog of every owned topic
            with a backlog quota, loaded here or not (Pulsar's
            ``backlogQuotaCheckIntervalInSeconds`` is 60).
        backlog_hold_timeout_s: how long a send waits under ``producer_request_hold``
            before it fails (Pulsar's client ``sendTimeout`` default is 30 s).
        dedup_snapshot_s: how often a topic's deduplication state is snapshotted when
            ``deduplicationSnapshotIntervalSeconds`` is not set (Pulsar's default is 120).
        unloaded_expiry_check_s: how often the durable subscriptions of owned topics that
            are not loaded here have their position moved past messages older than
            ``messageTTLInSeconds`` (Kafka group offsets altered).
        inactive_topic_check_s: how often owned topics are checked against their
            ``inactiveTopicPolicies`` (Pulsar's ``brokerDeleteInactiveTopicsFrequencySeconds``
            is 60).
        topic_config_sweep_s: how often every owned topic's Kafka config is compared with
            its policies even without a change notification.
        compaction_check_s: how often the owner compares every owned topic's bytes since
            its last compaction with its ``compactionThreshold`` (Pulsar's
            ``brokerServiceCompactionMonitorIntervalInSeconds`` is 60).
    """

    default_receiver_queue_size: int = 1000
    max_receiver_queue_size: int = 1000
    read_ahead: int = 1000
    fetch_batch: int = 500
    commit_interval_s: float = 0.1
    commit_keepalive_s: float = 60.0
    ack_metadata_max_bytes: int = 4000
    idle_subscription_close_s: float = 30.0
    default_negative_ack_delay_s: float = 60.0
    key_shared_lookahead: int = 1000
    default_max_message_size: int = 1_000_000
    producer_linger_ms: int = 5
    report_poll_interval_s: float = 0.001
    max_pending_per_producer: int = 1000
    policy_check_s: float = 5.0
    ownership_check_s: float = 5.0
    release_wait_s: float = 10.0
    message_expiry_check_s: float = 5.0
    backlog_check_s: float = 2.0
    backlog_hold_timeout_s: float = 30.0
    dedup_snapshot_s: float = 120.0
    unloaded_expiry_check_s: float = 10.0
    inactive_topic_check_s: float = 10.0
    topic_config_sweep_s: float = 30.0
    compaction_check_s: float = 60.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "producer_linger_ms":
                ok = value >= 0
            else:
                ok = value > 0
            if not ok:
                raise ConfigurationError(f"MessagingConfig.{f.name} must be positive, got {value}")
        if self.default_receiver_queue_size > self.max_receiver_queue_size:
            raise ConfigurationError(
                "default_receiver_queue_size must not exceed max_receiver_queue_size"
            )
        if self.ack_metadata_max_bytes < 64:
            raise ConfigurationError("ack_metadata_max_bytes must be at least 64")
