"""Pin the exported names: changing the public surface must be deliberate."""

from __future__ import annotations

import sync


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
            "elected_holder",
        ]
    )  # fmt: skip
    for name in sync.__all__:
        assert getattr(sync, name) is not None


def test_every_error_derives_from_the_root() -> None:
    for name in sync.__all__:
        obj = getattr(sync, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, sync.PolicySyncError), name


def test_errors_and_constants_modules_reexport_the_one_tree() -> None:
    import sync._errors
    import sync.constants
    import sync.errors

    assert sync.errors.__all__ == sync._errors.__all__
    for name in sync.errors.__all__:
        assert getattr(sync.errors, name) is getattr(sync._errors, name)
    for name in sync.constants.__all__:
        assert getattr(sync.constants, name) is not None
