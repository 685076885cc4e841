"""``policyctl``'s checks against the cluster registry, before anything is written.

A topic's ``replicationClusters`` must name registered clusters the tenant allows, keep the
local cluster (local policies) or rest on namespace replication (global ones); a global
write in a geo cluster needs the local cluster among the namespace's replication clusters.
These are the REST API's checks, the same functions (:func:`sync.cluster.check_topic_replication`,
:func:`sync.cluster.check_global_write`) on this process's own view of the registry topic,
read only when a write needs it. A refusal keeps the REST API's reason; whatever its HTTP
status there (412, or 403 for an unknown or disallowed cluster), it is refused input here:
``policyctl`` exits 2, nothing written.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from sync import (
    AuthorizationError,
    InvalidInputError,
    NamespaceName,
    PolicyScope,
    PolicyTarget,
)
from sync.cluster import MetadataStore, check_global_write, check_topic_replication
from sync.transport import Transport

logger = logging.getLogger(__name__)

__all__ = ["check_writes"]

_FIELD = "replicationClusters"


def _needs_registry(target: PolicyTarget, fields: Mapping[str, Any], geo: bool) -> bool:
    is_global = target.scope is PolicyScope.GLOBAL
    return (target.topic is not None and isinstance(fields.get(_FIELD), list)) or (
        geo and is_global
    )


def check_writes(
    transport: Transport,
    writes: Sequence[tuple[PolicyTarget, Mapping[str, Any]]],
    *,
    local: str,
    geo: bool,
    timeout_s: float,
    name_each: bool = False,
) -> None:
    """Refuse ``writes`` (target, validated fields) as the REST API would; reads the
    registry only if one of them sets a topic's replication clusters or is a geo global
    write. ``name_each``: prefix a refusal with its target (an import of many lines).

    Raises:
        InvalidInputError: the first refused write, with Pulsar's reason.
    """
    needed = [(t, f) for t, f in writes if _needs_registry(t, f, geo)]
    if not needed:
        return
    store = MetadataStore(transport, bootstrap_timeout_s=timeout_s).start()
    try:
        store.wait_ready(timeout_s)
        for target, fields in needed:
            namespace = NamespaceName(target.tenant, target.namespace)
            is_global = target.scope is PolicyScope.GLOBAL
            try:
                if target.topic is not None:
                    check_topic_replication(
                        store, local, namespace, fields.get(_FIELD), is_global=is_global
                    )
                if geo and is_global:
                    check_global_write(store, local, namespace)
            except (InvalidInputError, AuthorizationError) as exc:
                logger.info("refused %s: %s", target.key, exc)
                raise InvalidInputError(f"{target.key}: {exc}" if name_each else str(exc)) from exc
    finally:
        store.close()
