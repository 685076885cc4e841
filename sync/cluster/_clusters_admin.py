"""Registering, updating and removing Pulsar clusters (``/admin/v2/clusters/{cluster}``):
each a fenced read-modify-write of the cluster's ``cluster/<name>`` registry record
(:mod:`._cluster_record` holds the record and Pulsar's checks), so a refused request writes
nothing."""

from __future__ import annotations

import logging

from sync._errors import ConflictError, InvalidInputError, NotFoundError

from ._cluster_record import ClusterRecord, check_cluster_name, cluster_key
from ._metadata import Change, MetadataStore, MetadataWriter

logger = logging.getLogger(__name__)

__all__ = ["ClustersAdmin"]


class ClustersAdmin:
    """Registers, updates and removes clusters; each change a fenced read-modify-write of
    its ``cluster/<name>`` record, decided on a view holding every committed write, so a
    refused request writes nothing."""

    def __init__(self, store: MetadataStore, writer: MetadataWriter, *, local: str) -> None:
        """``local``: this sidecar's own cluster, known whether registered or not."""
        self.store = store
        self.writer = writer
        self.local = local

    def names(self) -> list[str]:
        """Every known cluster: the registered ones and the local one."""
        return sorted({self.local, *self.store.clusters})

    def exists(self, name: str) -> bool:
        """Whether ``name`` is a known cluster."""
        return name == self.local or name in self.store.clusters

    def get(self, name: str) -> ClusterRecord | None:
        """The registered record of ``name`` (None: not registered)."""
        return self.store.clusters.get(name)

    def create(self, name: str, body: object) -> ClusterRecord:
        """Pulsar ``PUT /admin/v2/clusters/{cluster}``.

        Raises:
            InvalidInputError: "Cluster name is not valid".
            BadRequestError: "cluster data is required", an illegal URL.
            ConflictError: "Cluster already exists".
        """
        check_cluster_name(name)
        record = ClusterRecord.of(name, body)

        def decide(store: MetadataStore) -> Change[ClusterRecord]:
            if name in store.clusters:
                raise ConflictError("Cluster already exists")
            return Change({cluster_key(name): record.to_json()}, record)

        created = self.writer.update(decide)
        logger.info("registered cluster %s", name)
        return created

    def update(self, name: str, body: object) -> ClusterRecord:
        """Pulsar ``POST /admin/v2/clusters/{cluster}``.

        Raises:
            BadRequestError: "cluster data is required", an illegal URL.
            NotFoundError: "Cluster does not exist".
        """
        record = ClusterRecord.of(name, body)

        def decide(store: MetadataStore) -> Change[ClusterRecord]:
            if name not in store.clusters:
                raise NotFoundError("Cluster does not exist")
            return Change({cluster_key(name): record.to_json()}, record)

        updated = self.writer.update(decide)
        logger.info("updated cluster %s", name)
        return updated

    def delete(self, name: str) -> None:
        """Pulsar ``DELETE /admin/v2/clusters/{cluster}``.

        Raises:
            NotFoundError: "Cluster does not exist".
            InvalidInputError: "Cluster not empty" (a tenant still allows it).
        """

        def decide(store: MetadataStore) -> Change[None]:
            if name not in store.clusters:
                raise NotFoundError("Cluster does not exist")
            if any(name in t.allowed_clusters for t in store.tenants.values()):
                raise InvalidInputError("Cluster not empty")
            return Change({cluster_key(name): None}, None)

        self.writer.update(decide)
        logger.info("removed cluster %s", name)
