"""The policy service: one cache plus one writer, with validation at the edge."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType, TracebackType
from typing import Any, Protocol

from sync._errors import InvalidInputError, InvalidPolicyError, NotFoundError, PolicySyncError
from sync.naming._names import NamespaceName, TopicName
from sync.transport import Transport

from ._codec import Codec
from ._policies import FieldCatalog, Policies, PolicyScope, PolicyTarget, effective_policies
from ._policy_cache import CacheConfig, PolicyCache
from ._policy_cache_config import CacheState
from ._policy_rules import check_policy_rules
from ._policy_writer import PolicyWriter, WriterConfig, WriteResult

logger = logging.getLogger(__name__)

__all__ = ["MIXED_BATCH", "GlobalPolicySource", "PolicyService", "ServiceConfig"]

#: Why :meth:`PolicyService.set_many` refuses a batch of global and other targets in a geo
#: cluster: it is all or nothing, and the two live in different topics, each written by its
#: own fenced writer (its own transactions).
MIXED_BATCH = (
    "a batch may not mix global policies with local or namespace ones on a geo-replicated "
    "cluster: global policies are written to policy-sync-global-events by their own writer, "
    "so the two cannot be committed together; write them in separate batches"
)


class GlobalPolicySource(Protocol):
    """Where global (``isGlobal``) policies live when the cluster is geo-replicated:
    ``sync.geo.GlobalPolicies`` (its own global topic and the mirrors, merged)."""

    def start(self) -> object: ...
    def wait_ready(self, timeout_s: float | None = None) -> None: ...
    def failure(self) -> str | None: ...
    def ready(self) -> bool: ...
    def close(self) -> None: ...
    def get(self, key: str) -> Policies | None: ...
    def add_listener(
        self, listener: Callable[[str, Policies | None], None]
    ) -> Callable[[], None]: ...
    def update(
        self, target: PolicyTarget, fn: Callable[[Policies | None], Policies | None]
    ) -> WriteResult: ...
    def update_many(
        self, updates: Sequence[tuple[PolicyTarget, Callable[[Policies | None], Policies | None]]]
    ) -> list[WriteResult]: ...


@dataclass(frozen=True, slots=True)
class ServiceConfig:
    """Settings of a policy service: its cache, its writer and the broker defaults."""

    cache: CacheConfig = field(default_factory=CacheConfig)
    writer: WriterConfig = field(default_factory=WriterConfig)
    #: Broker-level defaults, the last layer of precedence (validated like a policy).
    defaults: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "defaults", MappingProxyType(dict(self.defaults)))


class PolicyService:
    """Read and write topic and namespace policies through ``__change_events``."""

    def __init__(
        self,
        transport: Transport,
        config: ServiceConfig | None = None,
        *,
        codec: Codec | None = None,
        cache: PolicyCache | None = None,
        global_policies: GlobalPolicySource | None = None,
    ) -> None:
        """``global_policies``: where global policies are read and written instead of
        ``__change_events``' ``__G__`` keys (a geo-replicated cluster)."""
        self.config = config or ServiceConfig()
        self.codec = codec or Codec()
        self.catalog = FieldCatalog.from_change_event_schema(self.codec.current.parsed)
        self.defaults = Policies(self.catalog.validate_patch(dict(self.config.defaults)))
        self.cache = cache or PolicyCache(transport, config=self.config.cache, codec=self.codec)
        self.writer = PolicyWriter(transport, self.cache, self.config.writer)
        self.global_policies = global_policies

    # -- lifecycle -------------------------------------------------------------------
    def start(self, *, wait: bool = True, timeout_s: float | None = None) -> PolicyService:
        self.cache.start()
        if self.global_policies is not None:
            self.global_policies.start()
        if wait:
            self.cache.wait_ready(timeout_s)
            if self.global_policies is not None:
                self.global_policies.wait_ready(timeout_s)
        return self

    def close(self) -> None:
        self.writer.close()
        if self.global_policies is not None:
            self.global_policies.close()
        self.cache.close()

    def ready(self) -> bool:
        """Whether the cache is READY and, geo-replicated, every global topic's reader too
        (before that, or after one failed, global reads answer 503)."""
        if self.cache.state is not CacheState.READY:
            return False
        return self.global_policies is None or self.global_policies.ready()

    def _global(self, target: PolicyTarget) -> GlobalPolicySource | None:
        """The geo store that holds ``target``, if it is global and the cluster is geo."""
        return self.global_policies if target.scope is PolicyScope.GLOBAL else None

    def __enter__(self) -> PolicyService:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def add_listener(self, listener: Callable[[str, Policies | None], None]) -> Callable[[], None]:
        """Call ``listener(key, policies)`` after every change of a key, global ones of a
        geo cluster included; returns the function that removes it."""
        removers = [self.cache.add_listener(listener)]
        if self.global_policies is not None:
            removers.append(self.global_policies.add_listener(listener))

        def remove() -> None:
            for remover in removers:
                remover()

        return remove

    # -- reads -----------------------------------------------------------------------
    def get(self, target: PolicyTarget) -> Policies | None:
        """Policies set at exactly this level, or None."""
        geo = self._global(target)
        return self.cache.get_target(target) if geo is None else geo.get(target.key)

    def applied(self, topic: TopicName) -> Policies:
        """Effective policies of a topic after precedence (local > global > ns > defaults)."""
        if self.global_policies is None:
            return self.cache.effective(topic, self.defaults)
        local = PolicyTarget.for_topic(topic)
        return effective_policies(
            self.cache.get(local.key),
            self.global_policies.get(PolicyTarget.for_topic(topic, is_global=True).key),
            self.cache.get(local.namespace_key),
            self.defaults,
        )

    def list_namespace(self, namespace: NamespaceName) -> dict[str, Policies]:
        """Every policy record of one namespace, by key."""
        prefix_local = f"://{namespace.tenant}/{namespace.namespace}/"
        out: dict[str, Policies] = {}
        for key in sorted(self.cache.keys()):
            try:
                target = PolicyTarget.from_key(key)
            except InvalidPolicyError:
                continue
            except Exception:
                logger.debug("skipping unparsable key %r", key)
                continue
            if (target.tenant, target.namespace) != (namespace.tenant, namespace.namespace):
                continue
            if target.scope is not PolicyScope.NAMESPACE and prefix_local not in key:
                continue
            policies = self.cache.get(key)
            if policies is not None:
                out[key] = policies
        return out

    def export(self) -> Iterator[tuple[PolicyTarget, Policies]]:
        """Every policy record, sorted by key."""
        for key in sorted(self.cache.keys()):
            policies = self.cache.get(key)
            if policies is not None:
                yield PolicyTarget.from_key(key), policies

    # -- writes ----------------------------------------------------------------------
    def set(self, target: PolicyTarget, patch: Any) -> WriteResult:
        """Merge a validated partial document into one target (``null`` removes a field)."""
        fields = self.catalog.validate_patch(patch)
        geo = self._global(target)
        if geo is not None:
            return geo.update(target, _merge_with(fields))
        return self.writer.update(target, _merge_with(fields))

    def delete(self, target: PolicyTarget) -> WriteResult:
        """Remove every policy of one target (a tombstone); NotFoundError if none is set.

        The check is part of the decision, so a delete racing another one fails cleanly.
        """

        def remove(current: Policies | None) -> Policies | None:
            if current is None:
                raise NotFoundError(f"no policies are set for {target.key}")
            return None

        geo = self._global(target)
        return self.writer.update(target, remove) if geo is None else geo.update(target, remove)

    def set_many(
        self, items: Iterable[tuple[PolicyTarget, Any]], *, validated: bool = False
    ) -> list[WriteResult]:
        """Validate every patch first (nothing is written if one is bad), then merge all.

        ``validated=True`` skips validation for patches that already went through
        ``self.catalog.validate_patch`` (as ``policyctl import`` does while reading).
        On a geo cluster a batch of global targets is one transaction of the global
        writer; a batch mixing them with others is refused (:data:`MIXED_BATCH`), nothing
        written.
        """
        if validated:
            checked = list(items)
        else:
            checked = [(t, self.catalog.validate_patch(p)) for t, p in items]
        geo = [self._global(t) is not None for t, _ in checked]
        if self.global_policies is not None and any(geo):
            if not all(geo):
                raise InvalidInputError(MIXED_BATCH)
            updates = [(t, _merge_with(fields)) for t, fields in checked]
            size = max(1, self.config.writer.transaction_batch)
            results: list[WriteResult] = []
            for start in range(0, len(updates), size):
                results += self.global_policies.update_many(updates[start : start + size])
            return results
        return self.writer.update_many((t, _merge_with(fields)) for t, fields in checked)

    def set_each(
        self, items: Iterable[tuple[PolicyTarget, Any]], *, applied: bool = True
    ) -> list[WriteResult | PolicySyncError]:
        """Independent merges (as :meth:`set` each, sharing group commits): per item, its
        result or the error that refused it (invalid patch, failed rule, Kafka).
        ``applied=False``: return once committed, before this cache applied them (the
        caller waits for the results' positions in its own cache). On a geo cluster the
        global targets are written by the global writer, each on its own, and return once
        this cluster's global table applied them (their results carry no positions:
        sidecars never forward global writes, each writes them itself)."""
        out: dict[int, WriteResult | PolicySyncError] = {}
        local: list[tuple[int, PolicyTarget, Mapping[str, Any]]] = []
        for i, (target, patch) in enumerate(items):
            try:
                fields = self.catalog.validate_patch(patch)
            except PolicySyncError as exc:
                out[i] = exc
                continue
            geo = self._global(target)
            if geo is None:
                local.append((i, target, fields))
                continue
            try:
                out[i] = geo.update(target, _merge_with(fields))
            except PolicySyncError as exc:
                out[i] = exc
        done = self.writer.update_each(((t, _merge_with(f)) for _, t, f in local), applied=applied)
        for (i, _, _), result in zip(local, done, strict=True):
            out[i] = result
        return [out[i] for i in range(len(out))]


def _merge_with(fields: Mapping[str, Any]) -> Callable[[Policies | None], Policies | None]:
    def merge(current: Policies | None) -> Policies | None:
        # Policies() drops null fields: the same as merging into an empty set.
        merged = Policies(fields) if current is None else current.merged(fields)
        check_policy_rules(merged, fields)  # before anything is written
        return merged

    return merge
