"""Pin the exported names of ``sync.cluster``: changing its public surface must be deliberate."""

from __future__ import annotations

import sync.cluster


def test_cluster_exports() -> None:
    assert sorted(sync.cluster.__all__) == sorted(
        [
            "AuthConfig", "Authorizer", "BrokerIdentity", "BundleState", "ClusterConfig",
            "ClusterService", "ClusterSettings", "ListenerUrls", "LookupConfig",
            "LookupService", "MemberState", "OwnershipConfig", "OwnershipRecord", "RequestOp",
            "ServiceState", "TenantRoles", "ViewState", "allowed_transitions", "slot_of",
        ]
    )  # fmt: skip
