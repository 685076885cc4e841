"""Every command the sidecar sends, built in one place (Pulsar's ``PulsarCommandSenderImpl``).

Each builder returns a :class:`BaseCommand` (or, for MESSAGE, its encoded frame); the
connection and its role handlers only decide *what* to answer, never how it is laid out.
"""

from __future__ import annotations

from collections.abc import Iterable

from sync.messaging import Delivery, MessageId

from . import PulsarApi_pb2 as api
from ._entries import entry_frame
from ._errors import server_error_of
from ._framing import encode_payload_command
from ._metadata_headers import restore

__all__ = [
    "EARLIEST_LEDGER",
    "LATEST_LEDGER",
    "NO_REQUEST",
    "ack_response",
    "active_consumer_change",
    "close_consumer",
    "close_producer",
    "connected",
    "error",
    "get_or_create_schema_failed",
    "get_or_create_schema_response",
    "get_schema_failed",
    "get_schema_response",
    "last_message_id_response",
    "lookup_failed",
    "lookup_response",
    "message_frame",
    "partitioned_metadata_failed",
    "partitioned_metadata_response",
    "ping",
    "pong",
    "producer_success",
    "send_error",
    "send_receipt",
    "success",
    "topics_of_namespace",
]

#: Pulsar answers broker-initiated commands with request id -1 (an unsigned 64-bit field).
NO_REQUEST = (1 << 64) - 1
#: Pulsar's ``MessageId.earliest`` / ``latest`` as the wire carries them.
EARLIEST_LEDGER = (1 << 64) - 1
LATEST_LEDGER = (1 << 63) - 1
#: MessageMetadata.producer_name of records that do not name their producer.
_UNKNOWN_PRODUCER = "policy-sync"

_T = api.BaseCommand


# -- generic replies -------------------------------------------------------------------
def success(request_id: int) -> api.BaseCommand:
    """SUCCESS for a request."""
    cmd = _T(type=_T.SUCCESS)
    cmd.success.request_id = request_id
    return cmd


def error(request_id: int, exc: BaseException) -> api.BaseCommand:
    """ERROR for a request: the exception's ``ServerError`` code and text."""
    cmd = _T(type=_T.ERROR)
    cmd.error.request_id = request_id
    cmd.error.error = server_error_of(exc)  # type: ignore[assignment]
    cmd.error.message = str(exc)
    return cmd


# -- connection ------------------------------------------------------------------------
def connected(server_version: str, protocol_version: int, max_message_size: int) -> api.BaseCommand:
    """CONNECTED: the handshake's answer."""
    cmd = _T(type=_T.CONNECTED)
    cmd.connected.server_version = server_version
    cmd.connected.protocol_version = protocol_version
    cmd.connected.max_message_size = max_message_size
    return cmd


def ping() -> api.BaseCommand:
    """PING (keepalive)."""
    cmd = _T(type=_T.PING)
    cmd.ping.SetInParent()
    return cmd


def pong() -> api.BaseCommand:
    """PONG (answer to the client's PING)."""
    cmd = _T(type=_T.PONG)
    cmd.pong.SetInParent()
    return cmd


# -- lookups ---------------------------------------------------------------------------
def partitioned_metadata_response(request_id: int, partitions: int) -> api.BaseCommand:
    """PARTITIONED_METADATA_RESPONSE: the partition count (0: not partitioned)."""
    out = _T(type=_T.PARTITIONED_METADATA_RESPONSE)
    resp = out.partitionMetadataResponse
    resp.request_id = request_id
    resp.partitions = partitions
    resp.response = api.CommandPartitionedTopicMetadataResponse.Success
    return out


def partitioned_metadata_failed(request_id: int, exc: BaseException) -> api.BaseCommand:
    """PARTITIONED_METADATA_RESPONSE refusing the request."""
    out = _T(type=_T.PARTITIONED_METADATA_RESPONSE)
    resp = out.partitionMetadataResponse
    resp.request_id = request_id
    resp.response = api.CommandPartitionedTopicMetadataResponse.Failed
    resp.error = server_error_of(exc)  # type: ignore[assignment]
    resp.message = str(exc)
    return out


def lookup_response(
    request_id: int, url: str, *, local: bool, proxy: bool, url_tls: str | None = None
) -> api.BaseCommand:
    """LOOKUP_RESPONSE: Connect (served here) or Redirect to ``url`` (and ``url_tls``, the
    owner's ``pulsar+ssl://`` address, which TLS clients go to)."""
    out = _T(type=_T.LOOKUP_RESPONSE)
    resp = out.lookupTopicResponse
    resp.request_id = request_id
    resp.brokerServiceUrl = url
    if url_tls:
        resp.brokerServiceUrlTls = url_tls
    resp.response = (
        api.CommandLookupTopicResponse.Connect if local else api.CommandLookupTopicResponse.Redirect
    )
    resp.authoritative = True
    resp.proxy_through_service_url = proxy
    return out


