"""policy-sync: topic policies synchronized through a compacted Kafka topic.

The library knows nothing of HTTP; the sidecar in ``broker_shim`` builds on it.
"""

from ._cache import CacheConfig, CacheState, CacheStats, Listener, PolicyCache
from ._codec import Codec, SchemaVersion, default_schema_dir
from ._errors import (
    BootstrapTimeout,
    CacheStateError,
    CodecError,
    ConfigurationError,
    InvalidInputError,
    InvalidPolicyError,
    InvalidTopicNameError,
    NotFoundError,
    PolicySyncError,
    ProducerFencedError,
    TopicConfigurationMismatch,
    TransportError,
    WriteConflictError,
)
from ._names import NamespaceName, TopicDomain, TopicName
from ._policies import (
    FieldCatalog,
    Policies,
    PolicyScope,
    PolicyTarget,
    effective_policies,
    parse_policy_json,
)
from ._service import PolicyService, ServiceConfig
from ._writer import PolicyWriter, WriterConfig, WriteResult

__all__ = [
    "BootstrapTimeout",
    "CacheConfig",
    "CacheState",
    "CacheStateError",
    "CacheStats",
    "Codec",
    "CodecError",
    "ConfigurationError",
    "FieldCatalog",
    "InvalidInputError",
    "InvalidPolicyError",
    "InvalidTopicNameError",
    "Listener",
    "NamespaceName",
    "NotFoundError",
    "Policies",
    "PolicyCache",
    "PolicyScope",
    "PolicyService",
    "PolicySyncError",
    "PolicyTarget",
    "PolicyWriter",
    "ProducerFencedError",
    "SchemaVersion",
    "ServiceConfig",
    "TopicConfigurationMismatch",
    "TopicDomain",
    "TopicName",
    "TransportError",
    "WriteConflictError",
    "WriteResult",
    "WriterConfig",
    "default_schema_dir",
    "effective_policies",
    "parse_policy_json",
]
