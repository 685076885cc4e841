"""Local cache snapshots: fast restarts without trusting state that may be stale.

Format: ``PSSNAP04`` + sha256(payload) + payload. The payload is a sequence of
``marshal`` records: first the meta JSON, then ``(prefix, {local: packed value})``
pieces of at most ``_PIECE`` entries (the cache's packed form,
:mod:`sync.policy._policy_store`, valid only with the schema header recorded in the
meta). Pieces keep each ``marshal`` call short: a sidecar's other threads (its HTTP
event loop) run between them instead of waiting for one call that serializes a million
entries. marshal (not pickle) cannot run code on load; the digest rejects torn or
tampered files. Written to a temp file, fsynced, then renamed.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import logging
import marshal
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["Snapshot", "load_snapshot", "save_snapshot"]

_MAGIC = b"PSSNAP04"
_PIECE = 20_000


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A saved cache: where it came from, when, up to which offsets, and its entries."""

    topic: str
    topic_id: str
    created_ms: int
    positions: dict[int, int]
    #: ``PolicyStore.packed_state()``: key prefix -> {rest of the key -> packed value}
    store: dict[bytes, dict[bytes, bytes]]
    #: The single-object header packed values were made against.
    header: bytes


def _pieces(store: dict[bytes, dict[bytes, bytes]]) -> Any:
    for prefix, entries in store.items():
        if len(entries) <= _PIECE:
            yield prefix, entries
            continue
        items = iter(entries.items())
        while piece := dict(itertools.islice(items, _PIECE)):
            yield prefix, piece


def save_snapshot(path: Path, snap: Snapshot) -> None:
    """Write ``snap`` atomically to ``path``, a piece at a time."""
    meta = json.dumps(
        {
            "topic": snap.topic,
            "topic_id": snap.topic_id,
            "created_ms": snap.created_ms,
            "positions": {str(p): o for p, o in snap.positions.items()},
            "header": snap.header.hex(),
        }
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    digest = hashlib.sha256()
    with open(tmp, "wb") as fh:
        fh.write(_MAGIC + bytes(32))
        for record in itertools.chain([meta], _pieces(snap.store)):
            data = marshal.dumps(record)
            digest.update(data)
            fh.write(data)
            time.sleep(0)  # let other threads run between pieces
        fh.seek(len(_MAGIC))
        fh.write(digest.digest())
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def load_snapshot(path: Path) -> tuple[Snapshot | None, str]:
    """Read a snapshot; (None, why) when there is none or it is unusable."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None, "no snapshot"
    except OSError as exc:
        return None, f"snapshot unreadable: {exc}"
    if data[:8] != _MAGIC:
        return None, "snapshot has an unknown format"
    digest, payload = data[8:40], data[40:]
    if hashlib.sha256(payload).digest() != digest:
        return None, "snapshot is corrupt (digest mismatch)"
    stream = io.BytesIO(payload)
    store: dict[bytes, dict[bytes, bytes]] = {}
    try:
        meta: dict[str, Any] = json.loads(marshal.load(stream))  # noqa: S302 - digest-checked
        while stream.tell() < len(payload):
            prefix, piece = marshal.load(stream)  # noqa: S302 - our own file, digest-checked
            if not isinstance(prefix, bytes) or not isinstance(piece, dict):
                return None, "snapshot piece is not (prefix, mapping)"
            store.setdefault(prefix, {}).update(piece)
        snap = Snapshot(
            topic=str(meta["topic"]),
            topic_id=str(meta["topic_id"]),
            created_ms=int(meta["created_ms"]),
            positions={int(p): int(o) for p, o in meta["positions"].items()},
            store=store,
            header=bytes.fromhex(str(meta["header"])),
        )
    except (ValueError, EOFError, TypeError, KeyError) as exc:
        return None, f"snapshot does not parse: {exc}"
    return snap, "ok"