def lookup_failed(request_id: int, exc: BaseException) -> api.BaseCommand:
    """LOOKUP_RESPONSE refusing the lookup."""
    out = _T(type=_T.LOOKUP_RESPONSE)
    resp = out.lookupTopicResponse
    resp.request_id = request_id
    resp.response = api.CommandLookupTopicResponse.Failed
    resp.error = server_error_of(exc)  # type: ignore[assignment]
    resp.message = str(exc)
    return out


def topics_of_namespace(request_id: int, names: Iterable[str]) -> api.BaseCommand:
    """GET_TOPICS_OF_NAMESPACE_RESPONSE."""
    out = _T(type=_T.GET_TOPICS_OF_NAMESPACE_RESPONSE)
    out.getTopicsOfNamespaceResponse.request_id = request_id
    out.getTopicsOfNamespaceResponse.topics.extend(names)
    return out


def get_schema_response(request_id: int, schema: api.Schema, version: bytes) -> api.BaseCommand:
    """GET_SCHEMA_RESPONSE with the schema and its version (Pulsar's 8-byte encoding)."""
    out = _T(type=_T.GET_SCHEMA_RESPONSE)
    resp = out.getSchemaResponse
    resp.request_id = request_id
    resp.schema.CopyFrom(schema)
    resp.schema_version = version
    return out


def get_schema_failed(request_id: int, code: int, message: str) -> api.BaseCommand:
    """GET_SCHEMA_RESPONSE refusing the request (e.g. ``TopicNotFound``: no such schema)."""
    out = _T(type=_T.GET_SCHEMA_RESPONSE)
    resp = out.getSchemaResponse
    resp.request_id = request_id
    resp.error_code = code  # type: ignore[assignment]
    resp.error_message = message
    return out


def get_or_create_schema_response(request_id: int, version: bytes) -> api.BaseCommand:
    """GET_OR_CREATE_SCHEMA_RESPONSE: the schema's version (empty: no schema)."""
    out = _T(type=_T.GET_OR_CREATE_SCHEMA_RESPONSE)
    resp = out.getOrCreateSchemaResponse
    resp.request_id = request_id
    resp.schema_version = version
    return out


def get_or_create_schema_failed(request_id: int, exc: BaseException) -> api.BaseCommand:
    """GET_OR_CREATE_SCHEMA_RESPONSE refusing the schema: the exception's code and text."""
    out = _T(type=_T.GET_OR_CREATE_SCHEMA_RESPONSE)
    resp = out.getOrCreateSchemaResponse
    resp.request_id = request_id
    resp.error_code = server_error_of(exc)  # type: ignore[assignment]
    resp.error_message = str(exc)
    return out


# -- producers -------------------------------------------------------------------------
def producer_success(
    request_id: int,
    name: str,
    last_sequence_id: int = -1,
    schema_version: bytes = b"",
    *,
    ready: bool = True,
    topic_epoch: int | None = None,
) -> api.BaseCommand:
    """PRODUCER_SUCCESS (``last_sequence_id``: where a deduplicated producer resumes;
    ``schema_version``: the version of the producer's schema, 8 bytes, or empty without
    one, which Pulsar's Java client requires to be present; ``ready`` false: a
    ``WaitForExclusive`` producer is queued, its request stays open; ``topic_epoch``: the
    epoch an exclusive producer holds the topic under, which it presents on reconnect)."""
    out = _T(type=_T.PRODUCER_SUCCESS)
    out.producer_success.request_id = request_id
    out.producer_success.producer_name = name
    out.producer_success.last_sequence_id = last_sequence_id
    out.producer_success.schema_version = schema_version
    out.producer_success.producer_ready = ready
    if topic_epoch is not None:
        out.producer_success.topic_epoch = topic_epoch
    return out


def send_receipt(
    producer_id: int, sequence_id: int, highest: int, message_id: MessageId
) -> api.BaseCommand:
    """SEND_RECEIPT carrying the id of the batch's first message."""
    cmd = _T(type=_T.SEND_RECEIPT)
    receipt = cmd.send_receipt
    receipt.producer_id = producer_id
    receipt.sequence_id = sequence_id
    receipt.highest_sequence_id = highest
    receipt.message_id.ledgerId = 0
    receipt.message_id.entryId = message_id.offset
    receipt.message_id.partition = message_id.partition
    return cmd


