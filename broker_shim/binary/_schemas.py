"""Schemas on the binary protocol: what Pulsar's ``ServerCnx`` does with the schema of a
PRODUCER, a SUBSCRIBE, a GET_SCHEMA and a GET_OR_CREATE_SCHEMA, over the cluster's schema
registry (:class:`sync.cluster.SchemaAdmin`, the cluster service's ``schemas``; see
``docs/schemas.md``).

Where each behaviour comes from (``apache/pulsar``, ``pulsar-broker/…/service/``):

* the wire ``Schema`` → a schema upload: ``ServerCnx.getSchema`` and
  ``Commands.getSchemaType`` (``Schema.Type`` number *n* is the ``SchemaType`` of value *n*,
  ``AutoConsume`` is AUTO_CONSUME); the C++ and Python clients send a schema only for
  STRING, JSON, AVRO, PROTOBUF and PROTOBUF_NATIVE, the Java client for every type but
  BYTES (its AUTO_CONSUME as ``AutoConsume``);
* PRODUCER: ``handleProducer`` → ``tryAddSchema`` → ``AbstractTopic.addSchema`` →
  ``putSchemaIfAbsent``: a schema the topic already has gives its version, a new one is
  added if compatible under the topic's strategy, an incompatible one is refused with
  ``IncompatibleSchema`` and the text ``"<exception>: <reason> caused by <exception>:
  <reason>"`` (the future's ``CompletionException`` message, then its cause). With the
  namespace's ``isAllowAutoUpdateSchema`` false (``allowAutoUpdateSchema``) only a schema
  the topic already has is accepted: "Schema not found and schema auto updating is
  disabled." otherwise. A producer without a schema is accepted unless
  ``schemaValidationEnforced`` (the topic's, else the namespace's) is on and the topic
  has a schema (``hasSchema``: a soft delete leaves it none). The decisions are
  :meth:`sync.cluster.SchemaAdmin.client_schema`'s. ``PRODUCER_SUCCESS.schema_version``
  is the version as ``LongSchemaVersion.bytes()`` encodes it: 8 bytes, a big-endian
  long; empty without a schema;
* SUBSCRIBE: ``handleSubscribe`` → ``addSchemaIfIdleOrCheckCompatible``: a topic with a
  schema, producers, consumers (AUTO_CONSUME ones aside, PIP-236) or stored messages
  checks the consumer's schema (``checkConsumerCompatibility``), an idle one adds it as
  its first version (``addSchema``: not without ``isAllowAutoUpdateSchema``); refused:
  ``IncompatibleSchema`` with the reason alone. AUTO_CONSUME consumers are not checked
  (they fetch the schemas with GET_SCHEMA);
* GET_SCHEMA: ``handleGetSchema``: the latest version (``SchemaVersion.Latest``, which
  ``getSchema(id, version)`` answers even when it is a soft delete's marker, as Pulsar
  does) or the live version named by the first 8 bytes of ``schema_version``
  (``versionFromBytes``); none: ``TopicNotFound`` "Topic not found or no-schema <topic>";
  an empty version: ``IncompatibleSchema`` "Empty schema version"; the schema's name is
  the topic's ``getSchemaName()``, ``tenant/namespace/<encoded local name>``;
* GET_OR_CREATE_SCHEMA: ``handleGetOrCreateSchema``: on an existing topic, as a
  producer's schema (type None: no schema, refused as a producer without one); otherwise
  ``TopicNotFound`` "Topic not found <topic>". A Java ``AUTO_PRODUCE_BYTES`` producer
  (AUTO_PUBLISH) asks GET_SCHEMA for the latest version and then creates its producer
  with that schema (none: as BYTES), which finds the version; the broker checks nothing
  more (the client validates what it sends).

On purpose unlike Pulsar 4.0: GET_SCHEMA needs a role that may look the topic up and
GET_OR_CREATE_SCHEMA one that may produce (Pulsar checks neither); a ``schema_version``
shorter than 8 bytes is answered ``UnknownError`` (Pulsar's ``getLong`` throws and the
request goes unanswered). Without a cluster service (no registry) schemas are ignored, as
before: producers get an empty version, consumers are not checked, GET_SCHEMA finds
nothing.
"""

