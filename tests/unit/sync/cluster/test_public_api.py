"""Pin the exported names of ``sync.cluster``: changing its public surface must be deliberate."""

from __future__ import annotations

import sync.cluster


def test_cluster_exports() -> None:
    assert sorted(sync.cluster.__all__) == sorted(
        [
            "AuthAction", "AuthConfig", "AuthPolicies", "Authorizer", "BrokerIdentity",
            "BundleState", "ClusterConfig", "ClusterRecord", "ClustersAdmin",
            "ClusterService", "ClusterSettings", "ListenerUrls", "LookupConfig",
            "LookupService", "MemberState", "MetadataStore", "NO_SCHEMA_VERSION", "OwnershipConfig",
            "OwnershipRecord", "PostSchemaPayload", "RequestOp", "SchemaAdmin",
            "SchemaCompatibilityStrategy", "SchemaEntry", "SchemaHistory", "SchemaPolicy",
            "SchemaType",
            "ServiceState", "SubscriptionAuthMode", "TenantRoles", "TopicOperation", "ViewState",
            "allowed_transitions", "check_global_write", "check_topic_replication",
            "parse_actions", "parse_roles", "parse_schema_payload",
            "parse_subscription_auth_mode", "slot_of",
            "validate_schema_data",
        ]
    )  # fmt: skip
