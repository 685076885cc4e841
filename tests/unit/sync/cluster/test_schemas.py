"""Pulsar's schema registry, without Kafka: the history record, validation, identity and
every compatibility strategy on Avro pairs (the REST API over the in-memory twin:
``tests/unit/broker_shim/test_schemas_http.py``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from sync._errors import BadRequestError, CodecError, ConflictError, UnprocessableError
from sync.cluster import (
    PostSchemaPayload,
    SchemaCompatibilityStrategy,
    SchemaEntry,
    SchemaHistory,
    SchemaType,
    parse_schema_payload,
    validate_schema_data,
)
from sync.cluster._schema_compat import (
    _pretty,
    check_compatible,
    check_consumer_compatible,
    find_identical,
    find_same_bytes,
    parse_avro,
)
from sync.cluster._schemas import schema_key
from sync.naming._names import TopicName

S = SchemaCompatibilityStrategy


def record(*fields: Mapping[str, object], name: str = "User") -> str:
    """An Avro record definition with ``fields``."""
    return json.dumps({"type": "record", "name": name, "fields": list(fields)})


ID = {"name": "id", "type": "long"}
V1 = record(ID)
#: a field added with a default: old data reads with the new schema, new with the old
WITH_DEFAULT = record(ID, {"name": "email", "type": "string", "default": ""})
#: a field added without a default: the new schema cannot read old data
WITHOUT_DEFAULT = record(ID, {"name": "email", "type": "string"})
#: a field's type changed to one neither side promotes to
RETYPED = record({"name": "id", "type": "string"})
#: an age field with a default instead of the email
V3 = record(ID, {"name": "age", "type": "int", "default": 0})


def avro(definition: str) -> PostSchemaPayload:
    return PostSchemaPayload(SchemaType.AVRO, definition)


def live(*definitions: str) -> list[SchemaEntry]:
    return [SchemaEntry(i, SchemaType.AVRO, d) for i, d in enumerate(definitions)]


def test_history_round_trips_in_pulsar_like_json() -> None:
    topic = TopicName.parse("persistent://acme/app/orders-partition-2")
    assert schema_key(topic) == "schema/persistent://acme/app/orders"
    history = SchemaHistory(topic.base.canonical).appended(
        SchemaEntry(0, SchemaType.AVRO, V1, {"owner": "billing"}, 1_700_000_000_000, "alice")
    )
    history = history.appended(SchemaEntry(1, SchemaType.NONE, "", {}, 1_700_000_000_001, "", True))
    assert SchemaHistory.from_json(history.to_json()) == history
    assert json.loads(history.to_json())["versions"][0] == {
        "version": 0,
        "type": "AVRO",
        "data": V1,
        "properties": {"owner": "billing"},
        "timestamp": 1_700_000_000_000,
        "user": "alice",
        "isDeleted": False,
    }
    # a soft delete hides every earlier version; the next write gets version 2
    assert history.live == () and history.latest is None and history.get(0) is None
    assert history.next_version == 2
    assert history.versions[0].response() == {
        "version": 0,
        "type": "AVRO",
        "timestamp": 1_700_000_000_000,
        "data": V1,
        "properties": {"owner": "billing"},
    }


@pytest.mark.parametrize(
    "raw",
    [
        b"[]",
        b'{"topic": "t"}',
        b'{"topic": "t", "versions": [{"version": 1, "type": "AVRO", "data": ""}]}',
        b'{"topic": "t", "versions": [{"version": 0, "type": "WEIRD", "data": ""}]}',
        b'{"topic": "t", "versions": [{"version": 0, "type": "AVRO", "data": 5}]}',
    ],
)
def test_bad_history_records_are_codec_errors(raw: bytes) -> None:
    with pytest.raises(CodecError):
        SchemaHistory.from_json(raw)


def test_payloads_are_pulsars_post_schema_payload() -> None:
    body = {"type": "AVRO", "schema": V1, "properties": {"a": "b"}, "unknown": 1}
    assert parse_schema_payload(body) == PostSchemaPayload(SchemaType.AVRO, V1, {"a": "b"})
    # Jackson binds numbers and booleans to a String property as their text
    body = {"type": "STRING", "schema": "", "properties": {"n": 1, "f": 1.5, "b": False}}
    expected = PostSchemaPayload(SchemaType.STRING, "", {"n": "1", "f": "1.5", "b": "false"})
    assert parse_schema_payload(body) == expected
    bad_bodies: list[Any] = [None, [], {"schema": ""}, {"type": "AVRO"},
                             {"type": 4, "schema": ""},
                             {"type": "AVRO", "schema": "", "properties": {"a": None}},
                             {"type": "AVRO", "schema": "", "properties": {"a": [1]}},
                             {"type": "AVRO", "schema": "", "properties": []}]  # fmt: skip
    for bad in bad_bodies:
        with pytest.raises(BadRequestError):
            parse_schema_payload(bad)
    with pytest.raises(UnprocessableError, match="No enum constant .*SchemaType.PICKLE"):
        parse_schema_payload({"type": "PICKLE", "schema": ""})


@pytest.mark.parametrize(
    ("kind", "data", "reason"),
    [
        (SchemaType.AVRO, "{not json", "^Invalid schema definition data for AVRO schema$"),
        (SchemaType.AVRO, '{"type": "record", "name": "U"}', "Invalid schema definition data"),
        (SchemaType.JSON, '"nope"', "Invalid schema definition data for JSON schema"),
        (SchemaType.AVRO, '["null", "string"]', "Avro schema typed [UNION] is not supported"),
        (SchemaType.STRING, "x", "Invalid schema definition data for string schema : 'x'"),
        (SchemaType.INT32, "ab", "should be zero, but 2 bytes is found"),
        (SchemaType.AUTO_CONSUME, "", "Schema AUTO_CONSUME is a client-side schema type"),
    ],
)
def test_invalid_schema_data_is_refused_as_pulsar(kind: SchemaType, data: str, reason: str) -> None:
    with pytest.raises(UnprocessableError, match=reason.replace("[", r"\[").replace("]", r"\]")):
        validate_schema_data(PostSchemaPayload(kind, data))


def test_valid_schema_data() -> None:
    for kind, data in [(SchemaType.AVRO, V1), (SchemaType.JSON, '["null", "string"]'),
                       (SchemaType.STRING, ""), (SchemaType.STRING, "null"),
                       (SchemaType.INT64, ""), (SchemaType.BYTES, "anything"),
                       (SchemaType.PROTOBUF, V1)]:  # fmt: skip
        validate_schema_data(PostSchemaPayload(kind, data))


def test_identity_of_an_upload_and_of_a_version_lookup() -> None:
    versions = live(V1, WITH_DEFAULT)
    # the same Avro schema written differently (spacing, a doc) is the same version ...
    reformatted = json.dumps(json.loads(WITH_DEFAULT), indent=4)
    documented = record(ID, {"name": "email", "type": "string", "default": "", "doc": "mail"})
    for same in (WITH_DEFAULT, reformatted, documented):
        found = find_identical(versions, avro(same))
        assert found is not None and found.version == 1
    # ... for an upload; a version lookup compares the bytes
    found = find_same_bytes(versions, avro(WITH_DEFAULT))
    assert found is not None and found.version == 1
    assert find_same_bytes(versions, avro(reformatted)) is None
    # another type with the same data is another schema
    assert find_identical(versions, PostSchemaPayload(SchemaType.JSON, V1)) is None
    strings = [SchemaEntry(0, SchemaType.STRING, "")]
    assert find_identical(strings, PostSchemaPayload(SchemaType.STRING, "")) == strings[0]


#: strategy -> (compatible new schema, incompatible new schema), against V1
PAIRS = {
    S.BACKWARD: (WITH_DEFAULT, WITHOUT_DEFAULT),
    S.FORWARD: (WITHOUT_DEFAULT, RETYPED),
    S.FULL: (WITH_DEFAULT, WITHOUT_DEFAULT),
    S.UNDEFINED: (WITH_DEFAULT, WITHOUT_DEFAULT),  # the broker's default: FULL
    S.ALWAYS_COMPATIBLE: (RETYPED, None),
    S.ALWAYS_INCOMPATIBLE: (None, WITH_DEFAULT),
    S.BACKWARD_TRANSITIVE: (WITH_DEFAULT, WITHOUT_DEFAULT),
    S.FORWARD_TRANSITIVE: (WITHOUT_DEFAULT, RETYPED),
    S.FULL_TRANSITIVE: (WITH_DEFAULT, RETYPED),
}


@pytest.mark.parametrize("strategy", list(S))
def test_every_strategy_on_avro_pairs(strategy: SchemaCompatibilityStrategy) -> None:
    compatible, incompatible = PAIRS[strategy]
    if compatible is not None:
        check_compatible(live(V1), avro(compatible), strategy)
    if incompatible is not None:
        with pytest.raises(ConflictError) as caught:
            check_compatible(live(V1), avro(incompatible), strategy)
        assert str(caught.value).startswith(
            f"Error during schema compatibility check with strategy {strategy.resolved()}: "
            "org.apache.avro.SchemaValidationException: Unable to read schema: \n"
        )
    # nothing to check against: anything goes, even under ALWAYS_INCOMPATIBLE
    check_compatible([], avro(RETYPED), strategy)


def test_incompatible_schemas_are_printed_as_avro_java_prints_them() -> None:
    """The reason names both schemas as Pulsar's does (Avro Java's ``toString(true)``:
    Jackson's pretty printer, Java's key order): recorded from Pulsar 4.0.7."""
    ns_record = {"type": "record", "name": "User", "namespace": "compat"}
    old = json.dumps({**ns_record, "fields": [ID, {"name": "name", "type": "string",
                                                   "default": ""}]})  # fmt: skip
    new = json.dumps({**ns_record, "fields": [{"name": "name", "type": "string", "default": ""}]})
    with pytest.raises(ConflictError) as caught:
        check_compatible(live(old), avro(new), S.FORWARD)
    assert str(caught.value) == (
        "Error during schema compatibility check with strategy FORWARD: "
        "org.apache.avro.SchemaValidationException: Unable to read schema: \n"
        '{\n  "type" : "record",\n  "name" : "User",\n  "namespace" : "compat",\n'
        '  "fields" : [ {\n    "name" : "name",\n    "type" : "string",\n'
        '    "default" : ""\n  } ]\n}\nusing schema:\n'
        '{\n  "type" : "record",\n  "name" : "User",\n  "namespace" : "compat",\n'
        '  "fields" : [ {\n    "name" : "id",\n    "type" : "long"\n  }, {\n'
        '    "name" : "name",\n    "type" : "string",\n    "default" : ""\n  } ]\n}'
    )


def test_nested_named_types_print_relative_to_their_namespace() -> None:
    nested = {
        "type": "record",
        "name": "A",
        "fields": [{"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["X", "Y"]}}],
    }
    other = {
        "type": "record",
        "name": "O",
        "namespace": "other",
        "fields": [{"name": "back", "type": "compat.A"}],
    }
    schema = json.dumps({"type": "record", "name": "User", "namespace": "compat", "fields": [
        {"name": "a", "type": nested}, {"name": "b", "type": "A"},
        {"name": "u", "type": ["null", "E"], "default": None},
        {"name": "o", "type": other}]})  # fmt: skip
    assert _pretty(parse_avro(schema)) == (
        '{\n  "type" : "record",\n  "name" : "User",\n  "namespace" : "compat",\n'
        '  "fields" : [ {\n    "name" : "a",\n    "type" : {\n      "type" : "record",\n'
        '      "name" : "A",\n      "fields" : [ {\n        "name" : "e",\n'
        '        "type" : {\n          "type" : "enum",\n          "name" : "E",\n'
        '          "symbols" : [ "X", "Y" ]\n        }\n      } ]\n    }\n  }, {\n'
        '    "name" : "b",\n    "type" : "A"\n  }, {\n    "name" : "u",\n'
        '    "type" : [ "null", "E" ],\n    "default" : null\n  }, {\n    "name" : "o",\n'
        '    "type" : {\n      "type" : "record",\n      "name" : "O",\n'
        '      "namespace" : "other",\n      "fields" : [ {\n        "name" : "back",\n'
        '        "type" : "compat.A"\n      } ]\n    }\n  } ]\n}'
    )


def test_transitive_strategies_check_every_version_plain_ones_the_latest() -> None:
    # version 0 had a string id; version 1 (V1) a long one: V3 and WITH_DEFAULT agree
    # with the latest version, not with version 0
    history = live(RETYPED, V1)
    for plain in (S.BACKWARD, S.FORWARD, S.FULL):
        check_compatible(history, avro(V3), plain)
        check_compatible(history, avro(WITH_DEFAULT), plain)
        transitive = S(f"{plain}_TRANSITIVE")
        with pytest.raises(ConflictError, match=f"with strategy {transitive}: "):
            check_compatible(history, avro(V3), transitive)
    # a soft delete starts over: only the versions after it count (SchemaHistory.live)
    deleted = SchemaHistory("persistent://a/b/c")
    for entry in [*history, SchemaEntry(2, SchemaType.NONE, "", deleted=True)]:
        deleted = deleted.appended(entry)
    check_compatible(deleted.live, avro(RETYPED), S.FULL_TRANSITIVE)


def test_other_types_compare_by_type_and_strategy() -> None:
    strings = [SchemaEntry(0, SchemaType.STRING, "")]
    check_compatible(strings, PostSchemaPayload(SchemaType.STRING, ""), S.FULL)
    with pytest.raises(ConflictError, match="exists schema type STRING, new schema type INT32"):
        check_compatible(strings, PostSchemaPayload(SchemaType.INT32, ""), S.FULL)
    with pytest.raises(ConflictError, match="exists schema type AVRO, new schema type JSON"):
        check_compatible(live(V1), PostSchemaPayload(SchemaType.JSON, V1), S.FULL_TRANSITIVE)
    check_compatible(strings, PostSchemaPayload(SchemaType.INT32, ""), S.ALWAYS_COMPATIBLE)
    # PROTOBUF (an Avro definition, checked by Pulsar's default check): any change passes
    protobuf = [SchemaEntry(0, SchemaType.PROTOBUF, V1)]
    check_compatible(protobuf, PostSchemaPayload(SchemaType.PROTOBUF, RETYPED), S.FULL)
    with pytest.raises(ConflictError, match="Schema compatibility strategy is ALWAYS_INCOMPATIBLE"):
        check_compatible(protobuf, PostSchemaPayload(SchemaType.PROTOBUF, RETYPED),
                         S.ALWAYS_INCOMPATIBLE)  # fmt: skip


def test_a_consumer_must_read_the_latest_version_checked_as_backward() -> None:
    # Pulsar's checkConsumerCompatibility: under FULL the consumer's schema only has to
    # read the latest version's data (BACKWARD): a schema FULL refuses as an upload passes
    check_consumer_compatible(live(WITHOUT_DEFAULT), avro(V1), S.FULL)
    with pytest.raises(ConflictError, match="^Error during schema compatibility check with "
                       "strategy BACKWARD: org.apache.avro.SchemaValidationException"):  # fmt: skip
        check_consumer_compatible(live(V1), avro(WITHOUT_DEFAULT), S.FULL)
    # the latest only, and the identical schema passes
    for strategy in (S.BACKWARD, S.FORWARD, S.FORWARD_TRANSITIVE, S.FULL, S.UNDEFINED):
        check_consumer_compatible(live(RETYPED, V1), avro(WITH_DEFAULT), strategy)
        check_consumer_compatible(live(V1), avro(V1), strategy)
    # the other strategies check every live version, under themselves
    with pytest.raises(ConflictError, match="with strategy FULL_TRANSITIVE: "):
        check_consumer_compatible(live(RETYPED, V1), avro(V1), S.FULL_TRANSITIVE)
    with pytest.raises(ConflictError, match="with strategy ALWAYS_INCOMPATIBLE: "):
        check_consumer_compatible(live(V1), avro(V1), S.ALWAYS_INCOMPATIBLE)
    # another type, at any strategy but ALWAYS_COMPATIBLE
    string = PostSchemaPayload(SchemaType.STRING, "null")
    for strategy in (S.FULL, S.BACKWARD_TRANSITIVE):
        with pytest.raises(ConflictError) as caught:
            check_consumer_compatible(live(V1), string, strategy)
        assert (
            str(caught.value)
            == "Incompatible schema: exists schema type AVRO, new schema type STRING"
        )
    check_consumer_compatible(live(V1), string, S.ALWAYS_COMPATIBLE)


def test_a_consumer_schema_on_an_active_topic_without_one() -> None:
    with pytest.raises(ConflictError) as caught:
        check_consumer_compatible([], avro(V1), S.FULL)
    assert str(caught.value) == (
        "Failed to add schema to an active topic with empty(BYTES) schema: new schema type AVRO"
    )
    check_consumer_compatible([], avro(V1), S.ALWAYS_COMPATIBLE)  # anything goes
