"""Schemas on the binary protocol, without Kafka: the wire encodings, and PRODUCER,
SUBSCRIBE, GET_SCHEMA and GET_OR_CREATE_SCHEMA as Pulsar's ``ServerCnx`` answers them,
spoken frame by frame to a whole sidecar app on the in-memory transport (the real client:
``tests/integration/broker_shim/binary/test_binary_schemas.py``)."""

from __future__ import annotations

import asyncio
import itertools
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from broker_shim._binary_app import BINARY_KEY
from broker_shim.binary import PulsarApi_pb2 as api
from broker_shim.binary import parse_frame
from broker_shim.binary._framing import encode_command, encode_payload_command
from broker_shim.binary._schemas import (
    payload_of,
    schema_name,
    version_bytes,
    version_from_bytes,
    wire_schema,
)
from sync import TopicName
from sync.cluster import LookupConfig, SchemaEntry, SchemaType
from tests.support.apps import app_client
from tests.support.sidecars import memory_sidecar
from tests.support.waits import eventually
from tests.unit.sync.cluster.test_schemas import RETYPED, V1, WITH_DEFAULT

_T = api.BaseCommand
ZERO = b"\x00" * 8
ONE = b"\x00" * 7 + b"\x01"
INCOMPATIBLE = "org.apache.pulsar.broker.service.schema.exceptions.IncompatibleSchemaException"
NONE = api.Schema(name="", schema_data=b"", type="None")
#: Pulsar 4.0.7's texts (recorded from a real standalone; "schemawhen" is Pulsar's).
SCHEMA_REQUIRED = (
    "Producers cannot connect or send message without a schema to topics with a schemawhen "
    "SchemaValidationEnforced is enabled"
)
AUTO_UPDATE_DISABLED = "Schema not found and schema auto updating is disabled."


def as_producer_error(reason: str) -> str:
    """A refusal as a producer gets it: the CompletionException's text, then its cause."""
    return f"{INCOMPATIBLE}: {reason} caused by {INCOMPATIBLE}: {reason}"


def avro(definition: str, **properties: str) -> api.Schema:
    schema = api.Schema(name="User", schema_data=definition.encode(), type=api.Schema.Avro)
    for key, value in properties.items():
        schema.properties.add(key=key, value=value)
    return schema


# -- encodings -------------------------------------------------------------------------
def test_versions_are_pulsars_eight_byte_big_endian_longs() -> None:
    assert version_bytes(0) == ZERO
    assert version_bytes(1) == ONE
    assert version_bytes(258) == b"\x00" * 6 + b"\x01\x02"
    assert version_from_bytes(version_bytes(2**40 + 7)) == 2**40 + 7
    # a version of Pulsar before 2.4 is 64 bytes: its first 8 count
    assert version_from_bytes(ONE + b"\xff" * 56) == 1
    with pytest.raises(ValueError, match="8 bytes"):
        version_from_bytes(b"\x01")


def test_wire_schemas_map_to_registry_uploads_and_back() -> None:
    got = payload_of(avro(V1, owner="billing"))
    assert (got.type, got.schema, dict(got.properties)) == (
        SchemaType.AVRO,
        V1,
        {"owner": "billing"},
    )
    # Schema.Type n is SchemaType of value n; AutoConsume is AUTO_CONSUME
    numbers = {
        "None": SchemaType.NONE,
        "String": SchemaType.STRING,
        "Json": SchemaType.JSON,
        "Bool": SchemaType.BOOLEAN,
        "KeyValue": SchemaType.KEY_VALUE,
        "LocalDateTime": SchemaType.LOCAL_DATE_TIME,
        "ProtobufNative": SchemaType.PROTOBUF_NATIVE,
        "AutoConsume": SchemaType.AUTO_CONSUME,
    }
    for name, kind in numbers.items():
        wire = api.Schema(name="x", schema_data=b"", type=name)  # the name: "None" too
        assert payload_of(wire).type is kind
    # bytes that are not UTF-8 (a KEY_VALUE's binary data) survive the round trip
    raw = b"\x00\x00\x00\x02\xff\xfe"
    kv = payload_of(api.Schema(name="kv", schema_data=raw, type=api.Schema.Type.KeyValue))
    entry = SchemaEntry(3, kv.type, kv.schema, {"b": "2", "a": "1"})
    back = wire_schema(entry, "t/ns/x")
    assert (back.name, back.schema_data, back.type) == ("t/ns/x", raw, api.Schema.Type.KeyValue)
    assert [(p.key, p.value) for p in back.properties] == [("a", "1"), ("b", "2")]
    # types without a Schema.Type number (BYTES) are None; a deleted marker is None too
    for kind in (SchemaType.BYTES, SchemaType.NONE):
        none = wire_schema(SchemaEntry(0, kind, ""), "t/ns/x")
        assert none.type == api.Schema.Type.Value("None")


