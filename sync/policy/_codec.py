"""Avro single-object encoding of change events (the wire format of ``__change_events``).

A value is ``C3 01`` + the 8-byte little-endian CRC-64-AVRO fingerprint of the writer
schema + the Avro binary body. The writer schema is looked up by fingerprint among the
schema files shipped in ``schemas/`` (current) and ``schemas/history/*`` (previous
versions), and resolved against the current reader schema, so events written by older
and newer policy-sync versions both decode.

``ChangeEvent`` keeps ``eventType`` and ``actionType`` as its first two fields, so the
first two body bytes classify an event without decoding it: bootstrap only ever needs
to decode the last value of a key.
"""

from __future__ import annotations

import importlib.resources
import io
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastavro import parse_schema, schemaless_reader
from fastavro.schema import fingerprint, load_schema, to_parsing_canonical_form

from sync._constants import SINGLE_OBJECT_HEADER_LEN, SINGLE_OBJECT_MAGIC
from sync._errors import CodecError, ConfigurationError

from ._avro_encoder import compile_encoder

__all__ = [
    "ACTION_DELETE",
    "ACTION_INSERT",
    "ACTION_NONE",
    "ACTION_UPDATE",
    "Codec",
    "SchemaVersion",
    "default_schema_dir",
]

ACTION_INSERT = "INSERT"
ACTION_DELETE = "DELETE"
ACTION_UPDATE = "UPDATE"
ACTION_NONE = "NONE"
_ROOT_SCHEMA = "policysync.ChangeEvent.avsc"


def default_schema_dir() -> Path:
    """``$POLICY_SYNC_SCHEMAS`` if set, else the schemas shipped in the package.

    The repository keeps them in the top-level ``schemas/`` (the wire contract);
    ``sync/schemas`` links there, so a wheel carries them as package data.
    """
    env = os.environ.get("POLICY_SYNC_SCHEMAS")
    return Path(env) if env else _package_path("schemas")


def _package_path(name: str) -> Path:
    resource = importlib.resources.files("sync").joinpath(name)
    if not isinstance(resource, Path):  # e.g. a zipped install: nothing to read from disk
        raise ConfigurationError(
            f"package data sync/{name} is not a directory on disk; set POLICY_SYNC_SCHEMAS"
        )
    return resource


def _zigzag_byte(index: int) -> int:
    # An enum index < 64 is a single zig-zag varint byte.
    return index << 1


@dataclass(frozen=True, slots=True)
class SchemaVersion:
    """One ChangeEvent schema: where it came from, its fingerprint and parsed form."""

    name: str
    path: Path
    fingerprint: bytes
    parsed: Any
    canonical: str
    #: (eventType byte, actionType byte) → (event type symbol, action symbol)
    classes: Mapping[tuple[int, int], tuple[str, str]]


def _load_version(name: str, directory: Path) -> SchemaVersion:
    path = directory / _ROOT_SCHEMA
    if not path.is_file():
        raise ConfigurationError(f"schema file {path} is missing; set POLICY_SYNC_SCHEMAS")
    raw = load_schema(str(path), _write_hint=False)
    if not isinstance(raw, dict):
        raise ConfigurationError(f"{path} is not an Avro record schema")
    canonical = to_parsing_canonical_form(raw)
    fp = bytes.fromhex(fingerprint(canonical, "CRC-64-AVRO"))
    fields = {f["name"]: f["type"] for f in raw["fields"]}
    event_symbols = fields["eventType"]["symbols"]
    action_symbols = fields["actionType"]["symbols"]
    if len(event_symbols) > 63 or len(action_symbols) > 63:
        raise ConfigurationError(f"{path}: enums must stay below 64 symbols")
    classes = {
        (_zigzag_byte(i), _zigzag_byte(j)): (ev, act)
        for i, ev in enumerate(event_symbols)
        for j, act in enumerate(action_symbols)
    }
    return SchemaVersion(name, path, fp, parse_schema(raw), canonical, classes)


class Codec:
    """Encodes and decodes change events; knows every schema version shipped."""

    def __init__(self, schema_dir: Path | None = None) -> None:
        directory = schema_dir or default_schema_dir()
        self.current = _load_version("current", directory)
        versions = [self.current]
        history = directory / "history"
        if history.is_dir():
            versions += [_load_version(d.name, d) for d in sorted(history.iterdir()) if d.is_dir()]
        self.versions: dict[bytes, SchemaVersion] = {v.fingerprint: v for v in versions}
        self.header = SINGLE_OBJECT_MAGIC + self.current.fingerprint
        self._encode_body = compile_encoder(self.current.parsed)

    def encode(self, event: Mapping[str, Any]) -> bytes:
        """Serialize a ChangeEvent dict with the current schema (header included)."""
        try:
            return self._encode_body(event, self.header)
        except CodecError as exc:
            raise CodecError(f"event does not fit the ChangeEvent schema: {exc.reason}") from exc

    def version_of(self, value: bytes) -> SchemaVersion | None:
        """The writer schema of a value, or None for bad magic / unknown fingerprint."""
        if value[:2] != SINGLE_OBJECT_MAGIC:
            return None
        return self.versions.get(value[2:SINGLE_OBJECT_HEADER_LEN])

    def check_header(self, value: bytes) -> str | None:
        """Why a value cannot be a change event, judging by its header alone (None: fine)."""
        if len(value) < SINGLE_OBJECT_HEADER_LEN + 2:
            return f"value of {len(value)} bytes is too short for a change event"
        if value[:2] != SINGLE_OBJECT_MAGIC:
            return f"bad magic {value[:2].hex()} (want c301: Avro single-object encoding)"
        if value[2:SINGLE_OBJECT_HEADER_LEN] not in self.versions:
            return (
                f"unknown schema fingerprint {value[2:SINGLE_OBJECT_HEADER_LEN].hex()}; "
                "is a newer policy-sync writing? deploy its schemas/ to this reader"
            )
        return None

    def classify(self, value: bytes) -> tuple[str, str] | None:
        """(eventType, actionType) read from the first two body bytes, without decoding."""
        version = self.version_of(value)
        if version is None or len(value) < SINGLE_OBJECT_HEADER_LEN + 2:
            return None
        return version.classes.get(
            (value[SINGLE_OBJECT_HEADER_LEN], value[SINGLE_OBJECT_HEADER_LEN + 1])
        )

    def decode(self, value: bytes, *, body_end: int | None = None) -> dict[str, Any]:
        """Decode a value (optionally only up to ``body_end``) into a current-schema dict."""
        version = self.version_of(value)
        if version is None:
            raise CodecError(self.check_header(value) or "bad header")
        view = memoryview(value)[SINGLE_OBJECT_HEADER_LEN:body_end]
        stream = io.BytesIO(view)
        try:
            if version is self.current:
                record = schemaless_reader(stream, version.parsed, None)
            else:
                record = schemaless_reader(stream, version.parsed, self.current.parsed)
        except Exception as exc:  # fastavro raises many types on garbage input
            raise CodecError(f"Avro body does not decode: {type(exc).__name__}: {exc}") from exc
        if stream.tell() != len(view):
            raise CodecError(f"{len(view) - stream.tell()} trailing bytes after the Avro body")
        if not isinstance(record, dict):
            raise CodecError("decoded body is not a record")
        return record
