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
            "default_schema_dir", "effective_policies", "parse_policy_json",
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
