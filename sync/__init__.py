"""policy-sync: topic policies synchronized through a compacted Kafka topic.

The library knows nothing of HTTP; the sidecar in ``broker_shim`` builds on it.
"""

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
from .naming._kafka_names import kafka_topic_of
from .naming._names import NamespaceName, TopicDomain, TopicName
from .policy._codec import Codec, SchemaVersion, default_schema_dir
from .policy._policies import (
    FieldCatalog,
    Policies,
    PolicyScope,
    PolicyTarget,
    effective_policies,
    parse_policy_json,
)
from .policy._policy_cache import CacheConfig, CacheState, CacheStats, Listener, PolicyCache
from .policy._policy_service import PolicyService, ServiceConfig
from .policy._policy_writer import PolicyWriter, WriterConfig, WriteResult
from .table._fence_holder import FenceHolder, HolderConfig, HolderState, elected_holder
from .table._fenced_writer import Draft, FenceConfig, FencedWriter

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
