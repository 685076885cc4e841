"""policy-sync: topic policies synchronized through a compacted Kafka topic.

The library knows nothing of HTTP; the sidecar in ``broker_shim`` builds on it.
"""

from ._cache import CacheConfig, CacheState, CacheStats, Listener, PolicyCache
from ._codec import Codec, SchemaVersion, default_schema_dir
from ._errors import (
    AccessDeniedError,
    AuthenticationError,
    AuthorizationError,
    BootstrapTimeout,
    BundleUnloadingError,
    CacheStateError,
    CodecError,
    ConfigurationError,
    ConflictError,
    GroupFencedError,
    InvalidInputError,
    InvalidPolicyError,
    InvalidTopicNameError,
    NotFoundError,
    PolicySyncError,
    ProducerFencedError,
    TooManyRequestsError,
    TopicConfigurationMismatch,
    TransportError,
    UnavailableError,
    WriteConflictError,
)
from ._fenced import Draft, FenceConfig, FencedWriter
from ._holder import FenceHolder, HolderConfig, HolderState, elected_holder
from ._kafka_names import kafka_topic_of
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
    "kafka_topic_of",
    "AccessDeniedError",
    "AuthenticationError",
    "AuthorizationError",
    "BootstrapTimeout",
    "BundleUnloadingError",
    "CacheConfig",
    "CacheState",
    "CacheStateError",
    "CacheStats",
    "Codec",
    "CodecError",
    "ConfigurationError",
    "ConflictError",
    "Draft",
    "FenceConfig",
    "FenceHolder",
    "elected_holder",
    "FencedWriter",
    "FieldCatalog",
    "GroupFencedError",
    "HolderConfig",
    "HolderState",
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
    "TooManyRequestsError",
    "TopicConfigurationMismatch",
    "TopicDomain",
    "TopicName",
    "TransportError",
    "UnavailableError",
    "WriteConflictError",
    "WriteResult",
    "WriterConfig",
    "default_schema_dir",
    "effective_policies",
    "parse_policy_json",
]
