"""Pulsar's schema registry: a topic's history of schema versions, as one registry record.

Pulsar keeps, per topic (a partitioned topic's partitions share it), a list of schema
versions 0, 1, … (``SchemaRegistryServiceImpl`` over ``BookkeeperSchemaStorage``): each
holds a type, the schema data (for AVRO, JSON and PROTOBUF an Avro schema definition as JSON
text), properties, a timestamp and the user who wrote it. A soft delete appends a *deleted*
marker (type NONE, no data) and keeps the history; every read looks only at the versions
after the last marker (``trimDeletedSchemaAndGetList``), so after a delete the topic has no
schema, and the next upload gets the next version number. A forced delete drops the whole
history (numbering starts at 0 again).

Here that history is one registry record per base topic, ``schema/<canonical base topic>``
(:func:`schema_key`), written by the one fenced metadata writer
(:mod:`._schema_admin`) and read by every sidecar's
:class:`~sync.cluster._metadata.MetadataStore`. Its JSON names follow Pulsar's
``GetSchemaResponse`` and ``SchemaData``::

    {"topic": "persistent://t/ns/orders",
     "versions": [{"version": 0, "type": "AVRO", "data": "{…}", "properties": {},
                   "timestamp": 1700000000000, "user": "", "isDeleted": false}, …]}

The request body of an upload, a compatibility test and a version lookup is Pulsar's
``PostSchemaPayload`` (``{"type", "schema", "properties"}``), read by
:func:`parse_schema_payload`. How schemas are validated and compared is in
:mod:`._schema_compat`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from sync._constants import REGISTRY_KEY_SCHEMA
from sync._errors import BadRequestError, CodecError, UnprocessableError
from sync.naming._names import TopicName

from ._records import decode_json, encode_json

__all__ = [
    "PostSchemaPayload",
    "SchemaCompatibilityStrategy",
    "SchemaEntry",
    "SchemaHistory",
    "SchemaType",
    "parse_schema_payload",
    "schema_key",
]


class SchemaType(enum.StrEnum):
    """Pulsar's ``SchemaType`` (``pulsar-client-api``), by name as its REST API spells it."""

    NONE = "NONE"
    STRING = "STRING"
    JSON = "JSON"
    PROTOBUF = "PROTOBUF"
    AVRO = "AVRO"
    BOOLEAN = "BOOLEAN"
    INT8 = "INT8"
    INT16 = "INT16"
    INT32 = "INT32"
    INT64 = "INT64"
    FLOAT = "FLOAT"
    DOUBLE = "DOUBLE"
    DATE = "DATE"
    TIME = "TIME"
    TIMESTAMP = "TIMESTAMP"
    KEY_VALUE = "KEY_VALUE"
    INSTANT = "INSTANT"
    LOCAL_DATE = "LOCAL_DATE"
    LOCAL_TIME = "LOCAL_TIME"
    LOCAL_DATE_TIME = "LOCAL_DATE_TIME"
    PROTOBUF_NATIVE = "PROTOBUF_NATIVE"
    BYTES = "BYTES"
    AUTO = "AUTO"
    AUTO_CONSUME = "AUTO_CONSUME"
    AUTO_PUBLISH = "AUTO_PUBLISH"

    @property
    def avro_defined(self) -> bool:
        """Whether the data is an Avro definition (Pulsar's ``isUsingAvroSchemaParser``)."""
        return self in _AVRO_DEFINED


_AVRO_DEFINED = frozenset({SchemaType.AVRO, SchemaType.JSON, SchemaType.PROTOBUF})


class SchemaCompatibilityStrategy(enum.StrEnum):
    """Pulsar's ``SchemaCompatibilityStrategy``: which new versions a topic accepts.

    BACKWARD: the new schema reads data written with the existing one; FORWARD: the
    existing schema reads data written with the new one; FULL: both. Plain strategies
    check the latest version only, ``*_TRANSITIVE`` ones every version. UNDEFINED means
    "not set here": the broker's default, FULL (``schemaCompatibilityStrategy``).
    """

    UNDEFINED = "UNDEFINED"
    ALWAYS_INCOMPATIBLE = "ALWAYS_INCOMPATIBLE"
    ALWAYS_COMPATIBLE = "ALWAYS_COMPATIBLE"
    BACKWARD = "BACKWARD"
    FORWARD = "FORWARD"
    FULL = "FULL"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"

    @property
    def transitive(self) -> bool:
        """Checked against every version, not only the latest."""
        return self.name.endswith("_TRANSITIVE")

    def resolved(self) -> SchemaCompatibilityStrategy:
        """UNDEFINED as the broker's default (FULL); any other strategy itself."""
        return SchemaCompatibilityStrategy.FULL if self is self.UNDEFINED else self