def send_error(producer_id: int, sequence_id: int, code: int, message: str) -> api.BaseCommand:
    """SEND_ERROR."""
    cmd = _T(type=_T.SEND_ERROR)
    err = cmd.send_error
    err.producer_id = producer_id
    err.sequence_id = sequence_id
    err.error = code  # type: ignore[assignment]
    err.message = message
    return cmd


def close_producer(producer_id: int) -> api.BaseCommand:
    """CLOSE_PRODUCER, broker-initiated: the client reconnects the producer."""
    out = _T(type=_T.CLOSE_PRODUCER)
    out.close_producer.producer_id = producer_id
    out.close_producer.request_id = NO_REQUEST
    return out


# -- consumers -------------------------------------------------------------------------
def close_consumer(consumer_id: int) -> api.BaseCommand:
    """CLOSE_CONSUMER, broker-initiated: the client resubscribes."""
    out = _T(type=_T.CLOSE_CONSUMER)
    out.close_consumer.consumer_id = consumer_id
    out.close_consumer.request_id = NO_REQUEST
    return out


def active_consumer_change(consumer_id: int, *, active: bool) -> api.BaseCommand:
    """ACTIVE_CONSUMER_CHANGE (Failover subscriptions)."""
    out = _T(type=_T.ACTIVE_CONSUMER_CHANGE)
    out.active_consumer_change.consumer_id = consumer_id
    out.active_consumer_change.is_active = active
    return out


def ack_response(consumer_id: int, request_id: int, *, found: bool) -> api.BaseCommand:
    """ACK_RESPONSE (acknowledgements with receipt)."""
    out = _T(type=_T.ACK_RESPONSE)
    out.ackResponse.consumer_id = consumer_id
    out.ackResponse.request_id = request_id
    if not found:
        out.ackResponse.error = api.ConsumerNotFound
        out.ackResponse.message = f"Consumer {consumer_id} not found"
    return out


def last_message_id_response(
    request_id: int,
    last: tuple[int, int] | None,
    *,
    partitioned: bool,
    mark_delete: tuple[int, int] | None = None,
    batch_index: int = -1,
) -> api.BaseCommand:
    """GET_LAST_MESSAGE_ID_RESPONSE: ``last`` is (offset, partition), None for empty;
    ``mark_delete`` the subscription's mark-delete position (offset, partition), offset -1
    before the first message, as Pulsar's ``(ledger, -1)``. Clients compare the two for
    ``hasMessageAvailable`` on a reader started at the latest message or after a seek
    by time. ``batch_index``: the last message's index when ``last`` is a stored batch
    (-1: none)."""
    out = _T(type=_T.GET_LAST_MESSAGE_ID_RESPONSE)
    resp = out.getLastMessageIdResponse
    resp.request_id = request_id
    mid = resp.last_message_id
    if last is None:
        mid.ledgerId = EARLIEST_LEDGER
        mid.entryId = EARLIEST_LEDGER
    else:
        mid.ledgerId = 0
        mid.entryId = last[0]
        mid.partition = last[1] if partitioned else -1
        if batch_index >= 0:
            mid.batch_index = batch_index
    if mark_delete is not None:
        md = resp.consumer_mark_delete_position
        md.ledgerId = 0
        md.entryId = mark_delete[0] & 0xFFFF_FFFF_FFFF_FFFF  # -1: Java's long, unsigned here
        md.partition = mark_delete[1] if partitioned else -1
    return out


def message_frame(consumer_id: int, delivery: Delivery) -> bytes:
    """A MESSAGE: one Kafka record as one (unbatched) Pulsar message, encoded (a record
    holding an encrypted batch is one entry of its messages); a stored entry as stored."""
    entry = delivery.entry
    if entry.stored_entry:
        return entry_frame(consumer_id, delivery)
    cmd = _T(type=_T.MESSAGE)
    msg = cmd.message
    msg.consumer_id = consumer_id
    msg.message_id.ledgerId = 0
    msg.message_id.entryId = delivery.message_id.offset
    msg.message_id.partition = delivery.message_id.partition
    if delivery.redelivery_count:
        msg.redelivery_count = delivery.redelivery_count
    meta = api.MessageMetadata()
    # The sender's name and sequence id where the record keeps them; for records of plain
    # Kafka producers and unnamed producers: "policy-sync" and the Kafka offset.
    meta.producer_name = _UNKNOWN_PRODUCER
    meta.sequence_id = entry.offset
    meta.publish_time = max(0, entry.publish_ms)  # a record may say -1: no timestamp
    if entry.headers:
        # Properties, and what else of the sender's metadata the record keeps.
        restore(meta, entry.headers)
    if entry.key is not None:
        meta.partition_key = entry.key
    return encode_payload_command(cmd, meta, entry.payload)
