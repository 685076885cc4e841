"""The policy cache's memory: every record key's last value, packed losslessly.

A million cached policies must fit in a few hundred megabytes of a sidecar. Held
naively (``dict[key bytes, value bytes]``) each costs ~313 bytes: an 80-byte key object,
a 192-byte value object for a 159-byte event, a ~40-byte dict slot. Most of those bytes
repeat what is known already:

* the key's namespace prefix (``persistent://tenant/ns``) is shared by every topic of
  the namespace: the store is two-level, ``prefix -> {local name -> packed value}``;
* the single-object header (``C3 01`` + fingerprint) is the current schema's for nearly
  every value;
* the event body repeats the key (domain, tenant, namespace and topic strings);
* a TopicPolicies record with few fields set is mostly one-byte null-union indexes
  (runs of ``00``).

A packed value drops those and keeps the rest verbatim, so :meth:`PolicyStore.get`
returns exactly the bytes written to Kafka (digests, audits and dead-letter copies see
the real record). Packing is chosen only when unpacking reproduces the value; anything
else (another schema version, a body whose names differ from its key, namespace-level
records) is stored whole behind a one-byte tag.

Packed forms (first byte is the tag)::

    00 + value                                  stored whole
    01 + value[10:13] + squeeze(value[13 + len(names):])
         where names = the Avro encoding of the key's domain, tenant, namespace, topic

``squeeze`` replaces runs of 16 and 4 zero bytes by two-byte tokens (``FF 03`` and
``FF 02``) after escaping ``FF`` as ``FF 01``; tokens never overlap, so ``unsqueeze``
inverts it exactly.

One thread writes; others read. Reads are plain dict lookups (atomic under the GIL).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from sync._constants import GLOBAL_KEY_PREFIX, SINGLE_OBJECT_HEADER_LEN

__all__ = ["PolicyStore", "squeeze", "unsqueeze"]

_WHOLE = b"\x00"
_PACKED = 1
_PACKED_TAG = b"\x01"
_GLOBAL = GLOBAL_KEY_PREFIX.encode("ascii")
#: eventType, actionType and the topicPoliciesEvent union index precede the names.
_NAMES_AT = SINGLE_OBJECT_HEADER_LEN + 3

_ESC, _ESC_ESC = b"\xff", b"\xff\x01"
_Z4, _Z4_TOKEN = b"\x00" * 4, b"\xff\x02"
_Z16, _Z16_TOKEN = b"\x00" * 16, b"\xff\x03"


def squeeze(data: bytes) -> bytes:
    """Shorten runs of zero bytes (reversible with :func:`unsqueeze`)."""
    if _ESC in data:
        data = data.replace(_ESC, _ESC_ESC)
    return data.replace(_Z16, _Z16_TOKEN).replace(_Z4, _Z4_TOKEN)


def unsqueeze(data: bytes) -> bytes:
    """The bytes :func:`squeeze` was given."""
    data = data.replace(_Z4_TOKEN, _Z4).replace(_Z16_TOKEN, _Z16)
    if _ESC_ESC in data:
        data = data.replace(_ESC_ESC, _ESC)
    return data


def _avro_string(text: bytes) -> bytes:
    """Avro's encoding of a string: zig-zag varint length, then the bytes."""
    n = len(text) << 1
    if n < 0x80:
        return bytes((n,)) + text
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out) + text


def _names_of_prefix(prefix: bytes) -> bytes | None:
    """Encoded domain, tenant and namespace of ``[__G__]domain://tenant/namespace/``."""
    body = prefix[len(_GLOBAL) :] if prefix.startswith(_GLOBAL) else prefix
    domain, sep, rest = body.partition(b"://")
    parts = rest.split(b"/")
    if not sep or len(parts) != 3 or parts[2]:
        return None  # a namespace-level key, or not a topic name: values stay whole
    return _avro_string(domain) + _avro_string(parts[0]) + _avro_string(parts[1])


class _Namespace:
    """The entries sharing one key prefix, and that prefix's encoded names."""

    __slots__ = ("entries", "names")

    def __init__(self, prefix: bytes) -> None:
        self.entries: dict[bytes, bytes] = {}
        self.names = _names_of_prefix(prefix)


def _split(key: bytes) -> tuple[bytes, bytes]:
    """(everything up to and including the last ``/``, the rest): ``prefix + local == key``."""
    cut = key.rfind(b"/") + 1
    return key[:cut], key[cut:]