from __future__ import annotations

import asyncio
import struct
import weakref

from sync import TopicName, kafka_topic_of
from sync.cluster import (
    ClusterService,
    PostSchemaPayload,
    SchemaEntry,
    SchemaType,
    TopicOperation,
)
from sync.errors import (
    ConflictError,
    NotFoundError,
    PolicySyncError,
    TopicNotFoundError,
    UnprocessableError,
)
from sync.messaging import Consumer

from . import PulsarApi_pb2 as api
from . import _commands as commands
from ._context import Session, parse_topic
from ._errors import IncompatibleSchemaError, server_error_of

__all__ = [
    "Schemas",
    "admit_schemaless_producer",
    "payload_of",
    "version_bytes",
    "version_from_bytes",
    "wire_schema",
]

#: ``Schema.Type`` number → ``SchemaType`` (Pulsar's ``SchemaType.valueOf(n)``).
_BY_NUMBER: dict[int, SchemaType] = {
    n: SchemaType(name)
    for n, name in enumerate(
        (
            "NONE", "STRING", "JSON", "PROTOBUF", "AVRO", "BOOLEAN", "INT8", "INT16",
            "INT32", "INT64", "FLOAT", "DOUBLE", "DATE", "TIME", "TIMESTAMP", "KEY_VALUE",
            "INSTANT", "LOCAL_DATE", "LOCAL_TIME", "LOCAL_DATE_TIME", "PROTOBUF_NATIVE",
        )
    )
}  # fmt: skip
_BY_NUMBER[api.Schema.AutoConsume] = SchemaType.AUTO_CONSUME
_NUMBER_OF = {kind: n for n, kind in _BY_NUMBER.items()}
_NONE = api.Schema.Type.Value("None")
#: Java's names of the exceptions whose text clients see.
_INCOMPATIBLE = "org.apache.pulsar.broker.service.schema.exceptions.IncompatibleSchemaException"
#: The consumers subscribed with AUTO_CONSUME (they do not make a topic active).
_AUTO_CONSUMERS: weakref.WeakSet[Consumer] = weakref.WeakSet()


# -- encoders / decoders ---------------------------------------------------------------
def version_bytes(version: int) -> bytes:
    """A version as Pulsar's ``LongSchemaVersion.bytes()``: 8 bytes, big-endian."""
    return struct.pack(">q", version)


def version_from_bytes(raw: bytes) -> int:
    """The version in ``raw`` (Pulsar's ``versionFromBytes``: its first 8 bytes, so the
    64-byte versions of Pulsar before 2.4 read too).

    Raises:
        ValueError: fewer than 8 bytes.
    """
    if len(raw) < 8:
        raise ValueError(f"a schema version is 8 bytes (a big-endian long), not {len(raw)}")
    return int(struct.unpack_from(">q", raw)[0])


def payload_of(schema: api.Schema) -> PostSchemaPayload:
    """A wire ``Schema`` as the registry's upload (Pulsar's ``ServerCnx.getSchema``).

    The data is text for every type the registry checks; bytes that are not UTF-8 (a Java
    client's KEY_VALUE data) are kept as they are, each as a lone surrogate.
    """
    kind = _BY_NUMBER.get(schema.type, SchemaType.NONE)
    properties = {kv.key: kv.value for kv in schema.properties}
    data = schema.schema_data.decode("utf-8", "surrogateescape")
    return PostSchemaPayload(kind, data, properties)


def wire_schema(entry: SchemaEntry, name: str) -> api.Schema:
    """A stored version as the wire ``Schema`` of GET_SCHEMA_RESPONSE (Pulsar's
    ``SchemaInfoUtil.newSchemaInfo`` and ``Commands.convertSchema``): types without a
    ``Schema.Type`` number (BYTES, AUTO, AUTO_PUBLISH) are None."""
    out = api.Schema(
        name=name,
        schema_data=entry.data.encode("utf-8", "surrogateescape"),
        type=_NUMBER_OF.get(entry.type, _NONE),  # type: ignore[arg-type]
    )
    for key, value in sorted(entry.properties.items()):
        out.properties.add(key=key, value=value)
    return out


