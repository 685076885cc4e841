"""Pulsar's checks of a topic's replication clusters and of a global write, on a registry
view (no I/O): the one implementation the REST API (``…/replication?isGlobal=``) and
``policyctl`` both call, so both refuse the same input with the same reasons.

* a global ``replicationClusters`` needs namespace-level replication (more than one
  cluster), and a local one must keep the local cluster (both reasons recorded from
  Pulsar 4.0.7, ``tests/compat``);
* then, as the namespace's ``…/replication`` checks them (``NamespacesBase``): every
  cluster registered (403 ``Invalid cluster id: C``) and allowed by the tenant (403);
* a global write needs the local cluster among the namespace's replication clusters
  (``PulsarWebResource.checkLocalOrGetPeerReplicationCluster``: 412).

Without a registry view (a policy service with no cluster part) only the local cluster is
known and a namespace replicates to it alone.
"""

from __future__ import annotations

from typing import Any

from sync._errors import AuthorizationError, InvalidInputError, InvalidPolicyError
from sync.naming._names import NamespaceName

from ._metadata import MetadataStore

__all__ = ["check_global_write", "check_topic_replication", "replication_of"]

GLOBAL_NEEDS_NAMESPACE_REPLICATION = (
    "Please do not use the global topic level policy when namespace-level replication is "
    "not enabled, because the global level policy relies on namespace-level replication"
)
LOCAL_CLUSTER_REMOVED = (
    "Can not remove local cluster from the local topic-level replication clusters policy"
)


def replication_of(store: MetadataStore | None, local: str, namespace: NamespaceName) -> list[str]:
    """The namespace's replication clusters (the local cluster unless set)."""
    record = None if store is None else store.replication.get(namespace)
    return list(record.clusters) if record is not None else [local]


def check_topic_replication(
    store: MetadataStore | None,
    local: str,
    namespace: NamespaceName,
    value: Any,
    *,
    is_global: bool,
) -> None:
    """Refuse a topic's ``replicationClusters`` ``value`` (anything but a list: nothing to
    check) as Pulsar does.

    Raises:
        InvalidPolicyError: a global list without namespace replication, a local list
            without the local cluster (412).
        AuthorizationError: an unregistered cluster, one the tenant does not allow (403).
    """
    if not isinstance(value, list):
        return
    if is_global:
        spread = [] if store is None else replication_of(store, local, namespace)
        if len(spread) <= 1:
            raise InvalidPolicyError(GLOBAL_NEEDS_NAMESPACE_REPLICATION)
    elif local not in value:
        raise InvalidPolicyError(LOCAL_CLUSTER_REMOVED)
    for name in value:
        known = name == local or (store is not None and name in store.clusters)
        if not known:
            raise AuthorizationError(f"Invalid cluster id: {name}")
    tenant = None if store is None else store.tenants.get(namespace.tenant)
    if tenant is not None:
        for name in value:
            if name not in tenant.allowed_clusters:
                raise AuthorizationError(
                    f"Cluster [{name}] is not in the list of allowed clusters list "
                    f"for tenant [{namespace.tenant}]"
                )


def check_global_write(store: MetadataStore | None, local: str, namespace: NamespaceName) -> None:
    """Refuse a global policy write in a cluster outside the namespace's replication
    clusters (no registry view: nothing to check).

    Raises:
        InvalidInputError: Pulsar's 412 reason.
    """
    if store is None:
        return
    clusters = replication_of(store, local, namespace)
    if local not in clusters:
        raise InvalidInputError(
            "Namespace missing local cluster name in clusters list: "
            f"local_cluster={local} ns={namespace} clusters=[{', '.join(clusters)}]"
        )
