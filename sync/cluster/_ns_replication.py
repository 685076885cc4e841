"""A namespace's replication clusters (Pulsar ``GET/POST …/namespaces/{t}/{ns}/replication``):
the ``repl/<tenant>/<namespace>`` registry record and its fenced read-modify-write.

Pulsar's checks, in its order (``NamespacesBase.internalSetNamespaceReplicationClusters``,
``PulsarWebResource.validateClusterForTenant``): no list or an empty one -> 412 "ClusterIds
should not be null or empty"; ``global`` listed -> 412 "Cannot specify global in the list of
replication clusters"; a cluster not registered -> 403 "Invalid cluster id: C"; one the
tenant does not allow -> 403 "Cluster [C] is not in the list of allowed clusters list for
tenant [T]". Pulsar keeps a set: stored sorted, without repeats. Without a record the
namespace replicates to the local cluster only (Pulsar's default for a namespace created
in a cluster).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from sync._errors import AuthorizationError, InvalidInputError, NotFoundError
from sync.naming._names import NamespaceName

from ._clusters_admin import ClustersAdmin
from ._metadata import Change, MetadataStore, MetadataWriter
from ._ns_replication_record import ReplicationClusters, replication_key
from ._topic_replication import replication_of

logger = logging.getLogger(__name__)

__all__ = ["ReplicationAdmin"]

#: The pseudo-cluster of Pulsar's v1 global namespaces, never a replication cluster.
_GLOBAL = "global"


class ReplicationAdmin:
    """Reads and sets namespaces' replication clusters; a refused request writes nothing."""

    def __init__(self, store: MetadataStore, writer: MetadataWriter, clusters: ClustersAdmin):
        self.store = store
        self.writer = writer
        self.clusters = clusters

    def of(self, namespace: NamespaceName) -> list[str]:
        """The namespace's replication clusters (the local cluster unless set).

        Raises:
            NotFoundError: "Namespace does not exist".
        """
        if self.store.layout(namespace) is None:
            raise NotFoundError("Namespace does not exist")
        return self.stored(namespace)

    def stored(self, namespace: NamespaceName) -> list[str]:
        """The namespace's replication clusters, whether the namespace exists or not."""
        return replication_of(self.store, self.clusters.local, namespace)

    def set(self, namespace: NamespaceName, cluster_ids: Sequence[str] | None) -> list[str]:
        """Pulsar ``POST /admin/v2/namespaces/{t}/{ns}/replication``.

        Raises:
            InvalidInputError: no clusters, or ``global`` among them (412).
            AuthorizationError: an unknown cluster, or one the tenant does not allow (403).
            NotFoundError: "Namespace does not exist".
        """
        if not cluster_ids:
            raise InvalidInputError("ClusterIds should not be null or empty")
        wanted = tuple(sorted(set(cluster_ids)))
        if _GLOBAL in wanted:
            raise InvalidInputError("Cannot specify global in the list of replication clusters")
        for cluster in wanted:
            if not self.clusters.exists(cluster):
                raise AuthorizationError(f"Invalid cluster id: {cluster}")
        record = ReplicationClusters(str(namespace), wanted)

        def decide(store: MetadataStore) -> Change[list[str]]:
            if store.layout(namespace) is None:
                raise NotFoundError("Namespace does not exist")
            tenant = store.tenants.get(namespace.tenant)
            allowed = () if tenant is None else tenant.allowed_clusters
            for cluster in wanted:
                if cluster not in allowed:
                    raise AuthorizationError(
                        f"Cluster [{cluster}] is not in the list of allowed clusters list "
                        f"for tenant [{namespace.tenant}]"
                    )
            return Change({replication_key(namespace): record.to_json()}, list(wanted))

        done = self.writer.update(decide)
        logger.info("replication clusters of %s: %s", namespace, done)
        return done
