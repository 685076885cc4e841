"""Schemas with the real ``pulsar-client`` (3.13) on a sidecar with its cluster service (the
schema registry): an Avro or JSON producer registers its schema, consumers of a compatible
schema get the records and their schema version, incompatible ones are refused as Pulsar
refuses them, an evolved producer gets the next version, and the admin REST shows what the
producers registered (frame by frame, GET_SCHEMA and GET_OR_CREATE_SCHEMA included:
``tests/unit/broker_shim/binary/test_binary_schemas.py``). A namespace's
``schemaValidationEnforced`` refuses producers without a schema on a topic with one, its
``isAllowAutoUpdateSchema`` false refuses schemas the topic does not have, and the Java
client's AUTO_PUBLISH producer (``Schema.AUTO_PRODUCE_BYTES()``, which the Python client
lacks) gets the topic's schema with GET_SCHEMA and produces with it."""

from __future__ import annotations

import io
import json
import subprocess
import uuid
from collections.abc import Iterator
from functools import partial
from typing import Any

import pulsar
import pytest
from fastavro import parse_schema, schemaless_writer
from pulsar.schema import AvroSchema, Integer, JsonSchema, Record, String, StringSchema
from websockets.exceptions import InvalidStatus

from sync.cluster import ClusterSettings
from tests.integration.broker_shim.binary.test_binary_java import JAVA
from tests.support.http import http
from tests.support.sidecars import BinarySidecar
from tests.support.waits import wait_for
from tests.support.ws import connect, run

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


def _namespace(sidecar: BinarySidecar, **policies: bool) -> str:
    """A fresh namespace of ``public`` with ``policies`` set (and read back applied): the
    module's sidecar serves every test, so a policy never reaches another test's topics."""
    namespace = f"public/ns-{uuid.uuid4().hex[:8]}"
    base = f"{sidecar.http_url}/admin/v2/namespaces/{namespace}"
    assert http("PUT", base, "{}").status == 204
    for name, value in policies.items():
        assert http("POST", f"{base}/{name}", json.dumps(value)).status == 204
        url = f"{base}/{name}"
        wait_for(partial(_reads_back, url, value), f"{name} read back as {value}", timeout_s=20)
    return namespace


def _reads_back(url: str, value: Any) -> bool:
    return http("GET", url).json() is value


def _upload(sidecar: BinarySidecar, topic: str, definition: Any) -> None:
    path = topic.removeprefix("persistent://")
    body = json.dumps({"type": "AVRO", "schema": json.dumps(definition), "properties": {}})
    got = http("POST", f"{sidecar.http_url}/admin/v2/schemas/{path}/schema", body)
    assert got.status == 200, got.body


async def _ws_handshake(url: str) -> None:
    async with connect(url):
        pass


def test_schema_validation_enforced_refuses_producers_without_a_schema(
    sidecar: BinarySidecar, client: pulsar.Client
) -> None:
    namespace = _namespace(sidecar, schemaValidationEnforced=True)
    typed, untyped = (f"persistent://{namespace}/{name}" for name in ("typed", "untyped"))
    client.create_producer(typed, schema=AvroSchema(UserV1)).close()  # version 0
    with pytest.raises(pulsar.exceptions.IncompatibleSchema):
        client.create_producer(typed)
    # a WebSocket producer too (Pulsar's proxy produces without a schema): 409
    ws_typed = f"{sidecar.ws_url}/producer/persistent/{namespace}/typed"
    with pytest.raises(InvalidStatus) as info:
        run(_ws_handshake(ws_typed))
    assert info.value.response.status_code == 409
    reason = json.loads(info.value.response.body or b"{}")["reason"]
    assert reason.startswith("Failed to create producer: ") and "schemawhen" in reason
    run(_ws_handshake(f"{sidecar.ws_url}/producer/persistent/{namespace}/untyped"))
    # the schema's producers are served, and a topic without a schema takes any
    client.create_producer(typed, schema=AvroSchema(UserV1)).close()
    bare = client.create_producer(untyped)
    bare.send(b"raw")
    bare.close()
    # off again (the default): accepted
    base = f"{sidecar.http_url}/admin/v2/namespaces/{namespace}/schemaValidationEnforced"
    assert http("POST", base, "false").status == 204

    def accepted() -> bool:
        try:
            client.create_producer(typed).close()
        except pulsar.exceptions.IncompatibleSchema:
            return False
        return True

    wait_for(accepted, "schemaValidationEnforced=false applied", timeout_s=20, interval_s=0.1)


