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
#: The compacted topic of global policy events, the only topic MirrorMaker 2 mirrors
#: (docs/geo-design.md): MM2 never mirrors a name starting with ``__`` or ``.``, and a ``.``
#: would be read as a cluster prefix. Created with :data:`CHANGE_EVENTS_CREATE_CONFIG`.
GLOBAL_EVENTS_TOPIC: Final = "policy-sync-global-events"
#: Key prefix of namespace-level policies: ``__NS__tenant/namespace``.
NAMESPACE_KEY_PREFIX: Final = "__NS__"

#: Avro single-object encoding header (spec: "C3 01" then the 8-byte little-endian fingerprint).
SINGLE_OBJECT_MAGIC: Final = b"\xc3\x01"
SINGLE_OBJECT_HEADER_LEN: Final = 10

#: Headers on dead-letter records.
HEADER_POISON_REASON: Final = "policy-sync.poison.reason"
HEADER_POISON_SOURCE: Final = "policy-sync.poison.source"

#: Headers on tombstones (deletes) of ``__change_events``: a tombstone has no body to carry
#: the event metadata, so the writer puts it here (UTF-8 values; the timestamp in decimal
#: epoch milliseconds). policy-audit reads them to say who deleted what, and when.
HEADER_AUTHOR: Final = "policy-sync.author"
HEADER_EVENT_ID: Final = "policy-sync.event-id"
HEADER_TIMESTAMP: Final = "policy-sync.timestamp-ms"
HEADER_ORIGIN: Final = "policy-sync.origin"
#: Headers of every global record (docs/geo-design.md §3): its hybrid logical clock (a
#: decimal packed long) and the cluster that wrote it; with ``policy-sync.event-id`` they are
#: the record's place in the one last-writer-wins order.
HEADER_HLC: Final = "policy-sync.hlc"
HEADER_CLUSTER: Final = "policy-sync.cluster"
TOMBSTONE_METADATA_HEADERS: Final = (
    HEADER_AUTHOR,
    HEADER_EVENT_ID,
    HEADER_TIMESTAMP,
    HEADER_ORIGIN,
)

#: Every policy writer of one change-events topic shares this transactional id, so that
#: Kafka's producer fencing serializes read-modify-write cycles across processes.
WRITER_TRANSACTIONAL_ID_PREFIX: Final = "policy-sync.writer."
#: One-partition topic whose consumer group elects each table's fence holder: the member
#: assigned its partition 0 holds the writer's fence; the others forward writes to it.
WRITER_ELECTION_TOPIC: Final = "__policy_sync.writer-election"
#: Group electing the fence holder of one change-events topic: ``<prefix><topic>``.
WRITER_ELECTION_GROUP_PREFIX: Final = "policy-sync.writer-holder."
#: client.id of an election member: ``<prefix><address writes are forwarded to>``.
WRITER_ELECTION_CLIENT_PREFIX: Final = "policy-sync.holder|"

#: Sidecar endpoints that other tools (policy-audit reconcile) depend on.
SIDECAR_DIGEST_PATH: Final = "/policy-sync/v1/digest"
SIDECAR_ENTRIES_PATH: Final = "/policy-sync/v1/entries"
#: A geo sidecar's merged global table: every key's winning stamp (policy-audit reconcile
#: across clusters).
SIDECAR_GLOBAL_ENTRIES_PATH: Final = "/policy-sync/v1/global-entries"
#: Where the fence holder accepts policy writes forwarded by other sidecars.
SIDECAR_WRITE_PATH: Final = "/policy-sync/v1/write"

#: Default broker address when neither a flag nor $KAFKA_BOOTSTRAP_SERVERS says otherwise.
DEFAULT_BOOTSTRAP_SERVERS: Final = "127.0.0.1:9092"
BOOTSTRAP_ENV_VAR: Final = "KAFKA_BOOTSTRAP_SERVERS"

