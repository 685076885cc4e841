"""Pulsar's schema registry operations (what ``SchemasResourceBase`` asks of
``SchemaRegistryServiceImpl``): reads from the sidecar's view of the registry, writes as
fenced read-modify-writes of the topic's ``schema/…`` record (see :mod:`._schemas`), so a
refused upload writes nothing and two concurrent uploads get consecutive versions.

A topic's schema policies come from a callable the service passes in (:class:`SchemaPolicy`,
read from the sidecar's policy cache): the compatibility strategy (Pulsar: the topic's
``schemaCompatibilityStrategy`` policy, else the namespace's, else the broker's default,
FULL; UNDEFINED counts as FULL), ``schemaValidationEnforced`` (topic, else namespace, else
the broker's default, false) and the namespace's ``isAllowAutoUpdateSchema`` (else the
broker's default, true). The admin REST API's uploads ignore the last two, as Pulsar's
``SchemasResource`` does; what a client's PRODUCER, GET_OR_CREATE_SCHEMA and SUBSCRIBE may
do with them is :meth:`SchemaAdmin.client_schema` (Pulsar's ``ServerCnx.tryAddSchema`` and
``AbstractTopic.addSchema``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from sync._errors import ConflictError, NotFoundError, UnprocessableError
from sync.naming._names import TopicName

from ._metadata import Change, MetadataStore, MetadataWriter
from ._schema_compat import (
    check_compatible,
    check_consumer_compatible,
    find_identical,
    find_same_bytes,
    validate_schema_data,
)
from ._schemas import (
    PostSchemaPayload,
    SchemaCompatibilityStrategy,
    SchemaEntry,
    SchemaHistory,
    SchemaType,
    schema_key,
)

logger = logging.getLogger(__name__)

__all__ = [
    "AUTO_UPDATE_DISABLED",
    "MAX_HISTORY_BYTES",
    "NO_SCHEMA_VERSION",
    "SCHEMA_REQUIRED",
    "SchemaAdmin",
    "SchemaPolicy",
    "SchemaPolicyOf",
    "default_schema_policy",
]

#: Pulsar's ``SchemaRegistryService.NO_SCHEMA_VERSION``: a version lookup that found none.
NO_SCHEMA_VERSION = -1
#: The largest schema history record written (Kafka refuses a record over the registry
#: topic's ``max.message.bytes``, 1 MiB by default; a clear 422 beats retrying forever).
MAX_HISTORY_BYTES = 900_000

#: Pulsar 4.0.7's refusal of a producer without a schema on a topic with one under
#: ``schemaValidationEnforced`` (``ServerCnx.tryAddSchema``; "schemawhen" is Pulsar's text).
SCHEMA_REQUIRED = (
    "Producers cannot connect or send message without a schema to topics with a schema"
    "when SchemaValidationEnforced is enabled"
)
#: Pulsar's refusal of a schema the topic does not have under ``isAllowAutoUpdateSchema``
#: false (``AbstractTopic.addSchema``).
AUTO_UPDATE_DISABLED = "Schema not found and schema auto updating is disabled."


@dataclass(frozen=True, slots=True)
class SchemaPolicy:
    """The policies a topic's schema checks read (Pulsar's ``HierarchyTopicPolicies`` and
    the namespace's ``Policies``), each already resolved to the broker default when unset."""

    #: ``schemaCompatibilityStrategy`` (UNDEFINED counts as the broker's FULL).
    strategy: SchemaCompatibilityStrategy = SchemaCompatibilityStrategy.FULL
    #: ``schemaValidationEnforced``: the topic's, else the namespace's (broker: false).
    validation_enforced: bool = False
    #: ``isAllowAutoUpdateSchema``: the namespace's (broker: true).
    allow_auto_update: bool = True


#: A topic's schema policies.
SchemaPolicyOf = Callable[[TopicName], SchemaPolicy]


def default_schema_policy(_topic: TopicName) -> SchemaPolicy:
    """The broker's defaults (no topic or namespace policy read): FULL, schemas not
    enforced, producers may add versions."""
    return SchemaPolicy()


def _now_ms() -> int:
    return int(time.time() * 1000)