def test_without_auto_update_producers_use_the_uploaded_schema(
    sidecar: BinarySidecar, client: pulsar.Client
) -> None:
    namespace = _namespace(sidecar, isAllowAutoUpdateSchema=False)
    topic, idle = (f"persistent://{namespace}/{name}" for name in ("orders", "idle"))
    with pytest.raises(pulsar.exceptions.IncompatibleSchema):
        client.create_producer(topic, schema=AvroSchema(UserV1))  # nothing uploaded yet
    with pytest.raises(pulsar.exceptions.IncompatibleSchema):
        client.subscribe(idle, "s", schema=AvroSchema(UserV1))  # it would add version 0
    _upload(sidecar, topic, json.loads(AvroSchema(UserV1).schema_info().schema()))
    consumer = client.subscribe(
        topic, "s", schema=AvroSchema(UserV1), initial_position=pulsar.InitialPosition.Earliest
    )
    producer = client.create_producer(topic, schema=AvroSchema(UserV1))
    producer.send(UserV1(name="ada", count=1))
    msg = consumer.receive(timeout_millis=20_000)
    assert (_version(msg), msg.value().name) == (ZERO, "ada")
    with pytest.raises(pulsar.exceptions.IncompatibleSchema):
        client.create_producer(topic, schema=AvroSchema(UserV2))  # compatible, but new
    listed = _rest_schema(sidecar, topic, "schemas")["getSchemaResponses"]
    assert [v["version"] for v in listed] == [0]


#: The Avro schema the AUTO_PUBLISH test uploads.
USER = {
    "type": "record",
    "name": "User",
    "fields": [{"name": "name", "type": "string"}, {"name": "count", "type": "int"}],
}


def _avro(record: dict[str, Any]) -> str:
    out = io.BytesIO()
    schemaless_writer(out, parse_schema(USER), record)
    return out.getvalue().hex()


def test_java_auto_produce_bytes_gets_the_topics_schema(
    sidecar: BinarySidecar,
    client: pulsar.Client,
    classpath: str,
) -> None:
    """Java's ``Schema.AUTO_PRODUCE_BYTES()`` (AUTO_PUBLISH): GET_SCHEMA gives the producer
    the uploaded schema, its PRODUCER finds version 0 (in a namespace that allows no
    automatic update and refuses producers without a schema), the client refuses bytes that
    are not of that schema; on a topic without a schema it produces BYTES."""
    namespace = _namespace(sidecar, isAllowAutoUpdateSchema=False, schemaValidationEnforced=True)
    typed, untyped = (f"persistent://{namespace}/{name}" for name in ("typed", "untyped"))
    _upload(sidecar, typed, USER)
    consumer = client.subscribe(
        typed, "raw", initial_position=pulsar.InitialPosition.Earliest
    )  # BYTES: the records as sent
    good = _avro({"name": "ada", "count": 3})
    assert sidecar.server is not None
    asked = sidecar.server.trace.received_counts["GET_SCHEMA"]
    run = subprocess.run(
        ["java", "-cp", classpath, str(JAVA / "AutoProduce.java"), sidecar.broker_url,
         typed, f"{good},ffffffffff", untyped, "00ff"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-4000:]
    # without the message ids and exception names
    lines = [" ".join(line.split(" ")[:2]) for line in run.stdout.splitlines()]
    assert lines == [
        f"created {typed}", f"sent {typed}", f"refused {typed}",
        f"created {untyped}", f"sent {untyped}",
    ], run.stdout  # fmt: skip
    msg = consumer.receive(timeout_millis=20_000)
    assert (msg.data().hex(), _version(msg)) == (good, ZERO)
    assert _rest_schema(sidecar, typed)["version"] == 0  # nothing new registered
    # each producer asked for the topic's schema first
    assert sidecar.server.trace.received_counts["GET_SCHEMA"] >= asked + 2