def schema_name(topic: TopicName) -> str:
    """Pulsar's ``TopicName.getSchemaName()``: ``tenant/namespace/<encoded local name>`` of
    the base topic (a partition's schema is its partitioned topic's)."""
    return topic.base.rest_path.split("/", 1)[1]


def _incompatible(exc: PolicySyncError, *, producer: bool) -> IncompatibleSchemaError:
    """A registry refusal as the client sees it: a producer's (and GET_OR_CREATE_SCHEMA's)
    incompatibility comes as Pulsar's ``CompletionException`` text, a consumer's bare."""
    reason = str(exc)
    if producer and isinstance(exc, ConflictError):
        reason = f"{_INCOMPATIBLE}: {reason} caused by {_INCOMPATIBLE}: {reason}"
    return IncompatibleSchemaError(reason)


async def admit_schemaless_producer(svc: ClusterService, topic: TopicName) -> None:
    """Pulsar's ``ServerCnx.tryAddSchema`` for a producer without a schema (a binary client
    that sends none, and every WebSocket producer: Pulsar's proxy produces with
    ``Schema.BYTES``, which its Java client does not send): accepted, unless
    ``schemaValidationEnforced`` is on and the topic has a schema, decided on what the
    registry holds (an upload on another sidecar too).

    Raises:
        IncompatibleSchemaError: refused, with the producer's text of Pulsar.
        NotFoundError: no such namespace.
    """
    policy = svc.schemas.policy(topic)
    if not policy.validation_enforced:
        return  # Pulsar's default: accepted, the registry is not asked
    svc.require_ready()
    await svc.lookups.refresh()
    try:
        await asyncio.to_thread(svc.schemas.client_schema, topic, None, policy)
    except ConflictError as exc:
        raise _incompatible(exc, producer=True) from None