def test_a_schema_name_is_the_base_topics_tenant_namespace_and_encoded_name() -> None:
    assert schema_name(TopicName.parse("persistent://t/ns/orders-partition-3")) == "t/ns/orders"
    assert schema_name(TopicName.parse("non-persistent://t/ns/a b")) == "t/ns/a+b"


# -- the commands, on the in-memory twin -----------------------------------------------
class Peer:
    """A raw binary-protocol client: one request at a time, answers by request id."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.ids = itertools.count(1)

    async def recv(self) -> api.BaseCommand:
        while True:
            header = await asyncio.wait_for(self.reader.readexactly(4), 10)
            body = await self.reader.readexactly(struct.unpack(">I", header)[0])
            cmd = _T()
            cmd.ParseFromString(body[4 : 4 + struct.unpack_from(">I", body)[0]])
            if cmd.type == _T.PING:
                pong = _T(type=_T.PONG)
                pong.pong.SetInParent()
                self.writer.write(encode_command(pong))
                continue
            return cmd

    async def ask(self, kind: int, field: str, **values: Any) -> api.BaseCommand:
        cmd = _T(type=kind)  # type: ignore[arg-type]
        sub = getattr(cmd, field)
        sub.SetInParent()
        for key, value in values.items():
            if isinstance(value, api.Schema):
                getattr(sub, key).CopyFrom(value)
            else:
                setattr(sub, key, value)
        self.writer.write(encode_command(cmd))
        return await self.recv()

    async def producer(self, topic: str, schema: api.Schema | None = None) -> api.BaseCommand:
        extra: dict[str, Any] = {} if schema is None else {"schema": schema}
        n = next(self.ids)
        return await self.ask(
            _T.PRODUCER, "producer", topic=topic, producer_id=n, request_id=n, **extra
        )

    async def subscribe(
        self, topic: str, schema: api.Schema | None = None, sub: str = "s"
    ) -> api.BaseCommand:
        extra: dict[str, Any] = {} if schema is None else {"schema": schema}
        n = next(self.ids)
        return await self.ask(
            _T.SUBSCRIBE, "subscribe", topic=topic, subscription=sub,
            subType=api.CommandSubscribe.Shared, consumer_id=n, request_id=n, **extra,
        )  # fmt: skip

    async def get_schema(self, topic: str, version: bytes | None = None) -> api.BaseCommand:
        extra = {} if version is None else {"schema_version": version}
        return await self.ask(
            _T.GET_SCHEMA, "getSchema", topic=topic, request_id=next(self.ids), **extra
        )


Scenario = Callable[[Peer], Awaitable[None]]
#: A scenario that also speaks the sidecar's admin REST.
AdminScenario = Callable[[Peer, TestClient[Any, Any]], Awaitable[None]]


def serve(scenario: Scenario) -> None:
    """Run ``scenario`` against a connected peer of a whole sidecar app (in memory)."""

    async def with_peer(peer: Peer, _client: TestClient[Any, Any]) -> None:
        await scenario(peer)

    serve_with_admin(with_peer)


def serve_with_admin(scenario: AdminScenario) -> None:
    """:func:`serve`, the scenario also given an HTTP client of the same app."""

    async def main() -> None:
        sidecar = memory_sidecar(LookupConfig(), "bs", broker_port=0)
        async with app_client(sidecar) as client:
            assert client.app is not None
            port = client.app[BINARY_KEY].port
            assert port is not None
            peer = Peer(*await asyncio.open_connection("127.0.0.1", port))
            connect = _T(type=_T.CONNECT)
            connect.connect.client_version = "test"
            connect.connect.protocol_version = 21
            peer.writer.write(encode_command(connect))
            assert (await peer.recv()).type == _T.CONNECTED
            await scenario(peer, client)
            peer.writer.close()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_producers_register_versions_and_get_schema_answers_them() -> None:
    topic = "persistent://public/default/orders"

    async def scenario(peer: Peer) -> None:
        missing = await peer.get_schema(topic)
        assert (missing.getSchemaResponse.error_code, missing.getSchemaResponse.error_message) == (
            api.TopicNotFound,
            f"Topic not found or no-schema {topic}",
        )
        # a new topic's first schema: version 0; the same again: version 0
        for _ in range(2):
            ok = await peer.producer(topic, avro(V1, owner="billing"))
            assert ok.type == _T.PRODUCER_SUCCESS, ok
            assert ok.producer_success.schema_version == ZERO
        # without a schema: accepted (schemaValidationEnforced is off), no version
        bare = await peer.producer(topic)
        assert bare.type == _T.PRODUCER_SUCCESS and bare.producer_success.schema_version == b""
        # a compatible evolution: version 1
        evolved = await peer.producer(topic, avro(WITH_DEFAULT))
        assert evolved.producer_success.schema_version == ONE
        # incompatible under FULL: Pulsar's IncompatibleSchema, as its CompletionException
        refused = await peer.producer(topic, avro(RETYPED))
        assert (refused.type, refused.error.error) == (_T.ERROR, api.IncompatibleSchema)
        head = f"{INCOMPATIBLE}: Error during schema compatibility check with strategy FULL: "
        assert refused.error.message.startswith(head)
        assert f" caused by {head}" in refused.error.message
        json_schema = api.Schema(name="User", schema_data=V1.encode(), type=api.Schema.Json)
        refused = await peer.producer(topic, json_schema)
        reason = "Incompatible schema: exists schema type AVRO, new schema type JSON"
        assert (
            refused.error.message == f"{INCOMPATIBLE}: {reason} caused by {INCOMPATIBLE}: {reason}"
        )
        # GET_SCHEMA: the latest, or a version; from a partition's name too
        latest = (await peer.get_schema(topic)).getSchemaResponse
        assert latest.schema_version == ONE
        assert latest.schema.name == "public/default/orders"
        assert (latest.schema.schema_data, latest.schema.type) == (
            WITH_DEFAULT.encode(),
            api.Schema.Avro,
        )
        first = (await peer.get_schema(f"{topic}-partition-2", ZERO)).getSchemaResponse
        assert first.schema.schema_data == V1.encode()
        assert [(p.key, p.value) for p in first.schema.properties] == [("owner", "billing")]
        gone = (await peer.get_schema(topic, version_bytes(7))).getSchemaResponse
        assert gone.error_code == api.TopicNotFound
        empty = (await peer.get_schema(topic, b"")).getSchemaResponse
        assert (empty.error_code, empty.error_message) == (
            api.IncompatibleSchema,
            "Empty schema version",
        )
        bad = (await peer.get_schema("persistent://public/default/")).getSchemaResponse
        assert bad.error_code == api.InvalidTopicName
        elsewhere = "persistent://public/no-such-namespace/orders"
        nowhere = (await peer.get_schema(elsewhere)).getSchemaResponse
        assert (nowhere.error_code, nowhere.error_message) == (
            api.TopicNotFound,
            f"Topic not found or no-schema {elsewhere}",
        )

    serve(scenario)


def test_get_or_create_schema_registers_on_existing_topics_only() -> None:
    topic = "persistent://public/default/users"

    async def scenario(peer: Peer) -> None:
        async def get_or_create(schema: api.Schema, on: str = topic) -> Any:
            answer = await peer.ask(
                _T.GET_OR_CREATE_SCHEMA, "getOrCreateSchema",
                topic=on, request_id=next(peer.ids), schema=schema,
            )  # fmt: skip
            return answer.getOrCreateSchemaResponse

        missing = await get_or_create(avro(V1))
        assert (missing.error_code, missing.error_message) == (
            api.TopicNotFound,
            f"Topic not found {topic}",
        )
        assert (await peer.producer(topic)).type == _T.PRODUCER_SUCCESS  # creates it
        assert (await get_or_create(avro(V1))).schema_version == ZERO
        assert (await get_or_create(avro(V1))).schema_version == ZERO
        assert (await get_or_create(avro(WITH_DEFAULT))).schema_version == ONE
        refused = await get_or_create(avro(RETYPED))
        assert refused.error_code == api.IncompatibleSchema
        assert refused.error_message.startswith(f"{INCOMPATIBLE}: ")
        none = api.Schema(name="", schema_data=b"", type="None")
        got = await get_or_create(none)
        assert got.HasField("schema_version") and got.schema_version == b""
        assert not got.HasField("error_code")

    serve(scenario)


def test_consumers_are_checked_on_active_topics_and_register_on_idle_ones() -> None:
    idle = "persistent://public/default/idle"
    active = "persistent://public/default/active"
    auto = "persistent://public/default/auto"

    async def scenario(peer: Peer) -> None:
        # an idle topic: the consumer's schema becomes version 0
        assert (await peer.subscribe(idle, avro(V1))).type == _T.SUCCESS
        assert (await peer.get_schema(idle)).getSchemaResponse.schema_version == ZERO
        # then: a compatible reader of the latest version passes; others are refused
        assert (await peer.subscribe(idle, avro(WITH_DEFAULT), "s2")).type == _T.SUCCESS
        string = api.Schema(name="String", schema_data=b"null", type=api.Schema.String)
        refused = await peer.subscribe(idle, string, "s3")
        assert (refused.error.error, refused.error.message) == (
            api.IncompatibleSchema,
            "Incompatible schema: exists schema type AVRO, new schema type STRING",
        )
        retyped = await peer.subscribe(idle, avro(RETYPED), "s4")
        assert retyped.error.error == api.IncompatibleSchema
        assert retyped.error.message.startswith(
            "Error during schema compatibility check with strategy BACKWARD: "
        )
        # an active topic without a schema (a producer is on it): refused, nothing stored
        assert (await peer.producer(active)).type == _T.PRODUCER_SUCCESS
        refused = await peer.subscribe(active, avro(V1))
        assert refused.error.message == (
            "Failed to add schema to an active topic with empty(BYTES) schema: new schema type AVRO"
        )
        assert (await peer.get_schema(active)).getSchemaResponse.error_code == api.TopicNotFound
        # AUTO_CONSUME consumers are not checked and do not make a topic active
        auto_consume = api.Schema(name="", schema_data=b"", type=api.Schema.AutoConsume)
        assert (await peer.subscribe(auto, auto_consume)).type == _T.SUCCESS
        assert (await peer.get_schema(auto)).getSchemaResponse.error_code == api.TopicNotFound
        assert (await peer.subscribe(auto, avro(V1), "s2")).type == _T.SUCCESS
        assert (await peer.get_schema(auto)).getSchemaResponse.schema_version == ZERO

    serve(scenario)


def test_messages_carry_the_producers_schema_version_back_to_consumers() -> None:
    topic = "persistent://public/default/versioned"

    async def scenario(peer: Peer) -> None:
        assert (await peer.subscribe(topic, avro(V1))).type == _T.SUCCESS
        consumer_id = next(peer.ids) - 1
        ok = await peer.producer(topic, avro(V1))
        version = ok.producer_success.schema_version
        producer_id = next(peer.ids) - 1
        send = _T(type=_T.SEND)
        send.send.producer_id = producer_id
        send.send.sequence_id = 0
        meta = api.MessageMetadata(
            producer_name=ok.producer_success.producer_name,
            sequence_id=0,
            publish_time=1,
            schema_version=version,
        )
        peer.writer.write(encode_payload_command(send, meta, b"\x02\x04"))
        assert (await peer.recv()).type == _T.SEND_RECEIPT
        flow = _T(type=_T.FLOW)
        flow.flow.consumer_id = consumer_id
        flow.flow.messagePermits = 10
        peer.writer.write(encode_command(flow))
        header = await asyncio.wait_for(peer.reader.readexactly(4), 10)
        body = await peer.reader.readexactly(struct.unpack(">I", header)[0])
        frame = parse_frame(body)
        assert frame.command.type == _T.MESSAGE
        assert frame.metadata is not None and frame.metadata.schema_version == ZERO

    serve(scenario)


async def _set(client: TestClient[Any, Any], path: str, value: bool) -> None:
    """Set a boolean schema policy and wait until this sidecar's policy cache has it."""
    resp = await client.post(path, json=value)
    assert resp.status == 204, await resp.text()

    async def applied() -> bool:
        got = await client.get(path + ("?applied=true" if "/persistent/" in path else ""))
        return bool(await got.json() is value)

    await eventually(applied, f"{path} = {value}", 20)


