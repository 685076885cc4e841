"""Topic policies: targets and keys, validation, immutable values, precedence.

The field catalog is *derived from* ``schemas/policysync.TopicPolicies.avsc``: the
schema is the single source of truth for which fields exist and their types; this
module adds only range rules (no negative limits; ``-1`` means infinite where Pulsar
documents it; any negative rate means unlimited, as in Pulsar).
"""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from sync._constants import GLOBAL_KEY_PREFIX, NAMESPACE_KEY_PREFIX
from sync._errors import InvalidPolicyError, InvalidTopicNameError
from sync.naming._names import NamespaceName, TopicName

__all__ = [
    "FieldCatalog",
    "Policies",
    "PolicyScope",
    "PolicyTarget",
    "effective_policies",
    "parse_policy_json",
]

_INT_MAX = 2**31 - 1
_LONG_MIN = -(2**63)
_LONG_MAX = 2**63 - 1
#: What a Java ``int`` and ``long`` hold (Pulsar's JSON binding refuses the rest).
_JAVA_WIDTHS = {"int": (-(2**31), _INT_MAX), "long": (_LONG_MIN, _LONG_MAX)}
#: Fields where -1 means "infinite", as Pulsar documents; every other number must be >= 0.
_MINUS_ONE_ALLOWED = frozenset(
    {
        "retentionPolicies.retentionTimeInMinutes",
        "retentionPolicies.retentionSizeInMB",
        "backLogQuotaMap.*.limitSize",
        "backLogQuotaMap.*.limitTime",
    }
)
#: The throttling fields of the DispatchRate, PublishRate and SubscribeRate records, wherever
#: those records appear (topic, namespace, subscription policies). Pulsar's clients send -1
#: for a limit not given (``pulsar-admin topics set-publish-rate --msg-publish-rate 20``
#: sends ``publishThrottlingRateInByte: -1``); Pulsar 4.0.7 stores any negative value as
#: sent and its rate limiters treat every value <= 0 as unlimited, and so do we.
_NEGATIVE_IS_UNLIMITED = frozenset(
    {
        "dispatchThrottlingRateInMsg",
        "dispatchThrottlingRateInByte",
        "publishThrottlingRateInMsg",
        "publishThrottlingRateInByte",
        "subscribeThrottlingRatePerConsumer",
    }
)
_MAP_KEYS = {"backLogQuotaMap": frozenset({"destination_storage", "message_age"})}
#: Derived from the scope of a write, never taken from user input.
_MANAGED_FIELDS = frozenset({"isGlobal"})


class PolicyScope(enum.Enum):
    """Which layer a policy record belongs to; precedence is LOCAL > GLOBAL > NAMESPACE."""

    LOCAL = "local"
    GLOBAL = "global"
    NAMESPACE = "namespace"


