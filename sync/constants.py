"""Protocol constants that programs outside the library need (public re-exports).

They are defined once, in :mod:`sync._constants`; this module only names the ones that
make up the project's public contract: topic names, record headers, sidecar paths and the
Kafka bootstrap defaults.
"""

from ._constants import (
    BOOTSTRAP_ENV_VAR,
    CHANGE_EVENTS_CREATE_CONFIG,
    CHANGE_EVENTS_PARTITIONS,
    CHANGE_EVENTS_TOPIC,
    DEAD_LETTER_SUFFIX,
    DEFAULT_BOOTSTRAP_SERVERS,
    DEFAULT_OWNERSHIP_SLOTS,
    GLOBAL_EVENTS_TOPIC,
    GLOBAL_KEY_PREFIX,
    HEADER_AUTHOR,
    HEADER_CLUSTER,
    HEADER_EVENT_ID,
    HEADER_HLC,
    HEADER_ORIGIN,
    HEADER_TIMESTAMP,
    NAMESPACE_KEY_PREFIX,
    REGISTRY_TOPIC,
    SIDECAR_DIGEST_PATH,
    SIDECAR_ENTRIES_PATH,
    SIDECAR_WRITE_PATH,
)

__all__ = [
    "BOOTSTRAP_ENV_VAR",
    "CHANGE_EVENTS_CREATE_CONFIG",
    "CHANGE_EVENTS_PARTITIONS",
    "CHANGE_EVENTS_TOPIC",
    "DEAD_LETTER_SUFFIX",
    "DEFAULT_BOOTSTRAP_SERVERS",
    "DEFAULT_OWNERSHIP_SLOTS",
    "GLOBAL_EVENTS_TOPIC",
    "GLOBAL_KEY_PREFIX",
    "HEADER_AUTHOR",
    "HEADER_CLUSTER",
    "HEADER_EVENT_ID",
    "HEADER_HLC",
    "HEADER_ORIGIN",
    "HEADER_TIMESTAMP",
    "NAMESPACE_KEY_PREFIX",
    "REGISTRY_TOPIC",
    "SIDECAR_DIGEST_PATH",
    "SIDECAR_ENTRIES_PATH",
    "SIDECAR_WRITE_PATH",
]
