"""Pulsar's binary protocol (``pulsar://``) on the sidecar, over :mod:`broker_shim.messaging`.

Unmodified Pulsar clients (Java, Python, Go, C++) look up, produce and consume through
the same messaging engine as the WebSocket API, on Kafka, governed by the synchronized
policies.

* ``PulsarApi.proto`` – the subset of Pulsar's protocol served (Pulsar's field numbers);
  ``PulsarApi_pb2.py`` is generated from it by ``make proto``;
* ``_framing.py`` – frames, checksums, compression, batches;
* ``_connection.py`` – one connection's core: frame loop, handshake, dispatch, lifecycle;
* ``_context.py`` – what the connection and its role handlers share (``Session``);
* ``_lookups.py``, ``_producers.py``, ``_consumers.py`` – the commands, one module per role;
* ``_schemas.py`` – schemas: producers' registered, consumers' checked, GET_SCHEMA and
  GET_OR_CREATE_SCHEMA, over the cluster's schema registry (``docs/schemas.md``);
* ``_commands.py`` – every outbound command, built in one place;
* ``_errors.py`` – the two tables: exceptions → ``ServerError``, engine closes → commands;
* ``_server.py`` – the asyncio listener, the command trace, Kafka look-ups.

The message mapping is the WebSocket API's (:mod:`sync.producer`), so a message written by
either API (or a plain Kafka producer with the same layout) is read the same by both:

* one Pulsar message = one Kafka record; a producer's batch is unpacked on SEND, after
  decompression (NONE, LZ4, ZLIB, ZSTD, SNAPPY), every message checked before the first
  is queued (a batch is stored whole or refused whole);
* Kafka key = the partition key (UTF-8), value = the payload, headers = the properties
  (``__pulsar.eventTime`` = the event time), timestamp = the publish time (when the
  sidecar stored it, as for WebSocket sends);
* message id = ``(ledgerId 0, entryId = Kafka offset, partition)``; a SEND_RECEIPT carries
  the id of the batch's first message (the client numbers the batch indexes itself);
* the producer name and sequence id of each message as the headers ``__pulsar.producer`` /
  ``__pulsar.seq`` (also from WebSocket producers with ``producerName`` and ``sequenceId``),
  the schema version a producer stamps on it (PRODUCER_SUCCESS gave it the registered
  version) as ``__pulsar.schemaVersion``;
* delivered messages are unbatched MESSAGE commands, one per record, with
  ``redelivery_count``, the producer name and sequence id stored with the record
  (``policy-sync`` and the Kafka offset for records without them, e.g. of plain Kafka
  producers) and the Kafka timestamp as publish time.
"""

from ._connection import BinaryConfig, Connection, ConnectionState
from ._decode import DecodedMessage, decode_record
from ._entries import EntryError, decode_entry, entry_count_of
from ._errors import CloseAction, IncompatibleSchemaError, close_action_of, server_error_of
from ._framing import ChecksumError, FrameError, parse_frame, unpack_messages
from ._schemas import admit_schemaless_producer
from ._server import BinaryServer, CommandTrace

__all__ = [
    "DecodedMessage",
    "decode_record",
    "EntryError",
    "decode_entry",
    "entry_count_of",
    "BinaryConfig",
    "BinaryServer",
    "ChecksumError",
    "CloseAction",
    "CommandTrace",
    "Connection",
    "ConnectionState",
    "FrameError",
    "IncompatibleSchemaError",
    "admit_schemaless_producer",
    "close_action_of",
    "parse_frame",
    "server_error_of",
    "unpack_messages",
]