class SchemaAdmin:
    """Reads and writes topics' schema histories (Pulsar's ``…/schemas`` admin REST)."""

    def __init__(
        self,
        store: MetadataStore,
        writer: MetadataWriter,
        policy: SchemaPolicyOf = default_schema_policy,
    ) -> None:
        self.store = store
        self.writer = writer
        self.policy_of = policy

    def history(self, topic: TopicName) -> SchemaHistory:
        """``topic``'s history (none yet: empty).

        Raises:
            NotFoundError: "Namespace does not exist".
        """
        return _history(self.store, topic)

    def _read(self, topic: TopicName) -> SchemaHistory:
        """``topic``'s history for a read: a namespace that does not exist has no schemas
        (Pulsar's reads do not look the namespace up: "Schema not found", no versions)."""
        if self.store.layout(topic.namespace_name) is None:
            return SchemaHistory(topic.base.canonical)
        return _history(self.store, topic)

    def policy(self, topic: TopicName) -> SchemaPolicy:
        """``topic``'s schema policies (see :class:`SchemaPolicy`)."""
        return self.policy_of(topic)

    def strategy(self, topic: TopicName) -> SchemaCompatibilityStrategy:
        """The strategy checks on ``topic`` use (UNDEFINED resolved to FULL)."""
        return self.policy_of(topic).strategy.resolved()

    def has_schema(self, topic: TopicName) -> bool:
        """Whether ``topic`` has a schema (Pulsar's ``Topic.hasSchema``): a latest version
        that is not a soft delete's marker.

        Raises:
            NotFoundError: no such namespace.
        """
        return self.history(topic).latest is not None

    def latest(self, topic: TopicName) -> SchemaEntry:
        """The latest version (``GET …/schema``).

        Raises:
            NotFoundError: "Schema not found" (none, deleted, or no such namespace).
        """
        entry = self._read(topic).latest
        if entry is None:
            raise NotFoundError("Schema not found")
        return entry

    def version(self, topic: TopicName, version: int) -> SchemaEntry:
        """Version ``version`` (``GET …/schema/{version}``); deleted ones are gone.

        Raises:
            NotFoundError: "Schema not found" (none, deleted, or no such namespace).
        """
        entry = self._read(topic).get(version)
        if entry is None:
            raise NotFoundError("Schema not found")
        return entry

    def versions(self, topic: TopicName) -> tuple[SchemaEntry, ...]:
        """The live versions, oldest first (``GET …/schemas``; none: empty)."""
        return self._read(topic).live

    def find_version(self, topic: TopicName, payload: PostSchemaPayload) -> int:
        """The version holding exactly ``payload`` (type and bytes), else
        :data:`NO_SCHEMA_VERSION` (``POST …/version``)."""
        entry = find_same_bytes(self._read(topic).live, payload)
        return NO_SCHEMA_VERSION if entry is None else entry.version

    def test_compatibility(
        self, topic: TopicName, payload: PostSchemaPayload
    ) -> SchemaCompatibilityStrategy:
        """Check ``payload`` as an upload would, writing nothing; returns the strategy.

        Raises:
            UnprocessableError: invalid schema data (422).
            ConflictError: incompatible, with the reason (409).
            NotFoundError: no such namespace.
        """
        validate_schema_data(payload)
        strategy = self.strategy(topic)
        check_compatible(self.history(topic).live, payload, strategy)
        return strategy

    def check_consumer(self, topic: TopicName, payload: PostSchemaPayload) -> None:
        """Check a consumer's schema against an active topic's versions, writing nothing
        (Pulsar's ``checkSchemaCompatibleForConsumer``; see
        :func:`~._schema_compat.check_consumer_compatible`).

        Raises:
            ConflictError: incompatible, or the topic has no schema (and the strategy is
                not ALWAYS_COMPATIBLE).
            NotFoundError: no such namespace.
        """
        check_consumer_compatible(self.history(topic).live, payload, self.strategy(topic))

    def client_schema(
        self,
        topic: TopicName,
        payload: PostSchemaPayload | None,
        policy: SchemaPolicy | None = None,
    ) -> int | None:
        """The version a client's schema gets on ``topic`` (Pulsar's
        ``ServerCnx.tryAddSchema`` for a PRODUCER or a GET_OR_CREATE_SCHEMA, and
        ``AbstractTopic.addSchema`` for a consumer's schema on an idle topic), under the
        topic's policies (``policy``, else read now):

        * no schema: None (no version), unless ``schemaValidationEnforced`` is on and the
          topic has a schema (:meth:`has_schema`): refused;
        * with ``isAllowAutoUpdateSchema`` (the default): :meth:`post`, i.e. the live
          version it already is, else a new version if compatible;
        * without it: only a live version it already is (an admin upload, or an earlier
          client's while updates were allowed); anything else is refused, compatible or
          not, nothing written.

        Raises:
            ConflictError: refused, with Pulsar's reason (:data:`SCHEMA_REQUIRED`,
                :data:`AUTO_UPDATE_DISABLED`, or :meth:`post`'s incompatibility).
            UnprocessableError: invalid schema data.
            NotFoundError: no such namespace.
        """
        policy = policy or self.policy_of(topic)
        if payload is None:
            if policy.validation_enforced and self.has_schema(topic):
                raise ConflictError(SCHEMA_REQUIRED)
            return None
        if policy.allow_auto_update:
            return self.post(topic, payload)
        validate_schema_data(payload)
        same = find_identical(self.history(topic).live, payload)
        if same is None:
            raise ConflictError(AUTO_UPDATE_DISABLED)
        return same.version

    def post(self, topic: TopicName, payload: PostSchemaPayload, user: str = "") -> int:
        """Add ``payload`` as the topic's next version, or return the live version it
        already is (``POST …/schema``).

        Raises:
            UnprocessableError: invalid schema data, or a history too large to store (422).
            ConflictError: incompatible under the topic's strategy (409); nothing written.
            NotFoundError: no such namespace.
        """
        validate_schema_data(payload)
        strategy = self.strategy(topic)
        key = schema_key(topic)

        def decide(store: MetadataStore) -> Change[int]:
            history = _history(store, topic)
            live = history.live
            same = find_identical(live, payload)
            if same is not None:
                return Change({}, same.version)
            check_compatible(live, payload, strategy)
            entry = SchemaEntry(
                history.next_version,
                payload.type,
                payload.schema,
                payload.properties,
                _now_ms(),
                user,
            )
            value = history.appended(entry).to_json()
            if len(value) > MAX_HISTORY_BYTES:
                raise UnprocessableError(
                    f"the schema history of {history.topic} would be {len(value)} bytes, over "
                    f"the {MAX_HISTORY_BYTES} this registry stores; delete the schema with "
                    "force=true to start a new history"
                )
            return Change({key: value}, entry.version)

        version = self.writer.update(decide)
        logger.info("schema of %s: version %d (%s)", topic.base, version, payload.type)
        return version

    def delete(self, topic: TopicName, user: str = "", *, force: bool = False) -> int:
        """Delete the topic's schema (``DELETE …/schema``): Pulsar's soft delete appends a
        deleted marker and answers its version (even when there was no schema); ``force``
        drops the whole history and answers -1.

        Raises:
            NotFoundError: no such namespace.
        """
        key = schema_key(topic)

        def decide(store: MetadataStore) -> Change[int]:
            history = _history(store, topic)
            if force:
                writes: dict[str, bytes | None] = {key: None} if history.versions else {}
                return Change(writes, NO_SCHEMA_VERSION)
            marker = SchemaEntry(
                history.next_version, SchemaType.NONE, "", {}, _now_ms(), user, deleted=True
            )
            return Change({key: history.appended(marker).to_json()}, marker.version)

        version = self.writer.update(decide)
        logger.info("deleted the schema of %s (force=%s): version %d", topic.base, force, version)
        return version


def _history(store: MetadataStore, topic: TopicName) -> SchemaHistory:
    if store.layout(topic.namespace_name) is None:
        raise NotFoundError("Namespace does not exist")
    base = topic.base.canonical
    return store.schemas.get(base) or SchemaHistory(base)
