"""Pin the exported names of ``sync.cluster``: changing its public surface must be deliberate."""

from __future__ import annotations

import sync.cluster


def test_cluster_exports() -> None:
    assert sorted(sync.cluster.__all__) == sorted(
        [
            "AuthAction", "AuthConfig", "AuthPolicies", "Authorizer", "BrokerIdentity",
            "BundleState", "ClusterConfig",
            "ClusterService", "ClusterSettings", "ListenerUrls", "LookupConfig",
            "LookupService", "MemberState", "OwnershipConfig", "OwnershipRecord", "RequestOp",
            "ServiceState", "TenantRoles", "TopicOperation", "ViewState", "allowed_transitions",
            "parse_actions", "parse_roles", "slot_of",
        ]
    )  # fmt: skip