@dataclass(frozen=True, slots=True)
class PolicyTarget:
    """What a policy record is about: a base topic (local or global) or a namespace."""

    scope: PolicyScope
    tenant: str
    namespace: str
    topic: TopicName | None = None
    _key: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # The record key is read for every write and lookup: computed once.
        if self.topic is None:
            key = f"{NAMESPACE_KEY_PREFIX}{self.tenant}/{self.namespace}"
        elif self.scope is PolicyScope.GLOBAL:
            key = f"{GLOBAL_KEY_PREFIX}{self.topic.canonical}"
        else:
            key = self.topic.canonical
        object.__setattr__(self, "_key", key)

    @classmethod
    def parse(cls, text: str, *, is_global: bool = False) -> PolicyTarget:
        """A topic (any Pulsar form; the partition suffix is stripped) or ``tenant/namespace``."""
        text = text.strip()
        if "://" not in text and text.count("/") == 1:
            if is_global:
                raise InvalidTopicNameError(
                    f"--global applies to topics, not to the namespace {text!r}"
                )
            ns = NamespaceName.parse(text)
            return cls(PolicyScope.NAMESPACE, ns.tenant, ns.namespace)
        return cls.for_topic(TopicName.parse(text), is_global=is_global)

    @classmethod
    def for_topic(cls, topic: TopicName, *, is_global: bool = False) -> PolicyTarget:
        base = topic.base
        scope = PolicyScope.GLOBAL if is_global else PolicyScope.LOCAL
        return cls(scope, base.tenant, base.namespace, base)

    @classmethod
    def namespace_of(cls, tenant: str, namespace: str) -> PolicyTarget:
        ns = NamespaceName.parse(f"{tenant}/{namespace}")
        return cls(PolicyScope.NAMESPACE, ns.tenant, ns.namespace)

    @classmethod
    def from_key(cls, key: str) -> PolicyTarget:
        """Inverse of :attr:`key`."""
        if key.startswith(NAMESPACE_KEY_PREFIX):
            ns = NamespaceName.parse(key[len(NAMESPACE_KEY_PREFIX) :])
            return cls(PolicyScope.NAMESPACE, ns.tenant, ns.namespace)
        if key.startswith(GLOBAL_KEY_PREFIX):
            return cls.for_topic(TopicName.parse(key[len(GLOBAL_KEY_PREFIX) :]), is_global=True)
        return cls.for_topic(TopicName.parse(key))

    @property
    def key(self) -> str:
        """The record key in ``__change_events``."""
        return self._key

    @property
    def key_bytes(self) -> bytes:
        return self.key.encode("utf-8")

    @property
    def namespace_key(self) -> str:
        return f"{NAMESPACE_KEY_PREFIX}{self.tenant}/{self.namespace}"

    def __str__(self) -> str:
        return self.key


_SCALARS = frozenset({int, float, str, bool, type(None)})


def _freeze(value: Any) -> Any:
    if type(value) in _SCALARS:
        return value
    if isinstance(value, dict):
        return _FrozenDict({k: _freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    return value


def _thaw(value: Any) -> Any:
    if type(value) in _SCALARS:
        return value
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_thaw(v) for v in value]
    return value


class _FrozenDict(Mapping[str, Any]):
    __slots__ = ("_data",)

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and dict(self.items()) == dict(other.items())

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._data)))

    def __repr__(self) -> str:
        return repr(self._data)


class Policies(Mapping[str, Any]):
    """An immutable set of policy fields (only the fields that are set).

    Values are deep-frozen (records as read-only mappings, arrays as tuples), so a
    cached ``Policies`` can be shared between threads and never changes under a
    reader; updates build a new one (:meth:`merged`).
    """

    __slots__ = ("_fields",)

    def __init__(self, fields: Mapping[str, Any] | None = None) -> None:
        self._fields: dict[str, Any] = {
            k: _freeze(v) for k, v in (fields or {}).items() if v is not None
        }

    @classmethod
    def from_avro(cls, record: Mapping[str, Any] | None) -> Policies:
        """From a decoded TopicPolicies record; ``isGlobal`` is implied by the key, dropped."""
        fields = dict(record or {})
        fields.pop("isGlobal", None)
        return cls(fields)

    def to_avro(self) -> dict[str, Any]:
        return {k: _thaw(v) for k, v in self._fields.items()}

    def to_json_obj(self) -> dict[str, Any]:
        """Plain JSON-able dict, fields sorted by name."""
        return {k: _thaw(self._fields[k]) for k in sorted(self._fields)}

    def merged(self, patch: Mapping[str, Any]) -> Policies:
        """A copy with ``patch`` applied: a value sets a field, ``None`` removes it."""
        fields = dict(self._fields)
        for name, value in patch.items():
            if value is None:
                fields.pop(name, None)
            else:
                fields[name] = value
        return Policies(fields)

    def __getitem__(self, key: str) -> Any:
        return self._fields[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Policies):
            return self._fields == other._fields
        return NotImplemented

    def __hash__(self) -> int:
        return hash(json.dumps(self.to_json_obj(), sort_keys=True))

    def __repr__(self) -> str:
        return f"Policies({self.to_json_obj()!r})"


