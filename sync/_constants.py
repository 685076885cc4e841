"""Protocol constants: every topic name, key prefix, header and magic byte in one place."""

from __future__ import annotations

from typing import Final

#: The compacted topic that carries every policy change event.
CHANGE_EVENTS_TOPIC: Final = "__change_events"
#: Where poison records are copied, byte for byte, with headers saying why and from where.
DEAD_LETTER_SUFFIX: Final = ".dlq"

#: Partitions of ``__change_events`` when policy-sync creates it.
CHANGE_EVENTS_PARTITIONS: Final = 4
#: Settings policy-sync creates ``__change_events`` with. ``cleanup.policy`` is *required*
#: (a delete-policy topic would drop policies); the rest are defaults we document.
CHANGE_EVENTS_REQUIRED_CONFIG: Final = {"cleanup.policy": "compact"}
CHANGE_EVENTS_CREATE_CONFIG: Final = {
    "cleanup.policy": "compact",
    # Tombstones must outlive the longest sidecar absence we tolerate with a snapshot.
    "delete.retention.ms": "86400000",
    "min.compaction.lag.ms": "0",
    "min.cleanable.dirty.ratio": "0.1",
    "segment.ms": "3600000",
}

#: Key prefix of global (geo-replicated) topic policies.
GLOBAL_KEY_PREFIX: Final = "__G__"
#: Key prefix of namespace-level policies: ``__NS__tenant/namespace``.
NAMESPACE_KEY_PREFIX: Final = "__NS__"

#: Avro single-object encoding header (spec: "C3 01" then the 8-byte little-endian fingerprint).
SINGLE_OBJECT_MAGIC: Final = b"\xc3\x01"
SINGLE_OBJECT_HEADER_LEN: Final = 10

#: Headers on dead-letter records.
HEADER_POISON_REASON: Final = "policy-sync.poison.reason"
HEADER_POISON_SOURCE: Final = "policy-sync.poison.source"

#: Every policy writer of one change-events topic shares this transactional id, so that
#: Kafka's producer fencing serializes read-modify-write cycles across processes.
WRITER_TRANSACTIONAL_ID_PREFIX: Final = "policy-sync.writer."

#: Default broker address when neither a flag nor $KAFKA_BOOTSTRAP_SERVERS says otherwise.
DEFAULT_BOOTSTRAP_SERVERS: Final = "127.0.0.1:9092"
BOOTSTRAP_ENV_VAR: Final = "KAFKA_BOOTSTRAP_SERVERS"
