"""Pin the exported names: changing the public surface must be deliberate."""

from __future__ import annotations

import sync
import sync.transport


def test_sync_exports() -> None:
    assert sorted(sync.__all__) == sorted(
        [
            "AccessDeniedError", "AuthenticationError", "AuthorizationError",
            "BundleUnloadingError", "ConflictError", "GroupFencedError", "TooManyRequestsError",
            "UnavailableError",
            "BootstrapTimeout", "CacheConfig", "CacheState", "CacheStateError", "CacheStats",
            "Codec", "CodecError", "ConfigurationError", "FieldCatalog", "InvalidInputError",
            "InvalidPolicyError", "InvalidTopicNameError", "Listener", "NamespaceName",
            "NotFoundError", "Policies", "PolicyCache", "PolicyScope", "PolicyService",
            "PolicySyncError", "PolicyTarget", "PolicyWriter", "ProducerFencedError",
            "SchemaVersion", "ServiceConfig", "TopicConfigurationMismatch", "TopicDomain",
            "TopicName", "TransportError", "WriteConflictError", "WriteResult", "WriterConfig",
            "default_schema_dir", "effective_policies", "kafka_topic_of", "parse_policy_json",
            "Draft", "FenceConfig", "FencedWriter", "FenceHolder", "HolderConfig", "HolderState",
        ]
    )  # fmt: skip
    for name in sync.__all__:
        assert getattr(sync, name) is not None


def test_transport_exports() -> None:
    assert sorted(sync.transport.__all__) == sorted(
        [
            "OFFSET_INVALID", "GroupConsumer", "GroupDescription", "GroupMember", "GroupMetadata",
            "RebalanceListener",
            "OFFSET_BEGINNING", "Admin", "Consumer", "DeliveryCallback", "DeliveryReport",
            "Header", "KafkaConfig", "KafkaTransport", "Message", "MemoryBroker",
            "MemoryTransport", "Producer", "TopicDescription", "TopicSpec", "Transport",
        ]
    )  # fmt: skip


def test_every_error_derives_from_the_root() -> None:
    for name in sync.__all__:
        obj = getattr(sync, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, sync.PolicySyncError), name


def test_cluster_exports() -> None:
    import sync.cluster

    assert sorted(sync.cluster.__all__) == sorted(
        [
            "AuthConfig", "Authorizer", "BrokerIdentity", "BundleState", "ClusterConfig",
            "ClusterService", "ClusterSettings", "ListenerUrls", "LookupConfig",
            "LookupService", "MemberState", "OwnershipConfig", "OwnershipRecord", "RequestOp",
            "ServiceState", "TenantRoles", "allowed_transitions", "slot_of",
        ]
    )  # fmt: skip


def test_messaging_exports() -> None:
    import sync.messaging

    assert sorted(sync.messaging.__all__) == sorted(
        [
            "AutoTopicCreation", "TopicCreator", "TopicType", "validate_override",
            "BACKLOG_EXCEEDED", "BacklogAction", "BacklogQuotas", "DuplicateInFlightError",
            "ProducerBlockedQuotaExceededError", "ProducerBlockedQuotaExceededException",
            "CloseCause", "CloseReason", "Consumer", "ConsumerBusyError", "ConsumerState",
            "Delivery", "InitialPosition", "LocalOwnership", "MessageId", "MessagingConfig",
            "MessagingEngine", "MessagingError", "NotAllowedError", "OwnerInfo",
            "PartitionedProducer", "ProducerBusyError", "ProducerClient", "ProducerConfig",
            "ProducerHandle", "ProducerState", "RateSpec", "StateTransitionError",
            "Subscription", "SubscriptionBusyError", "SubscriptionState", "SubscriptionType",
            "TopicLimits", "TopicOwnership", "TopicState", "decode_ack_ranges",
            "decode_properties", "encode_ack_ranges", "subscription_group",
        ]
    )  # fmt: skip


def test_errors_and_constants_modules_reexport_the_one_tree() -> None:
    import sync._errors
    import sync.constants
    import sync.errors

    assert sync.errors.__all__ == sync._errors.__all__
    for name in sync.errors.__all__:
        assert getattr(sync.errors, name) is getattr(sync._errors, name)
    for name in sync.constants.__all__:
        assert getattr(sync.constants, name) is not None


def test_table_exports() -> None:
    import sync.table

    assert sorted(sync.table.__all__) == sorted(
        [
            "POLICY_EVENTS", "Effect", "PoisonKind", "Quarantine", "TABLE_MOVES",
            "TableReader", "TableState", "Verdict", "header_problem", "judge", "policies_of",
        ]
    )  # fmt: skip
