"""Schemas with the real ``pulsar-client`` (3.13) on a sidecar with its cluster service (the
schema registry): an Avro or JSON producer registers its schema, consumers of a compatible
schema get the records and their schema version, incompatible ones are refused as Pulsar
refuses them, an evolved producer gets the next version, and the admin REST shows what the
producers registered (frame by frame, GET_SCHEMA and GET_OR_CREATE_SCHEMA included:
``tests/unit/broker_shim/binary/test_binary_schemas.py``)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pulsar
import pytest
from pulsar.schema import AvroSchema, Integer, JsonSchema, Record, String, StringSchema

from sync.cluster import ClusterSettings
from tests.support.http import http
from tests.support.sidecars import BinarySidecar

pytestmark = pytest.mark.timeout(300)

ZERO = b"\x00" * 8
ONE = b"\x00" * 7 + b"\x01"


def _user_v1() -> type[Record]:
    class User(Record):  # type: ignore[misc]  # pulsar-client has no type hints
        name = String()
        count = Integer()

    return User


def _user_v2() -> type[Record]:
    """Version 1 plus a field with a default (null): FULL-compatible with it."""

    class User(Record):  # type: ignore[misc]  # pulsar-client has no type hints
        name = String()
        count = Integer()
        email = String(required_default=True)

    return User


def _user_retyped() -> type[Record]:
    """``count`` as a string: cannot read version 1's ints."""

    class User(Record):  # type: ignore[misc]  # pulsar-client has no type hints
        name = String()
        count = String()

    return User


UserV1, UserV2, UserRetyped = _user_v1(), _user_v2(), _user_retyped()


@pytest.fixture(scope="module")
def sidecar(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BinarySidecar]:
    """The folder's sidecar, with a cluster of its own: the registry needs the service."""
    with BinarySidecar(
        kafka_bootstrap, tmp_path_factory.mktemp("schemas"), lookup=ClusterSettings()
    ) as s:
        yield s


def _topic() -> str:
    return f"persistent://public/default/schemas-{uuid.uuid4().hex[:8]}"


def _version(message: Any) -> bytes:
    """``Message.schema_version()`` as bytes (the client gives the C++ string as str)."""
    raw = message.schema_version()
    return raw if isinstance(raw, bytes) else str(raw).encode("latin-1")


def _rest_schema(sidecar: BinarySidecar, topic: str, what: str = "schema") -> Any:
    path = topic.removeprefix("persistent://")
    got = http("GET", f"{sidecar.http_url}/admin/v2/schemas/{path}/{what}")
    assert got.status == 200, got.body
    return got.json()


def test_avro_producer_and_consumer_share_version_zero(
    sidecar: BinarySidecar, client: pulsar.Client
) -> None:
    topic = _topic()
    producer = client.create_producer(topic, schema=AvroSchema(UserV1))
    consumer = client.subscribe(
        topic,
        "readers",
        schema=AvroSchema(UserV1),
        initial_position=pulsar.InitialPosition.Earliest,
    )
    producer.send(UserV1(name="ada", count=3))
    msg = consumer.receive(timeout_millis=20_000)
    assert _version(msg) == ZERO
    value = msg.value()
    assert (value.name, value.count) == ("ada", 3)
    consumer.acknowledge(msg)
    # the REST API shows what the producer registered
    registered = _rest_schema(sidecar, topic)
    assert (registered["version"], registered["type"]) == (0, "AVRO")
    assert json.loads(registered["data"]) == json.loads(AvroSchema(UserV1).schema_info().schema())


def test_incompatible_consumers_are_refused(sidecar: BinarySidecar, client: pulsar.Client) -> None:
    topic = _topic()
    client.create_producer(topic, schema=AvroSchema(UserV1)).close()
    with pytest.raises(pulsar.exceptions.IncompatibleSchema):
        client.subscribe(topic, "retyped", schema=AvroSchema(UserRetyped))
    with pytest.raises(pulsar.exceptions.IncompatibleSchema):
        client.subscribe(topic, "strings", schema=StringSchema())
    # nothing was registered by the refused consumers; a compatible one is served
    assert [
        v["version"] for v in _rest_schema(sidecar, topic, "schemas")["getSchemaResponses"]
    ] == [0]
    client.subscribe(topic, "fine", schema=AvroSchema(UserV1)).close()


def test_an_evolved_producer_gets_the_next_version(
    sidecar: BinarySidecar, client: pulsar.Client
) -> None:
    topic = _topic()
    consumer = client.subscribe(
        topic, "raw", initial_position=pulsar.InitialPosition.Earliest
    )  # BYTES: sees every version
    first = client.create_producer(topic, schema=AvroSchema(UserV1))
    first.send(UserV1(name="a", count=1))
    evolved = client.create_producer(topic, schema=AvroSchema(UserV2))
    evolved.send(UserV2(name="b", count=2, email="b@example.com"))
    with pytest.raises(pulsar.exceptions.IncompatibleSchema):
        client.create_producer(topic, schema=AvroSchema(UserRetyped))
    versions = [_version(consumer.receive(timeout_millis=20_000)) for _ in range(2)]
    assert versions == [ZERO, ONE]
    listed = _rest_schema(sidecar, topic, "schemas")["getSchemaResponses"]
    assert [v["version"] for v in listed] == [0, 1]
    assert json.loads(listed[1]["data"]) == json.loads(AvroSchema(UserV2).schema_info().schema())


def test_json_schema_round_trip(sidecar: BinarySidecar, client: pulsar.Client) -> None:
    topic = _topic()
    consumer = client.subscribe(topic, "json", schema=JsonSchema(UserV1))
    producer = client.create_producer(topic, schema=JsonSchema(UserV1))
    producer.send(UserV1(name="grace", count=7))
    msg = consumer.receive(timeout_millis=20_000)
    assert _version(msg) == ZERO
    assert (msg.value().name, msg.value().count) == ("grace", 7)
    assert _rest_schema(sidecar, topic)["type"] == "JSON"
    # a producer without a schema is accepted on a topic with one (Pulsar's default)
    bare = client.create_producer(topic)
    bare.send(b"{}")
    assert _version(consumer.receive(timeout_millis=20_000)) == b""