async def _upload(client: TestClient[Any, Any], topic: str, definition: str) -> int:
    path = topic.removeprefix("persistent://")
    body = {"type": "AVRO", "schema": definition, "properties": {}}
    resp = await client.post(f"/admin/v2/schemas/{path}/schema", json=body)
    assert resp.status == 200, await resp.text()
    return int((await resp.json())["version"]["version"])


def test_schema_validation_enforced_refuses_producers_without_a_schema() -> None:
    """As Pulsar 4.0.7: with the namespace's (or the topic's) ``schemaValidationEnforced``,
    a producer (or a GET_OR_CREATE_SCHEMA, or a WebSocket producer) without a schema is
    refused on a topic with one, and accepted on a topic without one, after a soft delete
    too; a topic's false overrides its namespace's true."""
    ns_policy = "/admin/v2/namespaces/public/default/schemaValidationEnforced"
    typed = "persistent://public/default/typed"
    untyped = "persistent://public/default/untyped"
    override = "persistent://public/default/override"

    async def scenario(peer: Peer, client: TestClient[Any, Any]) -> None:
        async def get_or_create(topic: str, schema: api.Schema) -> Any:
            answer = await peer.ask(
                _T.GET_OR_CREATE_SCHEMA, "getOrCreateSchema",
                topic=topic, request_id=next(peer.ids), schema=schema,
            )  # fmt: skip
            return answer.getOrCreateSchemaResponse

        assert await _upload(client, typed, V1) == 0
        assert (await peer.producer(typed)).type == _T.PRODUCER_SUCCESS  # off by default
        await _set(client, ns_policy, True)
        refused = await peer.producer(typed)
        assert (refused.type, refused.error.error, refused.error.message) == (
            _T.ERROR,
            api.IncompatibleSchema,
            as_producer_error(SCHEMA_REQUIRED),
        )
        # a WebSocket producer too (Pulsar's proxy produces without a schema): 409, the
        # broker's text, as its proxy answers its client's IncompatibleSchemaException
        ws_typed = "/ws/v2/producer/persistent/public/default/typed"
        ws_refused = await client.get(ws_typed)
        assert (ws_refused.status, await ws_refused.json()) == (
            409,
            {"reason": "Failed to create producer: " + as_producer_error(SCHEMA_REQUIRED)},
        )
        ws = await client.ws_connect("/ws/v2/producer/persistent/public/default/untyped")
        await ws.send_str('{"payload": "cmF3"}')
        assert (await ws.receive_json())["result"] == "ok"
        await ws.close()
        none = await get_or_create(typed, NONE)
        assert (none.error_code, none.error_message) == (
            api.IncompatibleSchema,
            as_producer_error(SCHEMA_REQUIRED),
        )
        # producers with the schema are served; a topic without a schema takes any
        assert (await peer.producer(typed, avro(V1))).producer_success.schema_version == ZERO
        bare = await peer.producer(untyped)
        assert bare.type == _T.PRODUCER_SUCCESS and bare.producer_success.schema_version == b""
        # a soft delete leaves the topic without a schema (Pulsar's hasSchema)
        deleted = await client.delete("/admin/v2/schemas/public/default/typed/schema")
        assert deleted.status == 200
        assert (await peer.producer(typed)).type == _T.PRODUCER_SUCCESS
        ws = await client.ws_connect(ws_typed)
        await ws.close()
        # the topic's own false wins over the namespace's true; its true alone enforces
        assert (await client.put("/admin/v2/persistent/public/default/override")).status == 204
        await _upload(client, override, V1)
        topic_policy = "/admin/v2/persistent/public/default/override/schemaValidationEnforced"
        await _set(client, topic_policy, False)
        assert (await peer.producer(override)).type == _T.PRODUCER_SUCCESS
        await _set(client, ns_policy, False)
        await _set(client, topic_policy, True)
        assert (await peer.producer(override)).error.error == api.IncompatibleSchema

    serve_with_admin(scenario)