class PolicyStore:
    """``key -> last value`` for a change-events topic, in packed form.

    ``header`` is the current schema's single-object header: only values carrying it
    are packed (others are kept whole, so any version round-trips).
    """

    def __init__(self, header: bytes) -> None:
        if len(header) != SINGLE_OBJECT_HEADER_LEN:
            raise ValueError("header must be the 10-byte single-object header")
        self.header = header
        self._spaces: dict[bytes, _Namespace] = {}

    # -- packing ------------------------------------------------------------------
    def _pack(self, space: _Namespace, local: bytes, value: bytes) -> bytes:
        try:
            return self._pack_known(space, local, value)
        except Exception:  # noqa: BLE001 - whatever a record holds, it is stored whole
            return _WHOLE + value

    def _pack_known(self, space: _Namespace, local: bytes, value: bytes) -> bytes:
        names = space.names
        if (
            names is not None
            and value.startswith(self.header)
            and value.startswith(names, _NAMES_AT)
        ):
            at = _NAMES_AT + len(names)
            if len(local) < 64:  # the topic's length is one varint byte
                rest = at + 1 + len(local)
                # A slice, not value[at]: a truncated value may end right after the names.
                if value[at : at + 1] != bytes((len(local) << 1,)) or not value.startswith(
                    local, at + 1
                ):
                    return _WHOLE + value
            else:
                encoded = _avro_string(local)
                if not value.startswith(encoded, at):
                    return _WHOLE + value
                rest = at + len(encoded)
            return _PACKED_TAG + value[SINGLE_OBJECT_HEADER_LEN:_NAMES_AT] + squeeze(value[rest:])
        return _WHOLE + value

    def _unpack(self, space: _Namespace, local: bytes, packed: bytes) -> bytes:
        if packed[0] != _PACKED or space.names is None:
            return packed[1:]
        return self.header + packed[1:4] + space.names + _avro_string(local) + unsqueeze(packed[4:])

    def _space(self, prefix: bytes) -> _Namespace:
        space = self._spaces.get(prefix)
        if space is None:
            space = self._spaces[prefix] = _Namespace(prefix)
        return space

    # -- writes (one thread) -----------------------------------------------------------
    def put(self, key: bytes, value: bytes) -> bytes:
        """Store ``value`` under ``key``; returns the packed object (see :meth:`token`)."""
        prefix, local = _split(key)
        space = self._space(prefix)
        packed = space.entries[local] = self._pack(space, local, value)
        return packed

    def put_many(self, keys: Iterable[bytes], values: Iterable[bytes]) -> None:
        """:meth:`put` of each pair, in order (the replay's hot path)."""
        self._many(keys, values, replace=True)

    def insert_many(self, keys: Iterable[bytes], values: Iterable[bytes]) -> list[int]:
        """Add each pair whose key is absent ("add if absent"); returns the indexes of the
        pairs whose key was present (not added)."""
        return self._many(keys, values, replace=False)

    def _many(self, keys: Iterable[bytes], values: Iterable[bytes], *, replace: bool) -> list[int]:
        spaces, new_space, pack = self._spaces, self._space, self._pack
        present: list[int] = []
        for i, (key, value) in enumerate(zip(keys, values, strict=True)):
            cut = key.rfind(b"/") + 1  # _split, inlined: this loop is the replay's
            prefix, local = key[:cut], key[cut:]
            space = spaces.get(prefix) or new_space(prefix)
            if not replace and local in space.entries:
                present.append(i)
            else:
                space.entries[local] = pack(space, local, value)
        return present

    def pop(self, key: bytes) -> bool:
        """Remove ``key``; whether it was present."""
        prefix, local = _split(key)
        space = self._spaces.get(prefix)
        return space is not None and space.entries.pop(local, None) is not None

    # -- reads (any thread) -------------------------------------------------------------
    def token(self, key: bytes) -> bytes | None:
        """The packed object held for ``key``: identical (``is``) while the value is."""
        prefix, local = _split(key)
        space = self._spaces.get(prefix)
        return None if space is None else space.entries.get(local)

    def get(self, key: bytes) -> bytes | None:
        """The value last stored under ``key``, byte for byte, or None."""
        prefix, local = _split(key)
        space = self._spaces.get(prefix)
        if space is None:
            return None
        packed = space.entries.get(local)
        return None if packed is None else self._unpack(space, local, packed)

    def unpack(self, key: bytes, token: bytes) -> bytes:
        """The value a :meth:`token` of ``key`` stands for."""
        prefix, local = _split(key)
        # A read never adds a namespace (readers run on other threads than the writer).
        space = self._spaces.get(prefix) or _Namespace(prefix)
        return self._unpack(space, local, token)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, bytes) and self.token(key) is not None

    def __len__(self) -> int:
        return sum(len(space.entries) for space in list(self._spaces.values()))

    def prefixes(self) -> list[bytes]:
        return list(self._spaces)

    def locals_under(self, prefix: bytes) -> list[bytes]:
        """The keys of one prefix without it (the verifier walks the store this way)."""
        space = self._spaces.get(prefix)
        return [] if space is None else list(space.entries)

    def size_under(self, prefix: bytes) -> int:
        space = self._spaces.get(prefix)
        return 0 if space is None else len(space.entries)

    def keys(self) -> list[bytes]:
        """Every key held (a copy)."""
        out: list[bytes] = []
        for prefix, space in list(self._spaces.items()):
            out.extend(prefix + local for local in list(space.entries))
        return out

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) of every entry; values unpacked, byte for byte as written."""
        for prefix, space in list(self._spaces.items()):
            for local, packed in list(space.entries.items()):
                yield prefix + local, self._unpack(space, local, packed)

    # -- snapshots ---------------------------------------------------------------------
    def packed_state(self) -> dict[bytes, dict[bytes, bytes]]:
        """A copy of the packed entries (cheap to save; see :meth:`restore`)."""
        return {prefix: dict(space.entries) for prefix, space in list(self._spaces.items())}

    @classmethod
    def restore(cls, header: bytes, state: dict[bytes, dict[bytes, bytes]]) -> PolicyStore:
        """A store from :meth:`packed_state` taken with the same ``header``."""
        store = cls(header)
        for prefix, entries in state.items():
            space = store._space(prefix)
            space.entries = entries
        return store