# -- the commands ----------------------------------------------------------------------
class Schemas:
    """The schema side of one connection's producers, consumers and lookups."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def _service(self) -> ClusterService | None:
        svc = self.session.ctx.cluster()
        if svc is not None:
            svc.require_ready()
        return svc

    async def add(self, topic: TopicName, schema: api.Schema | None) -> bytes:
        """Pulsar's ``tryAddSchema`` for a producer: the version of ``schema`` on ``topic``
        (see :meth:`sync.cluster.SchemaAdmin.client_schema`), empty without a schema or a
        registry.

        Raises:
            IncompatibleSchemaError: refused by the registry or the topic's policies.
            NotFoundError: no such namespace.
        """
        svc = self.session.ctx.cluster()
        if svc is None:
            return b""
        if schema is None:
            await admit_schemaless_producer(svc, topic)
            return b""
        policy = svc.schemas.policy(topic)
        svc.require_ready()
        payload = payload_of(schema)
        if not policy.allow_auto_update:
            # decided on what the registry holds (an admin upload on another sidecar too)
            await svc.lookups.refresh()
        try:
            version = await asyncio.to_thread(svc.schemas.client_schema, topic, payload, policy)
        except (ConflictError, UnprocessableError) as exc:
            raise _incompatible(exc, producer=True) from None
        return b"" if version is None else version_bytes(version)

    async def check_consumer(self, topic: TopicName, schema: api.Schema) -> None:
        """Pulsar's ``addSchemaIfIdleOrCheckCompatible`` for a consumer's schema, before it
        subscribes: checked against an active topic's schema, added to an idle topic.

        Raises:
            IncompatibleSchemaError: refused by the registry.
            NotFoundError: no such namespace.
        """
        payload = payload_of(schema)
        svc = self._service()
        if payload.type is SchemaType.AUTO_CONSUME or svc is None:
            return
        await svc.lookups.refresh()
        has_schema = svc.schemas.has_schema(topic)
        try:
            if has_schema or not await self._idle(topic):
                svc.schemas.check_consumer(topic, payload)
            else:
                await asyncio.to_thread(svc.schemas.client_schema, topic, payload)
        except (ConflictError, UnprocessableError) as exc:
            raise _incompatible(exc, producer=False) from None

    @staticmethod
    def note_consumer(consumer: Consumer, schema: api.Schema | None) -> None:
        """Remember a consumer subscribed with AUTO_CONSUME: it does not make its topic
        active for the next consumer's schema (Pulsar's ``getSchemaType()`` filter)."""
        if schema is not None and schema.type == api.Schema.AutoConsume:
            _AUTO_CONSUMERS.add(consumer)

    async def _idle(self, topic: TopicName) -> bool:
        """No producer, no consumer but AUTO_CONSUME ones and no stored message on the
        topic (Pulsar's ``PersistentTopic``: ``userCreatedProducerCount``, the active
        consumers and ``ledger.getTotalSize()``)."""
        ctx = self.session.ctx
        state = ctx.engine.topic_state(topic)
        if state is not None:
            if state.producers:
                return False
            if any(c not in _AUTO_CONSUMERS for c in state.consumers()):
                return False
        count = await ctx.last_ids.partitions(topic)
        if not count:
            return True
        parts = [topic.partition_index] if topic.is_partition else list(range(count))
        kafka_topic = kafka_topic_of(topic.base)
        ends = await ctx.last_ids.end_offsets(kafka_topic, parts)
        starts = await ctx.last_ids.start_offsets(kafka_topic, parts)
        return all(ends.get(p, 0) <= starts.get(p, 0) for p in parts)

    async def on_get_schema(self, cmd: api.BaseCommand) -> None:
        m = cmd.getSchema
        session = self.session
        try:
            topic = parse_topic(m.topic)
        except PolicySyncError as exc:
            session.write_command(
                commands.get_schema_failed(m.request_id, api.InvalidTopicName, str(exc))
            )
            return
        if m.HasField("schema_version") and not m.schema_version:
            session.write_command(
                commands.get_schema_failed(
                    m.request_id, api.IncompatibleSchema, "Empty schema version"
                )
            )
            return
        try:
            version = version_from_bytes(m.schema_version) if m.HasField("schema_version") else None
        except ValueError as exc:
            session.write_command(
                commands.get_schema_failed(m.request_id, api.UnknownError, str(exc))
            )
            return
        try:
            session.authorize(topic, TopicOperation.LOOKUP)
            entry = await self._entry(topic, version)
        except PolicySyncError as exc:
            session.write_command(
                commands.get_schema_failed(m.request_id, server_error_of(exc), str(exc))
            )
            return
        if entry is None:
            session.write_command(
                commands.get_schema_failed(
                    m.request_id, api.TopicNotFound, f"Topic not found or no-schema {m.topic}"
                )
            )
            return
        session.write_command(
            commands.get_schema_response(
                m.request_id, wire_schema(entry, schema_name(topic)), version_bytes(entry.version)
            )
        )

    async def _entry(self, topic: TopicName, version: int | None) -> SchemaEntry | None:
        """The version GET_SCHEMA answers (None: not found)."""
        svc = self._service()
        if svc is None:
            return None
        await svc.lookups.refresh()
        try:
            history = svc.schemas.history(topic)
        except NotFoundError:  # no such namespace: no schema either
            return None
        if version is None:
            # SchemaVersion.Latest: the last version stored, a deleted marker included
            return history.versions[-1] if history.versions else None
        return history.get(version)

    async def on_get_or_create_schema(self, cmd: api.BaseCommand) -> None:
        m = cmd.getOrCreateSchema
        session = self.session
        try:
            topic = parse_topic(m.topic)
            session.authorize(topic, TopicOperation.PRODUCE)
            await session.require_owned(topic)
            if not await self._exists(topic):
                raise TopicNotFoundError(f"Topic not found {m.topic}", topic=m.topic)
            schema = None if m.schema.type == _NONE else m.schema
            version = await self.add(topic, schema)
        except PolicySyncError as exc:
            session.write_command(commands.get_or_create_schema_failed(m.request_id, exc))
            return
        session.write_command(commands.get_or_create_schema_response(m.request_id, version))

    async def _exists(self, topic: TopicName) -> bool:
        """Whether the topic exists (Pulsar's ``getTopicIfExists``): its Kafka topic, and
        for a partition, that partition."""
        count = await self.session.ctx.last_ids.partitions(topic)
        if count is None:
            return False
        return topic.partition_index < count