# -- messages and subscriptions (Pulsar producers/consumers over Kafka) -------------------
#: Kafka headers on message records: a Pulsar property ``name=value`` is the header
#: ``name`` with the UTF-8 value; names starting with this prefix are reserved.
RESERVED_HEADER_PREFIX: Final = "__pulsar."
#: Header carrying a message's Pulsar ``eventTime`` (decimal epoch milliseconds).
HEADER_EVENT_TIME: Final = "__pulsar.eventTime"
#: Headers carrying the name of the producer that sent a message and its sequence id
#: (decimal), written for every message whose producer has a name and gave a sequence id
#: (deduplication replays them; consumers get them back as Pulsar's message metadata).
HEADER_PRODUCER: Final = "__pulsar.producer"
HEADER_SEQUENCE: Final = "__pulsar.seq"
# The rest of Pulsar's message metadata, written by the binary front end and given back to
# its consumers (broker_shim.binary._metadata_headers maps them both ways); a record
# without them is a plain message.
#: ``nullValue``: the message was sent with a null value (the record's value is empty).
HEADER_NULL_VALUE: Final = "__pulsar.nullValue"
#: ``partition_key_b64_encoded``: the record's key is the base64 text of a binary key.
HEADER_KEY_B64: Final = "__pulsar.keyB64"
#: ``ordering_key``: the message's ordering key, raw bytes.
HEADER_ORDERING_KEY: Final = "__pulsar.orderingKey"
#: ``schema_version``: raw bytes, as the producer sent them.
HEADER_SCHEMA_VERSION: Final = "__pulsar.schemaVersion"
#: A chunk of a large message (one record per chunk): ``uuid`` (UTF-8), ``chunk_id``,
#: ``num_chunks_from_msg`` and ``total_chunk_msg_size`` (decimal).
HEADER_CHUNK_UUID: Final = "__pulsar.chunk.uuid"
HEADER_CHUNK_ID: Final = "__pulsar.chunk.id"
HEADER_CHUNK_COUNT: Final = "__pulsar.chunk.count"
HEADER_CHUNK_TOTAL_SIZE: Final = "__pulsar.chunk.totalSize"
#: The sequence id of a chunk before the last one (decimal): kept apart from
#: ``__pulsar.seq`` so that deduplication counts a chunked message once, at its last chunk.
HEADER_CHUNK_SEQUENCE: Final = "__pulsar.chunk.seq"
#: End-to-end encryption: one header per ``EncryptionKeys`` entry (its serialized protobuf,
#: in order), ``encryption_algo`` (UTF-8) and ``encryption_param`` (raw bytes). The record's
#: value is the payload as sent: compressed, then encrypted.
HEADER_ENCRYPTION_KEY: Final = "__pulsar.encryption.key"
HEADER_ENCRYPTION_ALGO: Final = "__pulsar.encryption.algo"
HEADER_ENCRYPTION_PARAM: Final = "__pulsar.encryption.param"
#: ``compression`` (the CompressionType number) and ``uncompressed_size`` (decimal) of a
#: value stored as sent, still compressed (encrypted messages and chunks).
HEADER_COMPRESSION: Final = "__pulsar.compression"
HEADER_UNCOMPRESSED_SIZE: Final = "__pulsar.uncompressedSize"
#: ``num_messages_in_batch`` of a batch stored whole, as one record (an encrypted batch,
#: which the sidecar cannot split): dispatched as one entry of that many messages.
HEADER_BATCH_SIZE: Final = "__pulsar.batchSize"
#: A record of the stored-entry format (docs/entry-design.md): its value is a Pulsar entry
#: exactly as the client sent it (``[0x0e01][CRC32C][metadata size][MessageMetadata]
#: [payload]``), one record per SEND. The header's value is the format's version (``1``);
#: a reader meeting a version it does not know quarantines the record.
HEADER_ENTRY: Final = "__pulsar.entry"
#: The number of messages in a stored entry (decimal): permits, rates and the decoder read
#: it without parsing the entry.
HEADER_ENTRY_COUNT: Final = "__pulsar.count"
#: The stored-entry format's version this code writes and reads.
ENTRY_FORMAT_VERSION: Final = b"1"
#: Kafka consumer group of a Pulsar subscription: ``<prefix><kafka topic>/<subscription>``.
#: A Kafka topic name has no ``/``, so the subscription is everything after the second one.
SUBSCRIPTION_GROUP_PREFIX: Final = "policy-sync.sub/"
#: Version tag of the individual-ack set carried in a subscription's commit metadata.
ACK_SET_METADATA_PREFIX: Final = "ps1:"
#: Version 2 of it: the ranges, then the acknowledged batch indexes of partially
#: acknowledged stored entries (written only when there is such an entry).
ACK_SET_METADATA_PREFIX_V2: Final = "ps2:"
#: Topic compaction (``compactionThreshold``): the companion compacted Kafka topic of a
#: data topic is ``<prefix><kafka topic>`` (never a mapped name: those have no prefix).
COMPACTED_TOPIC_PREFIX: Final = "cmp."
#: Headers of a companion record: the offset of the message it copies in the data topic's
#: partition and that message's publish time (decimal epoch milliseconds).
HEADER_COMPACTED_OFFSET: Final = "__pulsar.compacted.offset"
HEADER_COMPACTED_PUBLISH_TIME: Final = "__pulsar.compacted.publishTime"
#: Headers of a companion record holding one message of a stored batch (a one-message
#: entry): its batch index and the batch's size in the data topic (decimal).
HEADER_COMPACTED_INDEX: Final = "__pulsar.compacted.index"
HEADER_COMPACTED_SIZE: Final = "__pulsar.compacted.size"
#: Header of a batch the compacted view rebuilt from such records: the indexes it still
#: carries, as Pulsar's ``ack_set`` words (bit i of word i//64 set: delivered; signed
#: 64-bit decimals, comma-separated). A ``MESSAGE`` sends them as its ``ack_set``.
HEADER_COMPACTED_KEPT: Final = "__pulsar.compacted.kept"
#: The horizon record closing each compaction of a partition: this key (0xFF never occurs
#: in UTF-8, so no Pulsar message key equals it) and the horizon as a decimal value.
COMPACTION_HORIZON_KEY: Final = b"\xff__pulsar.compaction.horizon"
#: Transactional id of the writer of a companion: ``<prefix><kafka topic>`` (the next
#: owner's writer fences the previous one).
COMPACTOR_TRANSACTIONAL_ID_PREFIX: Final = "policy-sync.compactor/"

