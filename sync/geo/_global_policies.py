"""A geo-replicated cluster's global policies: the merged table (reads) and the global
writer (writes) behind one face, what :class:`sync.policy.PolicyService` routes ``isGlobal``
targets to (its ``global_policies``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sync.policy import Codec, Policies, PolicyTarget, WriteResult
from sync.transport import Transport

from ._global_table import GlobalTable
from ._global_writer import GlobalPolicyWriter, policy_decoder
from ._lww import Version

__all__ = ["GlobalPolicies"]


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

    def close(self) -> None:
        """Stop writing, then reading."""
        self.writer.close()
        self.table.close()

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
