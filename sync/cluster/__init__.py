"""Broker registry, namespace bundles, bundle ownership and topic lookup, on Kafka.

Every sidecar runs a :class:`ClusterService` and answers lookups from its own views of
three Kafka topics; the modules, each owning one behaviour:

* ``_records``   record shapes and the bundle ownership state machine (``BundleState``,
  ``check_transition``);
* ``_table``     a compacted topic as an in-memory table (replay, READY, tail; read_committed);
* ``_metadata``  the registry topic (registrations, membership, layouts, topics, KV, perms)
  and its fenced read-modify-write writer;
* ``_registry``  live brokers (RocketMQ NameServer semantics) and self-registration;
* ``_ownership_member`` liveness by consumer-group membership, bundle ownership by slot
  assignment, fenced claims (the design is in that module's docstring), with
  ``_ownership_model`` (settings, names, shapes), ``_ownership_table`` (the ownership topic
  as a table), ``_ownership_decisions`` (what an owner writes: pure functions),
  ``_ownership_transactions`` (the fenced writes), ``_ownership_requests`` (requests to
  slot owners) and ``_ownership_housekeeping`` (the slot-0 owner's registry jobs);
* ``_lookup``    topic → bundle → owner → Pulsar ``LookupData``;
* ``_admin``     namespaces, splits, unloads, topics, KV config, write perms;
* ``_auth``      optional authentication (tokens, JWTs, TLS certificates) and
  authorization (super-users, tenant admins, granted permissions);
* ``_permissions`` Pulsar's produce/consume permissions of a namespace (a registry record),
  granted and revoked by ``_permission_admin``;
* ``_schemas``   Pulsar's schema registry: a topic's schema versions (a registry record),
  validated and compared by ``_schema_compat``, read and written by ``_schema_admin``;
* ``_topic_epochs`` Pulsar's topic epochs of exclusive producers (a registry record per
  topic name), read and written by ``_topic_epoch_store``;
* ``_topic_replication`` Pulsar's checks of a topic's replication clusters and of a
  global write (the REST API and ``policyctl`` call the same functions);
* ``_service``   start-up, shutdown and status of all of the above;

HTTP routes live in :mod:`broker_shim._lookup_http`; the ``broker-shim run`` flags in
:mod:`broker_shim.cli._cluster_flags`.
"""

from ._auth import AuthConfig, Authorizer, TenantRoles
from ._cluster_record import ClusterRecord
from ._clusters_admin import ClustersAdmin
from ._freshness import ViewState
from ._lookup import LookupConfig, LookupService
from ._metadata import MetadataStore
from ._ownership_model import MemberState, OwnershipConfig, RequestOp, slot_of
from ._permissions import (
    AuthAction,
    AuthPolicies,
    SubscriptionAuthMode,
    TopicOperation,
    parse_actions,
    parse_roles,
    parse_subscription_auth_mode,
)
from ._records import BundleState, ListenerUrls, OwnershipRecord, allowed_transitions
from ._registry import BrokerIdentity
from ._schema_admin import NO_SCHEMA_VERSION, SchemaAdmin, SchemaPolicy
from ._schema_compat import validate_schema_data
from ._schemas import (
    PostSchemaPayload,
    SchemaCompatibilityStrategy,
    SchemaEntry,
    SchemaHistory,
    SchemaType,
    parse_schema_payload,
)
from ._service import ClusterConfig, ClusterService, ClusterSettings, ServiceState
from ._topic_replication import check_global_write, check_topic_replication

__all__ = [
    "AuthAction",
    "AuthConfig",
    "AuthPolicies",
    "Authorizer",
    "BrokerIdentity",
    "ClusterRecord",
    "ClustersAdmin",
    "BundleState",
    "ClusterConfig",
    "ClusterService",
    "ClusterSettings",
    "ListenerUrls",
    "LookupConfig",
    "LookupService",
    "MemberState",
    "MetadataStore",
    "NO_SCHEMA_VERSION",
    "OwnershipConfig",
    "OwnershipRecord",
    "PostSchemaPayload",
    "RequestOp",
    "SchemaAdmin",
    "SchemaCompatibilityStrategy",
    "SchemaEntry",
    "SchemaHistory",
    "SchemaPolicy",
    "SchemaType",
    "ServiceState",
    "SubscriptionAuthMode",
    "TenantRoles",
    "TopicOperation",
    "ViewState",
    "allowed_transitions",
    "check_global_write",
    "check_topic_replication",
    "parse_actions",
    "parse_roles",
    "parse_schema_payload",
    "parse_subscription_auth_mode",
    "slot_of",
    "validate_schema_data",
]
