"""A namespace's replication clusters as stored: the ``repl/<tenant>/<namespace>`` registry
record (:mod:`._ns_replication` decides and writes it)."""

from __future__ import annotations

from dataclasses import dataclass

from sync._constants import REGISTRY_KEY_REPLICATION
from sync._errors import CodecError
from sync.naming._names import NamespaceName

from ._records import decode_json, encode_json

__all__ = ["ReplicationClusters", "replication_key"]


def replication_key(namespace: NamespaceName) -> str:
    """The registry key of ``namespace``'s replication clusters."""
    return f"{REGISTRY_KEY_REPLICATION}{namespace}"


@dataclass(frozen=True, slots=True)
class ReplicationClusters:
    """The clusters a namespace replicates to (sorted, no repeats)."""

    namespace: str
    clusters: tuple[str, ...]

    def to_json(self) -> bytes:
        """The record's value in the registry topic."""
        return encode_json({"namespace": self.namespace, "clusters": list(self.clusters)})

    @classmethod
    def from_json(cls, raw: bytes) -> ReplicationClusters:
        """Decode a value written by :meth:`to_json`.

        Raises:
            CodecError: the value is not a replication record.
        """
        d = decode_json(raw, "replication clusters")
        namespace, clusters = d.get("namespace"), d.get("clusters")
        if not isinstance(namespace, str) or not isinstance(clusters, list):
            raise CodecError("replication clusters: needs a 'namespace' and a 'clusters' list")
        return cls(namespace, tuple(sorted({str(c) for c in clusters})))
