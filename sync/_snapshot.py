"""Local cache snapshots: fast restarts without trusting state that may be stale.

Format: ``PSSNAP03`` + sha256(payload) + payload, where payload is ``marshal`` of
``(meta_json, store)`` and ``store`` is the cache's packed form (sync/_store.py), valid
only with the schema header recorded in the meta. marshal (not pickle) cannot run code
on load; the digest rejects torn or tampered files. Written to a temp file, fsynced, then renamed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import marshal
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["Snapshot", "load_snapshot", "save_snapshot"]

_MAGIC = b"PSSNAP03"


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


def save_snapshot(path: Path, snap: Snapshot) -> None:
    """Write ``snap`` atomically to ``path``."""
    meta = json.dumps(
        {
            "topic": snap.topic,
            "topic_id": snap.topic_id,
            "created_ms": snap.created_ms,
            "positions": {str(p): o for p, o in snap.positions.items()},
            "header": snap.header.hex(),
        }
    )
    payload = marshal.dumps((meta, snap.store))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(_MAGIC)
        fh.write(hashlib.sha256(payload).digest())
        fh.write(payload)
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
    try:
        meta_json, store = marshal.loads(payload)  # noqa: S302 - our own file, digest-checked
        meta: dict[str, Any] = json.loads(meta_json)
    except (ValueError, EOFError, TypeError) as exc:
        return None, f"snapshot does not parse: {exc}"
    if not isinstance(store, dict):
        return None, "snapshot store is not a mapping"
    return (
        Snapshot(
            topic=str(meta["topic"]),
            topic_id=str(meta["topic_id"]),
            created_ms=int(meta["created_ms"]),
            positions={int(p): int(o) for p, o in meta["positions"].items()},
            store=store,
            header=bytes.fromhex(str(meta.get("header", ""))),
        ),
        "ok",
    )
