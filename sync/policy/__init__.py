"""Topic policies: the values, their rules, the change-event codec, the cache every
sidecar keeps and the one writer.

* :mod:`sync.policy._policies` — targets, keys, validation, immutable values, precedence;
  :mod:`sync.policy._policy_rules` — rules between fields checked on write.
* :mod:`sync.policy._codec` (with :mod:`sync.policy._avro_encoder`) — Avro single-object
  encoding of the ``__change_events`` records.
* :mod:`sync.policy._policy_cache` — :class:`PolicyCache`: the replica of
  ``__change_events`` (on :class:`sync.table.TableReader`), its settings and counters
  (:mod:`sync.policy._policy_cache_config`), its fast path's classification by first
  bytes (:mod:`sync.policy._policy_classify`), its memory
  (:mod:`sync.policy._policy_store`) and local snapshots
  (:mod:`sync.policy._policy_snapshot`).
* :mod:`sync.policy._policy_writer` — :class:`PolicyWriter`: writes decided by the fenced
  writer (:mod:`sync.table._fenced_writer`).
* :mod:`sync.policy._policy_service` — :class:`PolicyService`: one cache plus one writer.
"""

from ._codec import Codec, SchemaVersion, default_schema_dir
from ._policies import (
    FieldCatalog,
    Policies,
    PolicyScope,
    PolicyTarget,
    effective_policies,
    parse_policy_json,
)
from ._policy_cache import CacheConfig, CacheState, CacheStats, Listener, PolicyCache
from ._policy_service import GlobalPolicySource, PolicyService, ServiceConfig
from ._policy_writer import PolicyWriter, WriterConfig, WriteResult

__all__ = [
    "CacheConfig",
    "CacheState",
    "CacheStats",
    "Codec",
    "GlobalPolicySource",
    "FieldCatalog",
    "Listener",
    "Policies",
    "PolicyCache",
    "PolicyScope",
    "PolicyService",
    "PolicyTarget",
    "PolicyWriter",
    "SchemaVersion",
    "ServiceConfig",
    "WriteResult",
    "WriterConfig",
    "default_schema_dir",
    "effective_policies",
    "parse_policy_json",
]
