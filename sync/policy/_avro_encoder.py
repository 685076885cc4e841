"""A schema-compiled Avro binary encoder for the ChangeEvent family of schemas.

fastavro remains the reference (and the decoder). Its writer resolves every union
branch at run time, which for a TopicPolicies record of ~30 nullable fields costs far
more than the bytes themselves; bulk imports were bound by it. This module compiles a
parsed schema once into nested closures that write straight into a ``bytearray``.
Unit tests check it byte for byte against fastavro on randomized documents.

Supported: null, boolean, int, long (also ``timestamp-millis`` given a datetime), float,
double, string, bytes, enum, array, map, record, fixed, and unions whose branches are
told apart by Python type (as in every union of our schemas: ``["null", T]``).
"""

from __future__ import annotations

import datetime as _dt
import struct
from collections.abc import Callable, Mapping
from typing import Any

from sync._errors import CodecError, ConfigurationError

__all__ = ["compile_encoder"]

Writer = Callable[[Any, bytearray], None]
_PACK_F = struct.Struct("<f").pack
_PACK_D = struct.Struct("<d").pack
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)


def _write_long(n: int, out: bytearray) -> None:
    n = (n << 1) ^ (n >> 63)
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _write_int(value: Any, out: bytearray) -> None:
    if type(value) is not int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise CodecError(f"expected an int, got {value!r}")
    if not -(2**31) <= value < 2**31:
        raise CodecError(f"int out of range: {value}")
    _write_long(value, out)


def _write_long_checked(value: Any, out: bytearray) -> None:
    if type(value) is not int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise CodecError(f"expected a long, got {value!r}")
    if not -(2**63) <= value < 2**63:
        raise CodecError(f"long out of range: {value}")
    _write_long(value, out)


