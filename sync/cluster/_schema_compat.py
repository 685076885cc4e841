"""How Pulsar's schema registry validates a schema, tells two schemas apart and decides
whether a new version is compatible (what :mod:`._schema_admin` applies).

Validation (Pulsar's ``SchemaDataValidator``, before anything is stored or checked; a
refusal is ``InvalidSchemaDataException``, answered 422 by the REST API):

* AVRO, JSON, PROTOBUF: the data must parse as an Avro definition
  (``StructSchemaDataValidator``); an AVRO schema must not be a union;
* STRING: no data (or the Python client's ``"null"``); the other primitive types
  (BOOLEAN … LOCAL_DATE_TIME): no data (``PrimitiveSchemaDataValidator``);
* NONE, BYTES: anything; AUTO, AUTO_CONSUME, AUTO_PUBLISH: refused (client-side types).

Identity (``putSchemaIfAbsent`` → ``getSchemaVersionBySchemaData``): an upload equal to a
live version returns that version instead of adding one. For AVRO, JSON and PROTOBUF equal
means the same type and equal parsed Avro schemas (Avro Java's ``Schema.equals``, which
ignores ``doc`` and ``aliases``); for the others the same type and the same bytes. A
version lookup (``findSchemaVersion``) always compares type and bytes.

Compatibility (``checkCompatible``, ``checkCompatibilityWithLatest`` /
``checkCompatibilityWithAll``, ``AvroSchemaBasedCompatibilityCheck``,
``SchemaCompatibilityCheck.DEFAULT``): nothing to check against: compatible.
ALWAYS_COMPATIBLE: compatible. Otherwise a version of another type is incompatible; an
identical one (type and bytes) is compatible; AVRO and JSON are checked with Avro schema
resolution (:class:`avro.compatibility.ReaderWriterCompatibilityChecker`, which is Avro
Java's ``SchemaCompatibility``, as Pulsar's ``SchemaValidatorBuilder`` uses it); any other
type is compatible unless the strategy is ALWAYS_INCOMPATIBLE. Not done here: Pulsar's
per-component check of KEY_VALUE schemas and its descriptor check of PROTOBUF_NATIVE ones
(both are compared as the other types are), and JSON schemas in the pre-2.x Jackson
``JsonSchema`` format (refused as invalid).

A consumer's schema (``checkConsumerCompatibility``, for the binary protocol's SUBSCRIBE)
is checked without being stored: see :func:`check_consumer_compatible`.

Refusals are :class:`~sync._errors.ConflictError` (Pulsar's ``IncompatibleSchemaException``,
409) and :class:`~sync._errors.UnprocessableError` (422), with Pulsar's texts.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

import avro.errors
import avro.schema
from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType
from avro.schema import Schema

from sync._errors import ConflictError, UnprocessableError

from ._schemas import PostSchemaPayload, SchemaCompatibilityStrategy, SchemaEntry, SchemaType

logger = logging.getLogger(__name__)

__all__ = [
    "check_compatible",
    "check_consumer_compatible",
    "find_identical",
    "find_same_bytes",
    "parse_avro",
    "validate_schema_data",
]

_PRIMITIVES = frozenset(
    {
        SchemaType.BOOLEAN,
        SchemaType.INT8,
        SchemaType.INT16,
        SchemaType.INT32,
        SchemaType.INT64,
        SchemaType.FLOAT,
        SchemaType.DOUBLE,
        SchemaType.DATE,
        SchemaType.TIME,
        SchemaType.TIMESTAMP,
        SchemaType.INSTANT,
        SchemaType.LOCAL_DATE,
        SchemaType.LOCAL_TIME,
        SchemaType.LOCAL_DATE_TIME,
    }
)
_CLIENT_SIDE = frozenset({SchemaType.AUTO, SchemaType.AUTO_CONSUME, SchemaType.AUTO_PUBLISH})
#: The types Pulsar checks with Avro schema resolution (its default checkers).
_AVRO_CHECKED = frozenset({SchemaType.AVRO, SchemaType.JSON})
#: The exceptions the Avro parser raises on a bad definition (TypeError and friends: on
#: JSON of a shape it does not expect).
_PARSE_ERRORS = (avro.errors.AvroException, TypeError, ValueError, AttributeError, RecursionError)


class SchemaParseError(Exception):
    """An Avro definition that does not parse."""


def parse_avro(data: str) -> Schema:
    """``data`` as an Avro schema.

    Raises:
        SchemaParseError: it does not parse.
    """
    try:
        return avro.schema.parse(data)
    except _PARSE_ERRORS as exc:
        raise SchemaParseError(str(exc) or type(exc).__name__) from exc


def validate_schema_data(payload: PostSchemaPayload) -> None:
    """Refuse schema data Pulsar's ``SchemaDataValidator`` refuses.

    Raises:
        UnprocessableError: with Pulsar's reason (its ``InvalidSchemaDataException``; for a
            bad Avro definition the parser's detail is its cause, logged, not its text).
    """
    kind, data = payload.type, payload.schema
    if kind.avro_defined:
        try:
            parsed = parse_avro(data)
        except SchemaParseError as exc:
            logger.debug("invalid %s schema definition: %s", kind, exc)
            raise UnprocessableError(f"Invalid schema definition data for {kind} schema") from exc
        if kind is SchemaType.AVRO and parsed.type == "union":
            raise UnprocessableError("Avro schema typed [UNION] is not supported")
    elif kind is SchemaType.STRING:
        if data and data != "null":  # the Python client sends "null"
            raise UnprocessableError(f"Invalid schema definition data for string schema : '{data}'")
    elif kind in _PRIMITIVES:
        size = len(data.encode("utf-8"))
        if size:
            raise UnprocessableError(
                "Invalid schema definition data for primitive schemas :length of schema data "
                f"should be zero, but {size} bytes is found"
            )
    elif kind in _CLIENT_SIDE:
        raise UnprocessableError(f"Schema {kind} is a client-side schema type")


def _without_docs(value: Any) -> Any:
    """A parsed schema's JSON without what Avro Java's ``Schema.equals`` ignores."""
    if isinstance(value, dict):
        return {k: _without_docs(v) for k, v in value.items() if k not in ("doc", "aliases")}
    if isinstance(value, list):
        return [_without_docs(v) for v in value]
    return value


def _avro_equal(a: str, b: str) -> bool:
    try:
        left, right = parse_avro(a).to_json(), parse_avro(b).to_json()
        return bool(_without_docs(left) == _without_docs(right))
    except SchemaParseError:
        return a == b


def find_identical(live: Sequence[SchemaEntry], payload: PostSchemaPayload) -> SchemaEntry | None:
    """The live version an upload of ``payload`` is (Pulsar's
    ``getSchemaVersionBySchemaData``), if any."""
    for entry in live:
        if entry.type is not payload.type:
            continue
        if payload.type.avro_defined and entry.type.avro_defined:
            if _avro_equal(entry.data, payload.schema):
                return entry
        elif entry.data == payload.schema:
            return entry
    return None


def find_same_bytes(live: Sequence[SchemaEntry], payload: PostSchemaPayload) -> SchemaEntry | None:
    """The first live version of the same type and bytes (Pulsar's ``findSchemaVersion``)."""
    for entry in live:
        if entry.type is payload.type and entry.data == payload.schema:
            return entry
    return None


_NAMED = frozenset({"record", "error", "enum", "fixed"})
#: The keys Avro Java writes first, in its order, per kind of schema (``Schema.toJson``);
#: any other property follows them (aliases last, as Java writes them).
_KEY_ORDER = {
    "record": ("type", "name", "namespace", "doc", "fields"),
    "error": ("type", "name", "namespace", "doc", "fields"),
    "enum": ("type", "name", "namespace", "doc", "symbols", "default"),
    "fixed": ("type", "name", "namespace", "doc", "size"),
    "array": ("type", "items"),
    "map": ("type", "values"),
}
_FIELD_ORDER = ("name", "type", "doc", "default", "order")


def _ordered_keys(node: dict[str, Any], first: Sequence[str]) -> list[str]:
    rest = [k for k in node if k not in first and k != "aliases"]
    return [k for k in first if k in node] + rest + (["aliases"] if "aliases" in node else [])


def _java_field(field: dict[str, Any], space: str | None) -> dict[str, Any]:
    return {
        k: _java_json(field[k], space) if k == "type" else field[k]
        for k in _ordered_keys(field, _FIELD_ORDER)
    }


def _java_json(node: Any, space: str | None) -> Any:
    """A parsed schema's JSON (``Schema.to_json``) as Avro Java writes it, inside namespace
    ``space``: its keys in Java's order, a namespace only where it differs from the
    enclosing one, and references to named types by their name relative to it."""
    if isinstance(node, list):  # a union
        return [_java_json(v, space) for v in node]
    if isinstance(node, str):  # a primitive, or a reference to a named type
        namespace, _, name = node.rpartition(".")
        return name if namespace and namespace == space else node
    kind = str(node.get("type"))
    inner = (node.get("namespace") or None) if kind in _NAMED else space
    out: dict[str, Any] = {}
    for key in _ordered_keys(node, _KEY_ORDER.get(kind, ("type",))):
        value = node[key]
        if key == "namespace" and inner == space:
            continue
        if key == "fields":
            out[key] = [_java_field(f, inner) for f in value]
        elif key in ("items", "values"):
            out[key] = _java_json(value, inner)
        else:
            out[key] = value
    return out


def _jackson_pretty(value: Any, level: int = 0) -> str:
    """``value`` as Jackson's ``DefaultPrettyPrinter`` writes it (Avro Java's
    ``Schema.toString(true)``): two-space indented objects, ``"key" : value``, arrays on one
    line as ``[ a, b ]``."""
    if isinstance(value, dict):
        if not value:
            return "{ }"
        pad = "  " * (level + 1)
        entries = ",\n".join(
            f"{pad}{json.dumps(k, ensure_ascii=False)} : {_jackson_pretty(v, level + 1)}"
            for k, v in value.items()
        )
        return "{\n" + entries + "\n" + "  " * level + "}"
    if isinstance(value, list):
        if not value:
            return "[ ]"
        return "[ " + ", ".join(_jackson_pretty(v, level) for v in value) + " ]"
    return json.dumps(value, ensure_ascii=False)


def _pretty(schema: Schema) -> str:
    """``schema`` as Pulsar's messages show it (Avro Java's ``Schema.toString(true)``)."""
    return _jackson_pretty(_java_json(schema.to_json(), None))


def _can_read(reader: Schema, writer: Schema) -> bool:
    # a fresh checker each time: it memoizes the pairs it has seen (its __init__ is untyped)
    checker = ReaderWriterCompatibilityChecker()  # type: ignore[no-untyped-call]
    result = checker.get_compatibility(reader, writer)
    return bool(result.compatibility is SchemaCompatibilityType.compatible)


#: (reader, writer) pairs each strategy checks, in the order Avro Java's validators try
#: them (``SchemaValidatorBuilder``'s canRead, canBeRead and mutualRead strategies).
_PAIRS: dict[str, Callable[[Schema, Schema], list[tuple[Schema, Schema]]]] = {
    "BACKWARD": lambda new, old: [(new, old)],
    "FORWARD": lambda new, old: [(old, new)],
    "FULL": lambda new, old: [(old, new), (new, old)],
}


def _avro_check(
    existing: Sequence[SchemaEntry],
    payload: PostSchemaPayload,
    strategy: SchemaCompatibilityStrategy,
) -> None:
    """Pulsar's ``AvroSchemaBasedCompatibilityCheck``: the new schema against each of
    ``existing``, newest first."""
    if strategy is SchemaCompatibilityStrategy.ALWAYS_COMPATIBLE:
        return
    try:
        new = parse_avro(payload.schema)
        olds = [parse_avro(e.data) for e in reversed(existing)]
    except SchemaParseError as exc:
        raise ConflictError(f"org.apache.avro.SchemaParseException: {exc}") from exc
    pairs_of = _PAIRS.get(strategy.value.removesuffix("_TRANSITIVE"))
    for old in olds:
        # ALWAYS_INCOMPATIBLE: Pulsar's NeverSchemaValidator, "cannot read itself"
        pairs = [(new, new)] if pairs_of is None else pairs_of(new, old)
        for reader, writer in pairs:
            if pairs_of is not None and _can_read(reader, writer):
                continue
            raise ConflictError(
                f"Error during schema compatibility check with strategy {strategy}: "
                "org.apache.avro.SchemaValidationException: Unable to read schema: \n"
                f"{_pretty(writer)}\nusing schema:\n{_pretty(reader)}"
            )


def _check_with(
    existing: Sequence[SchemaEntry],
    payload: PostSchemaPayload,
    strategy: SchemaCompatibilityStrategy,
) -> None:
    if payload.type in _AVRO_CHECKED:
        _avro_check(existing, payload, strategy)
    elif strategy is SchemaCompatibilityStrategy.ALWAYS_INCOMPATIBLE:
        raise ConflictError("Schema compatibility strategy is ALWAYS_INCOMPATIBLE")


def _type_mismatch(existing: SchemaEntry, payload: PostSchemaPayload) -> ConflictError:
    return ConflictError(
        f"Incompatible schema: exists schema type {existing.type}, new schema type {payload.type}"
    )


def _check_with_all(
    live: Sequence[SchemaEntry], payload: PostSchemaPayload, strategy: SchemaCompatibilityStrategy
) -> None:
    """Pulsar's ``checkCompatibilityWithAll``: every version of the same type, then the
    type's check against all of them."""
    for entry in live:
        if entry.type is not payload.type:
            raise _type_mismatch(entry, payload)
    _check_with(live, payload, strategy)


def check_compatible(
    live: Sequence[SchemaEntry], payload: PostSchemaPayload, strategy: SchemaCompatibilityStrategy
) -> None:
    """Refuse ``payload`` unless it is compatible with the live versions under
    ``strategy`` (UNDEFINED counts as FULL): the latest only, or all of them for a
    transitive strategy.

    Raises:
        ConflictError: incompatible, with Pulsar's reason (409).
    """
    strategy = strategy.resolved()
    if not live or strategy is SchemaCompatibilityStrategy.ALWAYS_COMPATIBLE:
        return
    if strategy.transitive:
        _check_with_all(live, payload, strategy)
        return
    latest = live[-1]
    if latest.type is not payload.type:
        raise _type_mismatch(latest, payload)
    if latest.data == payload.schema:  # Pulsar: the same SchemaHash is not checked
        return
    _check_with([latest], payload, strategy)


#: The strategies under which Pulsar checks a consumer's schema against the latest version
#: only, and then as BACKWARD (``checkConsumerCompatibility``).
_CONSUMER_LATEST = frozenset(
    {
        SchemaCompatibilityStrategy.BACKWARD,
        SchemaCompatibilityStrategy.FORWARD,
        SchemaCompatibilityStrategy.FORWARD_TRANSITIVE,
        SchemaCompatibilityStrategy.FULL,
    }
)


def check_consumer_compatible(
    live: Sequence[SchemaEntry], payload: PostSchemaPayload, strategy: SchemaCompatibilityStrategy
) -> None:
    """Refuse a consumer's schema that cannot read the topic's data (Pulsar's
    ``SchemaRegistryServiceImpl.checkConsumerCompatibility``): under ALWAYS_COMPATIBLE
    anything goes, even on a topic without a schema; under BACKWARD, FORWARD,
    FORWARD_TRANSITIVE and FULL the consumer's schema must read the latest version
    (checked as BACKWARD); under the other strategies it is checked against every live
    version under the strategy itself. Nothing is validated or written.

    Raises:
        ConflictError: incompatible, with Pulsar's reason; or the topic has no schema
            (Pulsar: ``NotExistSchemaException``, which the topic turns into "Failed to
            add schema to an active topic with empty(BYTES) schema: new schema type X").
    """
    strategy = strategy.resolved()
    if strategy is SchemaCompatibilityStrategy.ALWAYS_COMPATIBLE:
        return
    if not live:
        raise ConflictError(
            "Failed to add schema to an active topic with empty(BYTES) schema: "
            f"new schema type {payload.type}"
        )
    if strategy in _CONSUMER_LATEST:
        check_compatible(live, payload, SchemaCompatibilityStrategy.BACKWARD)
    else:
        _check_with_all(live, payload, strategy)
