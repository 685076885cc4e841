"""The change-event schemas in the form Spark's ``from_avro`` takes them.

``from_avro`` needs one self-contained schema JSON: the ``.avsc`` files reference each
other by name, so each version is expanded with fastavro's ``load_schema`` (every named
type is defined at its first use and referenced by name afterwards, which is valid Avro
JSON for Java's parser too).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastavro.schema import load_schema

from sync._errors import ConfigurationError
from sync.policy._codec import Codec

__all__ = ["SchemaVersionJson", "SparkSchemas"]

#: Derived from the key (``__G__`` prefix or not); the audit leaves it out of diffs.
_SCOPE_FIELD = "isGlobal"


@dataclass(frozen=True, slots=True)
class SchemaVersionJson:
    """One writer schema: its name ("current", "v1", ...), fingerprint and expanded JSON."""

    name: str
    fingerprint: bytes
    json: str


def _expanded(path: Path) -> dict[str, Any]:
    raw = load_schema(str(path), _write_hint=False)
    if not isinstance(raw, dict):
        raise ConfigurationError(f"{path} is not an Avro record schema")
    return raw


def _find_record(node: Any, name: str) -> dict[str, Any] | None:
    if isinstance(node, dict):
        if node.get("type") == "record" and str(node.get("name", "")).split(".")[-1] == name:
            return node
        for value in node.values():
            found = _find_record(value, name)
            if found is not None:
                return found
    elif isinstance(node, list):
        for value in node:
            found = _find_record(value, name)
            if found is not None:
                return found
    return None


def _is_map(avro_type: Any) -> bool:
    if isinstance(avro_type, list):
        return any(_is_map(t) for t in avro_type)
    return isinstance(avro_type, dict) and avro_type.get("type") == "map"


@dataclass(frozen=True, slots=True)
class SparkSchemas:
    """Every known writer schema, the reader (current) schema, and the policy fields."""

    versions: tuple[SchemaVersionJson, ...]
    reader_json: str
    #: TopicPolicies fields the audit diffs, in schema order (``isGlobal`` excluded).
    policy_fields: tuple[str, ...]
    #: The subset of ``policy_fields`` that are Avro maps (compared order-insensitively).
    map_fields: frozenset[str]

    @classmethod
    def load(cls, codec: Codec | None = None) -> SparkSchemas:
        """From the schema files the codec knows (``schemas/`` and ``schemas/history/*``)."""
        codec = codec or Codec()
        versions = tuple(
            SchemaVersionJson(v.name, fp, json.dumps(_expanded(v.path)))
            for fp, v in codec.versions.items()
        )
        reader = _expanded(codec.current.path)
        policies = _find_record(reader, "TopicPolicies")
        if policies is None:
            raise ConfigurationError(f"{codec.current.path} has no TopicPolicies record")
        fields = tuple(f["name"] for f in policies["fields"] if f["name"] != _SCOPE_FIELD)
        maps = frozenset(f["name"] for f in policies["fields"] if _is_map(f["type"]))
        return cls(versions, json.dumps(reader), fields, maps)
