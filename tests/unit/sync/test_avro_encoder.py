"""The compiled encoder writes exactly the bytes fastavro writes (randomized documents)."""

from __future__ import annotations

import datetime as dt
import io
import random
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_writer

from sync import Codec, CodecError
from sync.policy._avro_encoder import compile_encoder


def _random_value(schema: Any, rng: random.Random, named: dict[str, Any]) -> Any:
    if isinstance(schema, list):
        return None if rng.random() < 0.5 else _random_value(schema[1], rng, named)
    if isinstance(schema, str):
        schema = named.get(schema, {"type": schema})
    kind = schema["type"]
    if isinstance(kind, dict | list):
        return _random_value(kind, rng, named)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "int":
        return rng.choice([0, 1, -1, 63, 64, -65, 2**31 - 1, -(2**31), rng.randint(-9999, 9999)])
    if kind == "long":
        return rng.choice([0, 2**63 - 1, -(2**63), rng.randint(-(2**40), 2**40)])
    if kind == "double":
        return rng.uniform(-1e6, 1e6)
    if kind == "string":
        size = rng.choice([rng.randint(0, 12), rng.randint(60, 100)])  # 1- and 2-byte lengths
        return "".join(rng.choice("aZ9-_é日😀") for _ in range(size))
    if kind == "enum":
        named[schema["name"]] = schema
        return rng.choice(schema["symbols"])
    if kind == "array":
        return [_random_value(schema["items"], rng, named) for _ in range(rng.randint(0, 3))]
    if kind == "map":
        return {
            f"k{i}": _random_value(schema["values"], rng, named) for i in range(rng.randint(0, 3))
        }
    if kind == "record":
        named[schema["name"]] = schema
        return {f["name"]: _random_value(f["type"], rng, named) for f in schema["fields"]}
    raise AssertionError(kind)


def _named_types(node: Any, found: dict[str, Any]) -> dict[str, Any]:
    if isinstance(node, dict):
        if node.get("type") in ("record", "enum", "fixed") and "name" in node:
            found[node["name"]] = node
        for value in node.values():
            _named_types(value, found)
    elif isinstance(node, list):
        for value in node:
            _named_types(value, found)
    return found


def test_matches_fastavro_byte_for_byte_on_random_events() -> None:
    codec = Codec()
    schema = codec.current.parsed
    encode = compile_encoder(schema)
    named = _named_types(schema, {})
    rng = random.Random(20261122)
    for _ in range(3000):
        datum = _random_value(schema, rng, named)
        ref = io.BytesIO()
        schemaless_writer(ref, schema, datum)
        assert encode(datum, b"") == ref.getvalue()


def test_missing_fields_take_defaults_like_fastavro() -> None:
    schema = parse_schema(
        {
            "type": "record",
            "name": "R",
            "fields": [
                {"name": "a", "type": ["null", "int"], "default": None},
                {"name": "b", "type": "int", "default": 7},
                {"name": "c", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            ],
        }
    )
    when = dt.datetime(2026, 11, 22, 8, 0, 0, 123000, tzinfo=dt.UTC)
    ref = io.BytesIO()
    schemaless_writer(ref, schema, {"c": when})
    assert compile_encoder(schema)({"c": when}, b"") == ref.getvalue()


def test_required_fields_and_foreign_values_are_codec_errors() -> None:
    schema = parse_schema(
        {
            "type": "record",
            "name": "R",
            "fields": [
                {"name": "s", "type": "string"},
                {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}},
            ],
        }
    )
    encode = compile_encoder(schema)
    assert encode({"s": "x", "e": "B"}, b"") == b"\x02x\x02"
    for bad, why in [
        ({"e": "A"}, "R.s is required"),
        ({"s": 1, "e": "A"}, "expected a string"),
        ({"s": "x", "e": "C"}, "not a symbol of E"),
        ({"s": "x", "e": ["A"]}, "not a symbol of E"),
        ([], "needs a mapping"),
    ]:
        with pytest.raises(CodecError, match=why):
            encode(bad, b"")


@pytest.mark.parametrize(
    "policies",
    [
        {"maxConsumerPerTopic": "5"},
        {"maxConsumerPerTopic": 2**31},
        {"deduplicationEnabled": 1},
        {"subscriptionTypesEnabled": ["Nope"]},
        {"dispatchRate": 3},
    ],
)
def test_wrong_types_are_codec_errors(policies: dict[str, Any]) -> None:
    event = {
        "eventType": "TOPIC_POLICY",
        "actionType": "UPDATE",
        "topicPoliciesEvent": {"tenant": "t", "namespace": "n", "policies": policies},
    }
    with pytest.raises(CodecError, match="does not fit the ChangeEvent schema"):
        Codec().encode(event)