def _java_text(value: Any) -> str | None:
    """A JSON scalar as Jackson binds it to a Java ``String`` (numbers and booleans as their
    text), or None for what it refuses (objects, arrays; null is left out here)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return None


def _properties(value: Any, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if isinstance(value, dict):
        texts = {str(k): _java_text(v) for k, v in value.items()}
        if all(t is not None for t in texts.values()):
            return {k: t for k, t in texts.items() if t is not None}
    raise BadRequestError(f"{what} must be a JSON object of strings")


@dataclass(frozen=True, slots=True)
class PostSchemaPayload:
    """Pulsar's ``PostSchemaPayload``: the body of an upload, a compatibility test and a
    version lookup."""

    type: SchemaType
    schema: str
    properties: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "properties", MappingProxyType(dict(self.properties)))


def parse_schema_payload(body: Any) -> PostSchemaPayload:
    """A ``PostSchemaPayload`` from a request body (already parsed JSON).

    Pulsar binds any object (unknown fields ignored, numbers and booleans in
    ``properties`` as their text) and fails later on a missing type or schema with a 500;
    here those are refused up front.

    Raises:
        BadRequestError: not an object; ``type`` or ``schema`` missing or not strings;
            ``properties`` not an object of strings, numbers or booleans (400).
        UnprocessableError: a type Pulsar does not know (422; Pulsar's
            ``SchemaType.valueOf`` fails with this text and a 500).
    """
    if not isinstance(body, dict):
        raise BadRequestError(
            'the body must be a schema payload: {"type": "AVRO", "schema": "…", "properties": {}}'
        )
    name = body.get("type")
    schema = body.get("schema")
    if not isinstance(name, str):
        raise BadRequestError("type must be a schema type name, e.g. AVRO")
    if not isinstance(schema, str):
        raise BadRequestError('schema must be a string (primitive types: "")')
    try:
        kind = SchemaType(name)
    except ValueError:
        raise UnprocessableError(
            f"No enum constant org.apache.pulsar.common.schema.SchemaType.{name}"
        ) from None
    return PostSchemaPayload(kind, schema, _properties(body.get("properties"), "properties"))


@dataclass(frozen=True, slots=True)
class SchemaEntry:
    """One version of a topic's schema (Pulsar's ``SchemaData`` with its version)."""

    version: int
    type: SchemaType
    data: str
    properties: Mapping[str, str] = field(default_factory=dict)
    #: Milliseconds since the epoch, when the version was written.
    timestamp: int = 0
    #: The role that wrote it ("" without authentication), Pulsar's ``user``.
    user: str = ""
    #: A soft delete's marker: the versions before it no longer count.
    deleted: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "properties", MappingProxyType(dict(self.properties)))

    def response(self) -> dict[str, Any]:
        """Pulsar's ``GetSchemaResponse``."""
        return {
            "version": self.version,
            "type": self.type.value,
            "timestamp": self.timestamp,
            "data": self.data,
            "properties": dict(sorted(self.properties.items())),
        }

    def to_dict(self) -> dict[str, Any]:
        return {**self.response(), "user": self.user, "isDeleted": self.deleted}

    @classmethod
    def from_dict(cls, d: Any) -> SchemaEntry:
        if not isinstance(d, dict):
            raise CodecError("schema history: a version must be an object")
        try:
            return cls(
                version=_int(d["version"]),
                type=SchemaType(d["type"]),
                data=_str(d["data"]),
                properties=_properties(d.get("properties"), "properties"),
                timestamp=_int(d.get("timestamp", 0)),
                user=_str(d.get("user", "")),
                deleted=d.get("isDeleted", False) is True,
            )
        except (KeyError, ValueError, TypeError, BadRequestError) as exc:
            raise CodecError(f"schema history: bad version {d!r}: {exc}") from exc


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {value!r}")
    return value


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class SchemaHistory:
    """Every schema version of one base topic, oldest first (version i at index i)."""

    #: The canonical base topic.
    topic: str
    versions: tuple[SchemaEntry, ...] = ()

    @property
    def next_version(self) -> int:
        """The version the next write gets."""
        return len(self.versions)

    @property
    def live(self) -> tuple[SchemaEntry, ...]:
        """The versions after the last deleted marker (Pulsar's
        ``trimDeletedSchemaAndGetList``): what reads and compatibility checks see."""
        for i in range(len(self.versions) - 1, -1, -1):
            if self.versions[i].deleted:
                return self.versions[i + 1 :]
        return self.versions

    @property
    def latest(self) -> SchemaEntry | None:
        """The latest version, or None when there is none or it is a deleted marker."""
        if not self.versions or self.versions[-1].deleted:
            return None
        return self.versions[-1]

    def get(self, version: int) -> SchemaEntry | None:
        """Version ``version`` if it is live (deleted ones are gone, as in Pulsar)."""
        for entry in self.live:
            if entry.version == version:
                return entry
        return None

    def appended(self, entry: SchemaEntry) -> SchemaHistory:
        """This history with ``entry`` as its next version."""
        if entry.version != self.next_version:
            raise ValueError(f"version {entry.version} is not the next ({self.next_version})")
        return SchemaHistory(self.topic, (*self.versions, entry))

    def to_json(self) -> bytes:
        """The record's value in the registry topic."""
        return encode_json({"topic": self.topic, "versions": [v.to_dict() for v in self.versions]})

    @classmethod
    def from_json(cls, raw: bytes) -> SchemaHistory:
        """Decode a value written by :meth:`to_json`.

        Raises:
            CodecError: not a schema history, or its versions are not 0, 1, … in order.
        """
        d = decode_json(raw, "schema history")
        topic = d.get("topic")
        versions = d.get("versions")
        if not isinstance(topic, str) or not isinstance(versions, list):
            raise CodecError("schema history: needs a topic and a list of versions")
        entries = tuple(SchemaEntry.from_dict(v) for v in versions)
        if [e.version for e in entries] != list(range(len(entries))):
            raise CodecError(f"schema history of {topic}: versions are not 0, 1, … in order")
        return cls(topic, entries)


def schema_key(topic: TopicName) -> str:
    """Registry key of ``topic``'s schema history (a partition: its partitioned topic's)."""
    return f"{REGISTRY_KEY_SCHEMA}{topic.base.canonical}"
