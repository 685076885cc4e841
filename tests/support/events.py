"""Change events as they stand on the policy topic (the ``PulsarEvent`` Avro record)."""

from __future__ import annotations

from typing import Any


def change_event(
    tenant: str,
    namespace: str,
    topic: str,
    policies: dict[str, Any] | None,
    *,
    action: str = "UPDATE",
    domain: str = "persistent",
    event_type: str = "TOPIC_POLICY",
    replicate_to: list[str] | None = None,
    metadata: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One change event (before encoding); ``replicateTo`` and ``metadata`` only when given."""
    event: dict[str, Any] = {
        "eventType": event_type,
        "actionType": action,
        "topicPoliciesEvent": {
            "domain": domain,
            "tenant": tenant,
            "namespace": namespace,
            "topic": topic,
            "policies": policies,
        },
    }
    if replicate_to is not None:
        event["replicateTo"] = replicate_to
    if metadata is not None:
        event["metadata"] = metadata
    return event