def _write_timestamp_millis(value: Any, out: bytearray) -> None:
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.UTC)
        delta = value - _EPOCH
        value = (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
    _write_long_checked(value, out)


def _write_boolean(value: Any, out: bytearray) -> None:
    if not isinstance(value, bool):
        raise CodecError(f"expected a boolean, got {value!r}")
    out.append(1 if value else 0)


def _write_string(value: Any, out: bytearray) -> None:
    if not isinstance(value, str):
        raise CodecError(f"expected a string, got {value!r}")
    data = value.encode("utf-8")
    _write_long(len(data), out)
    out += data


def _write_bytes(value: Any, out: bytearray) -> None:
    if not isinstance(value, bytes | bytearray):
        raise CodecError(f"expected bytes, got {value!r}")
    _write_long(len(value), out)
    out += value


def _write_float(value: Any, out: bytearray) -> None:
    out += _PACK_F(float(value))


def _write_double(value: Any, out: bytearray) -> None:
    out += _PACK_D(float(value))


def _write_null(value: Any, out: bytearray) -> None:
    if value is not None:
        raise CodecError(f"expected null, got {value!r}")


_PRIMITIVES: dict[str, Writer] = {
    "null": _write_null,
    "boolean": _write_boolean,
    "int": _write_int,
    "long": _write_long_checked,
    "float": _write_float,
    "double": _write_double,
    "string": _write_string,
    "bytes": _write_bytes,
}


class _Compiler:
    def __init__(self) -> None:
        self.named: dict[str, Writer] = {}

    def compile(self, schema: Any) -> Writer:
        if isinstance(schema, str):
            if schema in _PRIMITIVES:
                return _PRIMITIVES[schema]
            if schema in self.named:
                # Late-bound so recursive or forward references resolve once compiled.
                named = self.named
                return lambda value, out: named[schema](value, out)
            raise ConfigurationError(f"unknown Avro type {schema!r}")
        if isinstance(schema, list):
            return self._union(schema)
        kind = schema.get("type")
        if kind in _PRIMITIVES:
            if kind == "long" and schema.get("logicalType") == "timestamp-millis":
                return _write_timestamp_millis
            return _PRIMITIVES[kind]
        if kind == "record":
            return self._record(schema)
        if kind == "enum":
            return self._enum(schema)
        if kind == "array":
            return self._array(schema)
        if kind == "map":
            return self._map(schema)
        if kind == "fixed":
            size = int(schema["size"])

            def write_fixed(value: Any, out: bytearray) -> None:
                if not isinstance(value, bytes | bytearray) or len(value) != size:
                    raise CodecError(f"expected {size} bytes, got {value!r}")
                out += value

            self.named[schema["name"]] = write_fixed
            return write_fixed
        raise ConfigurationError(f"unsupported Avro schema {schema!r}")

    def _record(self, schema: Mapping[str, Any]) -> Writer:
        name = str(schema["name"])
        # (field, writer of the value, nullable?, has default?, default). For a
        # ["null", T] field the writer is T's and the union byte is written inline: a
        # TopicPolicies record is ~30 such fields, mostly null, and a Python call each
        # was most of the encoding time.
        fields: list[tuple[str, Writer, bool, bool, Any]] = []
        self.named[name] = lambda value, out: write_record(value, out)
        for f in schema["fields"]:
            ftype = f["type"]
            nullable = isinstance(ftype, list) and len(ftype) == 2 and ftype[0] == "null"
            writer = self.compile(ftype[1] if nullable else ftype)
            fields.append((f["name"], writer, nullable, "default" in f, f.get("default")))
        plan = tuple(fields)
        if fields and all(n and d and dv is None for _, _, n, d, dv in fields):
            sparse = self._sparse_record(name, plan)
            self.named[name] = sparse
            return sparse
        write_record = _generate_record(name, schema["fields"], plan)
        self.named[name] = write_record
        return write_record

    @staticmethod
    def _sparse_record(name: str, plan: tuple[tuple[str, Writer, bool, bool, Any], ...]) -> Writer:
        """A record whose every field is ``["null", T]`` with a null default.

        Such a record (TopicPolicies: dozens of fields, a few set) is written as runs of
        null-branch bytes between the fields present, in schema order, instead of one
        step per field.
        """
        index = {fname: (i, writer, fname) for i, (fname, writer, _, _, _) in enumerate(plan)}
        count = len(plan)
        nulls = [b"\x00" * n for n in range(count + 1)]

        def write_sparse(value: Any, out: bytearray) -> None:
            if type(value) is not dict and not isinstance(value, Mapping):
                raise CodecError(f"record {name} needs a mapping, got {type(value).__name__}")
            present = sorted([index[k] for k in value if k in index])
            at = 0
            for i, writer, fname in present:
                if i > at:
                    out += nulls[i - at]
                at = i + 1
                item = value[fname]
                if item is None:
                    out.append(0)
                else:
                    out.append(2)  # zig-zag varint of branch index 1
                    writer(item, out)
            if at < count:
                out += nulls[count - at]

        return write_sparse

    def _enum(self, schema: Mapping[str, Any]) -> Writer:
        index = {symbol: i for i, symbol in enumerate(schema["symbols"])}
        name = str(schema["name"])

        def write_enum(value: Any, out: bytearray) -> None:
            try:
                _write_long(index[value], out)
            except (KeyError, TypeError):
                raise CodecError(f"{value!r} is not a symbol of {name}") from None

        self.named[name] = write_enum
        return write_enum

    def _array(self, schema: Mapping[str, Any]) -> Writer:
        item = self.compile(schema["items"])

        def write_array(value: Any, out: bytearray) -> None:
            if not isinstance(value, list | tuple):
                raise CodecError(f"expected an array, got {type(value).__name__}")
            if value:
                _write_long(len(value), out)
                for v in value:
                    item(v, out)
            out.append(0)

        return write_array

    def _map(self, schema: Mapping[str, Any]) -> Writer:
        item = self.compile(schema["values"])

        def write_map(value: Any, out: bytearray) -> None:
            if not isinstance(value, Mapping):
                raise CodecError(f"expected a map, got {type(value).__name__}")
            if value:
                _write_long(len(value), out)
                for k, v in value.items():
                    _write_string(k, out)
                    item(v, out)
            out.append(0)

        return write_map

    def _union(self, branches: list[Any]) -> Writer:
        if len(branches) == 2 and branches[0] == "null":
            other = self.compile(branches[1])

            def write_nullable(value: Any, out: bytearray) -> None:
                if value is None:
                    out.append(0)
                else:
                    out.append(2)  # zig-zag varint of branch index 1
                    other(value, out)

            return write_nullable
        raise ConfigurationError(f"only [null, T] unions are supported, got {branches!r}")


_MISSING = object()


def _inline(schema: Any, var: str, writer: Writer, env: dict[str, Any], pad: str) -> str:
    """Python source writing ``var`` (already bound) to ``out``, for the common types.

    Anything else, and every unusual value (wrong type, out of the short-varint range),
    goes through ``writer``, the compiled closure for the type, which does the full checks.
    """
    kind = schema.get("type") if isinstance(schema, dict) else schema
    if isinstance(kind, dict | list):
        return _inline(kind, var, writer, env, pad)
    slow = f"_w{len(env)}"
    env[slow] = writer
    if kind == "string":
        return (
            f"{pad}if type({var}) is str:\n"
            f"{pad}    _d = {var}.encode()\n"
            f"{pad}    if len(_d) < 64:\n"
            f"{pad}        out.append(len(_d) << 1)\n"
            f"{pad}    else:\n"
            f"{pad}        _write_long(len(_d), out)\n"
            f"{pad}    out += _d\n"
            f"{pad}else:\n"
            f"{pad}    {slow}({var}, out)\n"
        )
    if kind in ("int", "long"):
        bits = 31 if kind == "int" else 63
        return (
            f"{pad}if type({var}) is int and {-(2**bits)} <= {var} < {2**bits}:\n"
            f"{pad}    _n = ({var} << 1) ^ ({var} >> 63)\n"
            f"{pad}    while _n > 0x7F:\n"
            f"{pad}        out.append((_n & 0x7F) | 0x80)\n"
            f"{pad}        _n >>= 7\n"
            f"{pad}    out.append(_n)\n"
            f"{pad}else:\n"
            f"{pad}    {slow}({var}, out)\n"
        )
    if kind == "enum":
        table = f"_t{len(env)}"
        env[table] = {sym: bytes([i << 1]) for i, sym in enumerate(schema["symbols"]) if i < 64}
        return (
            f"{pad}_b = {table}.get({var}) if type({var}) is str else None\n"
            f"{pad}if _b is None:\n"
            f"{pad}    {slow}({var}, out)\n"
            f"{pad}else:\n"
            f"{pad}    out += _b\n"
        )
    return f"{pad}{slow}({var}, out)\n"


def _generate_record(
    name: str,
    raw_fields: list[Mapping[str, Any]],
    plan: tuple[tuple[str, Writer, bool, bool, Any], ...],
) -> Writer:
    """One Python function per record type, with its fields' writes inlined."""
    env: dict[str, Any] = {
        "Mapping": Mapping,
        "CodecError": CodecError,
        "_MISSING": _MISSING,
        "_write_long": _write_long,
    }
    body = [
        "def write_record(value, out):\n",
        "    if type(value) is not dict and not isinstance(value, Mapping):\n",
        f"        raise CodecError('record {name} needs a mapping, got ' + type(value).__name__)\n",
        "    get = value.get\n",
    ]
    for i, (raw, (fname, writer, nullable, has_default, default)) in enumerate(
        zip(raw_fields, plan, strict=True)
    ):
        var = f"v{i}"
        body.append(f"    {var} = get({fname!r}, _MISSING)\n")
        body.append(f"    if {var} is _MISSING:\n")
        if has_default:
            env[f"_d{i}"] = default
            body.append(f"        {var} = _d{i}\n")
        else:
            body.append(f"        raise CodecError({f'{name}.{fname} is required'!r})\n")
        ftype = raw["type"]
        if nullable:
            body.append(f"    if {var} is None:\n        out.append(0)\n    else:\n")
            body.append("        out.append(2)\n")
            body.append(_inline(ftype[1], var, writer, env, "        "))
        else:
            body.append(_inline(ftype, var, writer, env, "    "))
    exec(compile("".join(body), f"<avro encoder for {name}>", "exec"), env)  # noqa: S102
    generated: Writer = env["write_record"]
    return generated


def compile_encoder(parsed_schema: Any) -> Callable[[Any, bytes], bytes]:
    """Compile a (fastavro-parsed, fully expanded) schema into ``(datum, prefix) -> bytes``."""
    writer = _Compiler().compile(parsed_schema)

    def encode(datum: Any, prefix: bytes = b"") -> bytes:
        out = bytearray(prefix)
        writer(datum, out)
        return bytes(out)

    return encode