def test_without_auto_update_only_schemas_the_topic_has_are_served() -> None:
    """As Pulsar 4.0.7 with the namespace's ``isAllowAutoUpdateSchema`` false: a producer's
    (or GET_OR_CREATE_SCHEMA's) schema must be one the topic has (an admin upload),
    compatible or not; a consumer's schema is checked as before on a topic with a schema
    and refused on an idle topic, which it would have given its first version."""
    ns_policy = "/admin/v2/namespaces/public/default/isAllowAutoUpdateSchema"
    topic = "persistent://public/default/frozen"
    idle = "persistent://public/default/idle-frozen"

    async def scenario(peer: Peer, client: TestClient[Any, Any]) -> None:
        async def get_or_create(schema: api.Schema) -> Any:
            answer = await peer.ask(
                _T.GET_OR_CREATE_SCHEMA, "getOrCreateSchema",
                topic=topic, request_id=next(peer.ids), schema=schema,
            )  # fmt: skip
            return answer.getOrCreateSchemaResponse

        await _set(client, ns_policy, False)
        refused = await peer.producer(topic, avro(V1))
        assert (refused.error.error, refused.error.message) == (
            api.IncompatibleSchema,
            as_producer_error(AUTO_UPDATE_DISABLED),
        )
        assert await _upload(client, topic, V1) == 0  # the admin API may
        # the uploaded schema (properties aside, as Pulsar compares them): version 0
        for schema in (avro(V1), avro(V1, owner="billing")):
            ok = await peer.producer(topic, schema)
            assert ok.producer_success.schema_version == ZERO, ok
        evolved = await peer.producer(topic, avro(WITH_DEFAULT))  # compatible, but new
        assert evolved.error.message == as_producer_error(AUTO_UPDATE_DISABLED)
        assert (await get_or_create(avro(WITH_DEFAULT))).error_message == as_producer_error(
            AUTO_UPDATE_DISABLED
        )
        assert (await get_or_create(avro(V1))).schema_version == ZERO
        # consumers: checked as before on a topic with a schema; an idle one is refused
        assert (await peer.subscribe(topic, avro(WITH_DEFAULT))).type == _T.SUCCESS
        refused = await peer.subscribe(idle, avro(V1))
        assert (refused.error.error, refused.error.message) == (
            api.IncompatibleSchema,
            AUTO_UPDATE_DISABLED,
        )
        assert (await peer.get_schema(idle)).getSchemaResponse.error_code == api.TopicNotFound
        # back on: the evolution is the next version
        await _set(client, ns_policy, True)
        evolved = await peer.producer(topic, avro(WITH_DEFAULT))
        assert evolved.producer_success.schema_version == ONE

    serve_with_admin(scenario)