class FieldCatalog:
    """Validation of policy documents, derived from the TopicPolicies Avro schema."""

    def __init__(self, topic_policies_schema: Mapping[str, Any]) -> None:
        self._named: dict[str, Any] = {}
        self._collect(topic_policies_schema)
        self.fields: dict[str, Any] = {
            f["name"]: self._nonnull(f["type"]) for f in topic_policies_schema["fields"]
        }
        # Most policies are plain integers: (low, high) checked without the general walk.
        self._int_ranges: dict[str, tuple[int, int]] = {}
        for name, t in self.fields.items():
            t = self._resolve(t)
            if isinstance(t, str) and t in ("int", "long") and name not in _MANAGED_FIELDS:
                self._int_ranges[name] = _int_bounds(name, t)

    @classmethod
    def from_change_event_schema(cls, change_event: Mapping[str, Any]) -> FieldCatalog:
        """Find TopicPolicies inside a parsed (fully expanded) ChangeEvent schema."""
        found: list[Mapping[str, Any]] = []

        def walk(node: Any) -> None:
            if isinstance(node, dict):
                if node.get("type") == "record" and str(node.get("name", "")).endswith(
                    "TopicPolicies"
                ):
                    found.append(node)
                for v in node.values():
                    walk(v)
            elif isinstance(node, list):
                for v in node:
                    walk(v)

        walk(change_event)
        if not found:
            raise InvalidPolicyError("ChangeEvent schema has no TopicPolicies record")
        return cls(found[0])

    def _collect(self, node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") in ("record", "enum") and "name" in node:
                self._named[node["name"]] = node
                self._named[str(node["name"]).rsplit(".", 1)[-1]] = node
            for v in node.values():
                self._collect(v)
        elif isinstance(node, list):
            for v in node:
                self._collect(v)

    def _nonnull(self, t: Any) -> Any:
        if isinstance(t, list):
            rest = [x for x in t if x != "null"]
            return rest[0] if len(rest) == 1 else rest
        return t

    def _resolve(self, t: Any) -> Any:
        t = self._nonnull(t)
        if isinstance(t, str) and t in self._named:
            return self._named[t]
        return t

    def validate_patch(self, patch: Any) -> dict[str, Any]:
        """Check a user's partial policy document; return it normalized.

        Raises :class:`InvalidPolicyError` naming the first field at fault.
        """
        if not isinstance(patch, dict):
            raise InvalidPolicyError(f"policies must be a JSON object, got {type(patch).__name__}")
        out: dict[str, Any] = {}
        ranges = self._int_ranges
        for name, value in patch.items():
            bounds = ranges.get(name)
            if bounds is not None and type(value) is int and bounds[0] <= value <= bounds[1]:
                out[name] = value
                continue
            if name in _MANAGED_FIELDS:
                raise InvalidPolicyError(
                    f"{name}: set by the scope of the write (--global / ?isGlobal=true), "
                    "not by the document"
                )
            if name not in self.fields:
                raise InvalidPolicyError(
                    f"unknown policy field {name!r}; known fields: "
                    f"{', '.join(sorted(set(self.fields) - _MANAGED_FIELDS))}"
                )
            out[name] = None if value is None else self._check(name, self.fields[name], value)
        return out

    def bind(self, patch: Mapping[str, Any]) -> None:
        """Refuse an integer its field's Java type cannot hold, as Pulsar's JSON binding
        does before any of Pulsar's own checks run (``maxMessageSize`` 2**31 is its 400,
        not the 412 of its range check). Everything else is left to :meth:`validate_patch`.

        Raises:
            InvalidPolicyError: naming the field and the type.
        """
        for name, value in patch.items():
            t = self.fields.get(name)
            if t is not None and name not in _MANAGED_FIELDS:
                self._bind(name, t, value)

    def _bind(self, path: str, t: Any, value: Any) -> None:
        t = self._resolve(t)
        if isinstance(t, str):
            width = _JAVA_WIDTHS.get(t)
            if width is not None and type(value) is int and not width[0] <= value <= width[1]:
                raise InvalidPolicyError(
                    f"{path}: {value} is out of range of a Java {t} ({width[0]} to {width[1]})"
                )
            return
        kind = t.get("type")
        if kind == "array" and isinstance(value, list):
            for i, v in enumerate(value):
                self._bind(f"{path}[{i}]", t["items"], v)
        elif kind == "map" and isinstance(value, dict):
            for k, v in value.items():
                self._bind(f"{path}.{k}", t["values"], v)
        elif kind == "record" and isinstance(value, dict):
            types = {f["name"]: f["type"] for f in t["fields"]}
            for k, v in value.items():
                if k in types:
                    self._bind(f"{path}.{k}", types[k], v)

    def _check(self, path: str, t: Any, value: Any) -> Any:
        t = self._resolve(t)
        generic = _generic(path)
        if isinstance(t, str):
            return _check_primitive(path, generic, t, value)
        kind = t.get("type")
        if kind == "enum":
            if not isinstance(value, str) or value not in t["symbols"]:
                raise InvalidPolicyError(
                    f"{path}: {value!r} is not one of {', '.join(t['symbols'])}"
                )
            return value
        if kind == "array":
            if not isinstance(value, list):
                raise InvalidPolicyError(f"{path}: expected a JSON array, got {_tname(value)}")
            items = [self._check(f"{path}[{i}]", t["items"], v) for i, v in enumerate(value)]
            if len({json.dumps(i, sort_keys=True) for i in items}) != len(items):
                raise InvalidPolicyError(f"{path}: duplicate entries")
            return items
        if kind == "map":
            if not isinstance(value, dict):
                raise InvalidPolicyError(f"{path}: expected a JSON object, got {_tname(value)}")
            allowed = _MAP_KEYS.get(path)
            result = {}
            for k, v in value.items():
                if allowed is not None and k not in allowed:
                    raise InvalidPolicyError(
                        f"{path}: key {k!r} is not one of {', '.join(sorted(allowed))}"
                    )
                if not k:
                    raise InvalidPolicyError(f"{path}: empty key")
                result[k] = self._check(f"{path}.{k}", t["values"], v)
            return result
        if kind == "record":
            if not isinstance(value, dict):
                raise InvalidPolicyError(f"{path}: expected a JSON object, got {_tname(value)}")
            names = {f["name"]: f for f in t["fields"]}
            unknown = sorted(set(value) - set(names))
            if unknown:
                raise InvalidPolicyError(
                    f"{path}: unknown field(s) {', '.join(unknown)}; "
                    f"known: {', '.join(sorted(names))}"
                )
            record = {}
            for fname, f in names.items():
                if fname in value and value[fname] is not None:
                    record[fname] = self._check(f"{path}.{fname}", f["type"], value[fname])
                elif "default" in f:
                    record[fname] = f["default"]
                else:
                    raise InvalidPolicyError(f"{path}.{fname}: required")
            return record
        raise InvalidPolicyError(f"{path}: unsupported schema type {kind!r}")  # pragma: no cover

    def validate_full(self, fields: Mapping[str, Any]) -> None:
        """Check a complete stored document (e.g. a decoded record) the same way."""
        self.validate_patch(dict(fields))


def _generic(path: str) -> str:
    # backLogQuotaMap.destination_storage.limitSize -> backLogQuotaMap.*.limitSize
    parts = path.split(".")
    if parts[0] in _MAP_KEYS and len(parts) > 2:
        parts[1] = "*"
    return ".".join(parts)


def _tname(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _int_bounds(generic: str, t: str) -> tuple[int, int]:
    """The allowed range of an integer policy field (``-1`` = infinite where Pulsar says so,
    any negative rate = unlimited)."""
    high = _INT_MAX if t == "int" else _LONG_MAX
    if generic.rpartition(".")[2] in _NEGATIVE_IS_UNLIMITED:
        return -high - 1, high
    return (-1 if generic in _MINUS_ONE_ALLOWED else 0), high


def _check_primitive(path: str, generic: str, t: str, value: Any) -> Any:
    if t == "boolean":
        if not isinstance(value, bool):
            raise InvalidPolicyError(f"{path}: expected true or false, got {value!r}")
        return value
    if t in ("int", "long"):
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidPolicyError(f"{path}: expected an integer, got {value!r}")
        low, high = _int_bounds(generic, t)
        if not low <= value <= high:
            hint = {-1: " (-1 means infinite)", 0: ""}.get(low, " (negative: unlimited)")
            raise InvalidPolicyError(f"{path}: must be between {low}{hint} and {high}, got {value}")
        return value
    if t in ("double", "float"):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InvalidPolicyError(f"{path}: expected a number, got {value!r}")
        if not math.isfinite(value) or value < 0:
            raise InvalidPolicyError(f"{path}: must be a finite number >= 0, got {value}")
        return float(value)
    if t == "string":
        if not isinstance(value, str) or not value:
            raise InvalidPolicyError(f"{path}: expected a non-empty string, got {value!r}")
        return value
    raise InvalidPolicyError(f"{path}: unsupported type {t}")  # pragma: no cover


def _no_constants(name: str) -> Any:
    raise InvalidPolicyError(f"{name} is not valid JSON")


def _no_dupes(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise InvalidPolicyError(f"duplicate key {k!r} in JSON")
        out[k] = v
    return out


def _shown(number: str) -> str:
    """A number as an error message quotes it (a 5,000-digit one is not echoed whole)."""
    return number if len(number) <= 40 else f"{number[:20]}... ({len(number)} characters)"


def _java_long(number: str) -> int:
    # JSON has no leading zeros, so the digit count bounds the value: a long has at most
    # 19 digits. Counted before int() runs, which refuses over 4,300 digits (ValueError).
    digits = len(number) - number.startswith("-")
    if digits < 19:
        return int(number)
    if digits == 19:
        value = int(number)
        if _LONG_MIN <= value <= _LONG_MAX:
            return value
    raise InvalidPolicyError(
        f"number {_shown(number)} is out of range: JSON integers must fit a Java long "
        f"({_LONG_MIN} to {_LONG_MAX})"
    )


def _finite_double(number: str) -> float:
    value = float(number)
    if math.isinf(value):  # e.g. 1e999: no double holds it (JSON has no Infinity)
        raise InvalidPolicyError(f"number {_shown(number)} is out of range of a double")
    return value


#: Built once: ``json.loads`` with hooks builds a new decoder per call (most of its cost).
_STRICT_JSON = json.JSONDecoder(
    object_pairs_hook=_no_dupes,
    parse_constant=_no_constants,
    parse_int=_java_long,
    parse_float=_finite_double,
)


def parse_policy_json(text: str) -> Any:
    """Parse user JSON (a policy document or any admin request body) strictly.

    Refused with :class:`InvalidPolicyError` and a clear message: malformed JSON, NaN and
    Infinity, duplicate keys, integers outside a Java long (what every integer of Pulsar's
    admin API is) and numbers no double holds (``1e999``). So no value a Java client could
    not have sent gets past the parser, and a 5,000-digit integer never reaches ``int()``.
    """
    if not isinstance(text, str):
        raise InvalidPolicyError(f"expected JSON text, got {type(text).__name__}")
    try:
        return _STRICT_JSON.decode(text)
    except json.JSONDecodeError as exc:
        raise InvalidPolicyError(f"malformed JSON: {exc}") from exc


def effective_policies(
    local: Policies | None,
    global_: Policies | None,
    namespace: Policies | None,
    defaults: Mapping[str, Any] | None = None,
) -> Policies:
    """Per field, the first value set in: local topic > global topic > namespace > defaults."""
    fields: dict[str, Any] = dict(defaults or {})
    for layer in (namespace, global_, local):
        if layer is not None:
            fields.update(layer.items())
    return Policies(fields)