# -- broker registry, namespace bundles, bundle ownership, lookup (sync.cluster) --
#: Compacted topic shared by every cluster: broker registrations, group membership
#: snapshots, namespace bundle layouts, partitioned-topic metadata, KV config, write perms.
REGISTRY_TOPIC: Final = "__policy_sync.registry"
#: Compacted topic of one cluster's bundle ownership (``<prefix><cluster>``), key = bundle.
OWNERSHIP_TOPIC_PREFIX: Final = "__policy_sync.ownership."
#: One cluster's ownership slots (``<prefix><cluster>``): partition p = slot p; a bundle's
#: slot is Kafka's default partition of its key; carries ownership requests.
OWNERSHIP_SLOTS_TOPIC_PREFIX: Final = "__policy_sync.slots."
#: Consumer group whose members are one cluster's live sidecars (``<prefix><cluster>``).
OWNERSHIP_GROUP_PREFIX: Final = "policy-sync.ownership."
#: Transactional id of a sidecar's ownership writer: ``<prefix><cluster>.<broker id>``.
OWNERSHIP_TRANSACTIONAL_ID_PREFIX: Final = "policy-sync.ownership."
#: client.id of a sidecar in the ownership group: ``<prefix><incarnation>``.
OWNERSHIP_MEMBER_CLIENT_PREFIX: Final = "policy-sync.member."
#: Every writer of namespace layouts, topic metadata, KV config and write perms shares this
#: transactional id, so Kafka's producer fencing serializes their read-modify-write cycles.
METADATA_TRANSACTIONAL_ID: Final = "policy-sync.metadata"
#: Partitions (slots) of a cluster's slots topic when policy-sync creates it.
DEFAULT_OWNERSHIP_SLOTS: Final = 64
#: Registry keys: ``broker/<cluster>/<broker id>``, ``members/<cluster>``,
#: ``ns/<tenant>/<namespace>``, ``topic/<canonical topic>``,
#: ``kv/<url-quoted namespace>/<url-quoted key>``, ``perm/<cluster>/<broker name>``.
REGISTRY_KEY_BROKER: Final = "broker/"
REGISTRY_KEY_MEMBERS: Final = "members/"
REGISTRY_KEY_NAMESPACE: Final = "ns/"
REGISTRY_KEY_TOPIC: Final = "topic/"
REGISTRY_KEY_KV: Final = "kv/"
REGISTRY_KEY_PERM: Final = "perm/"
#: ``tenant/<tenant>``: a Pulsar tenant (admin roles, allowed clusters).
REGISTRY_KEY_TENANT: Final = "tenant/"
#: ``auth/<tenant>/<namespace>``: a namespace's permissions (Pulsar's ``auth_policies``).
REGISTRY_KEY_AUTH: Final = "auth/"
#: ``schema/<canonical base topic>``: a topic's schema versions (Pulsar's schema registry;
#: a partitioned topic's partitions share its record).
REGISTRY_KEY_SCHEMA: Final = "schema/"
#: ``epoch/<canonical topic>``: the topic epoch exclusive producers hold a topic under
#: (Pulsar's ``pulsar.topic.epoch`` managed-ledger property; per name a producer uses).
REGISTRY_KEY_EPOCH: Final = "epoch/"
#: ``cluster/<name>``: a registered Pulsar cluster's ClusterData (``PUT /admin/v2/clusters``).
REGISTRY_KEY_CLUSTER: Final = "cluster/"
#: ``repl/<tenant>/<namespace>``: a namespace's replication clusters (absent: the local one).
REGISTRY_KEY_REPLICATION: Final = "repl/"
#: RocketMQ's KV namespace for ordered-topic configs (``brokerName:queueNum;...``).
ORDER_TOPIC_CONFIG_NAMESPACE: Final = "ORDER_TOPIC_CONFIG"
#: Settings the registry and ownership topics are created with (compaction is required:
#: the last record per key is the truth).
COMPACTED_TABLE_REQUIRED_CONFIG: Final = {"cleanup.policy": "compact"}
COMPACTED_TABLE_CREATE_CONFIG: Final = {
    "cleanup.policy": "compact",
    "delete.retention.ms": "86400000",
    "min.compaction.lag.ms": "0",
    "min.cleanable.dirty.ratio": "0.1",
    "segment.ms": "3600000",
}
#: Ownership requests are only useful while someone may still act on them.
OWNERSHIP_SLOTS_CREATE_CONFIG: Final = {"cleanup.policy": "delete", "retention.ms": "3600000"}
