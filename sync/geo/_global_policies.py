"""A geo-replicated cluster's global policies: the merged table (reads) and the global
writer (writes) behind one face, what :class:`sync.policy.PolicyService` routes ``isGlobal``
targets to (its ``global_policies``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from sync.policy import Codec, Policies, PolicyTarget, WriteResult
from sync.table import TableState
from sync.transport import Transport

from ._global_table import GlobalTable
from ._global_writer import GlobalPolicyWriter, policy_decoder
from ._lww import LwwTable, Version

__all__ = ["GlobalPolicies", "policies_bytes", "policies_digest"]


def policies_bytes(policies: Policies) -> bytes:
    """A global value as the digest hashes it: its fields as canonical JSON (sorted keys,
    no spaces), so equal policies hash equal whichever record (or codec version) held them."""
    return json.dumps(policies.to_json_obj(), sort_keys=True, separators=(",", ":")).encode()


def policies_digest(table: LwwTable[Policies]) -> str:
    """The digest of a merged table of global policies, as ``/policy-sync/v1/digest``
    reports it (``global.digest``): every sidecar of every cluster that has read the same
    origins' records reports the same one."""
    return table.digest(policies_bytes)


class GlobalPolicies:
    """Cluster ``cluster``'s global policies: its own global topic and ``peers``' mirrors."""

    def __init__(
        self,
        transport: Transport,
        codec: Codec,
        *,
        cluster: str,
        peers: Sequence[str],
        bootstrap_timeout_s: float = 120.0,
    ) -> None:
        self.table: GlobalTable[Policies] = GlobalTable(
            transport,
            cluster,
            peers,
            policy_decoder(codec),
            bootstrap_timeout_s=bootstrap_timeout_s,
        )
        self.writer = GlobalPolicyWriter(transport, self.table, codec, cluster=cluster)

    def start(self) -> GlobalPolicies:
        """Begin replaying the global topic and the mirrors."""
        self.table.start()
        return self

    def wait_ready(self, timeout_s: float | None = None) -> None:
        """Block until every global topic was replayed."""
        self.table.wait_ready(timeout_s)

    def failure(self) -> str | None:
        """Why a global topic's reader FAILED, else None (see :meth:`GlobalTable.failure`)."""
        return self.table.failure()

    def ready(self) -> bool:
        """Whether every global topic's reader is READY (replayed, tailing)."""
        return all(s is TableState.READY for s in self.table.states().values())

    def close(self) -> None:
        """Stop writing, then reading."""
        self.writer.close()
        self.table.close()

    def summary(self) -> dict[str, Any]:
        """``digest`` (:func:`policies_digest`), ``keys`` (ghosts included) and, per topic
        read, ``positions`` (partition → next offset) and ``stalls`` (consumers recreated).

        Raises:
            CacheStateError: a topic is not replayed yet.
        """
        self.table.check_ready()
        positions = self.table.positions()
        return {
            "digest": policies_digest(self.table.table),
            "keys": len(self.table.table),
            "positions": {t: {str(p): o for p, o in ps.items()} for t, ps in positions.items()},
            "stalls": self.table.stalls(),
        }

    def add_listener(self, listener: Callable[[str, Policies | None], None]) -> Callable[[], None]:
        """Call ``listener(key, policies)`` whenever a global key gets a new winner."""
        return self.table.add_listener(listener)

    def winners(self) -> list[tuple[str, Version[Policies]]]:
        """Every global key's winning record, ghosts of deletes included, by key."""
        return self.table.winners()

    def get(self, key: str) -> Policies | None:
        """A global target's merged policies (None: unset or deleted)."""
        return self.table.get(key)

    def update(
        self, target: PolicyTarget, fn: Callable[[Policies | None], Policies | None]
    ) -> WriteResult:
        """Write ``target``'s policies as ``fn(merged current)`` decides."""
        return self.writer.update(target, fn)

    def update_many(
        self, updates: Sequence[tuple[PolicyTarget, Callable[[Policies | None], Policies | None]]]
    ) -> list[WriteResult]:
        """Write every update in one transaction (all or nothing), in order."""
        return self.writer.update_many(updates)
