"""Bulk writes of global targets on a geo cluster (in-memory twin): ``set_many`` (bulk
import) writes them to ``policy-sync-global-events`` in one transaction of the global writer,
never as legacy ``__G__`` keys of ``__change_events``; a batch mixing them with local or
namespace targets is refused whole; ``set_each`` (independent writes) routes each item."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sync import Codec, InvalidInputError, InvalidPolicyError, PolicyService, PolicyTarget
from sync.constants import CHANGE_EVENTS_TOPIC, GLOBAL_EVENTS_TOPIC
from sync.geo import GlobalPolicies
from sync.policy._policy_service import MIXED_BATCH
from sync.transport import MemoryTransport


@pytest.fixture
def geo() -> Iterator[tuple[MemoryTransport, PolicyService]]:
    transport = MemoryTransport()
    policies = GlobalPolicies(transport, Codec(), cluster="east", peers=["west"])
    svc = PolicyService(transport, global_policies=policies).start(timeout_s=10)
    try:
        yield transport, svc
    finally:
        svc.close()


def _keys(transport: MemoryTransport, topic: str) -> list[bytes]:
    return sorted(k for _, _, k, _ in transport.broker.records(topic) if k is not None)


def _json(svc: PolicyService, target: PolicyTarget) -> object:
    found = svc.get(target)
    return None if found is None else found.to_json_obj()


def _global(name: str) -> PolicyTarget:
    return PolicyTarget.parse(f"geo/ns/{name}", is_global=True)


def test_set_many_writes_global_targets_to_the_global_topic_in_one_batch(
    geo: tuple[MemoryTransport, PolicyService],
) -> None:
    transport, svc = geo
    items = [
        (_global("a"), {"maxConsumerPerTopic": 1}),
        (_global("b"), {"maxProducerPerTopic": 2}),
        (_global("a"), {"maxProducerPerTopic": 3}),  # chains on the first write of "a"
    ]
    results = svc.set_many(items)
    assert [r.action for r in results] == ["UPDATE", "UPDATE", "UPDATE"]
    assert _json(svc, _global("a")) == {"maxConsumerPerTopic": 1, "maxProducerPerTopic": 3}
    assert _json(svc, _global("b")) == {"maxProducerPerTopic": 2}
    assert _keys(transport, GLOBAL_EVENTS_TOPIC) == sorted(
        [_global("a").key_bytes, _global("a").key_bytes, _global("b").key_bytes]
    )
    assert isinstance(svc.global_policies, GlobalPolicies)
    version = svc.global_policies.table.version(_global("a").key)
    assert version is not None and version.stamp.cluster == "east"
    assert not [k for k in _keys(transport, CHANGE_EVENTS_TOPIC) if k.startswith(b"__G__")]


def test_a_batch_mixing_global_and_local_targets_is_refused_and_writes_nothing(
    geo: tuple[MemoryTransport, PolicyService],
) -> None:
    transport, svc = geo
    local = PolicyTarget.parse("geo/ns/a")
    with pytest.raises(InvalidInputError) as refused:
        svc.set_many(
            [(local, {"maxConsumerPerTopic": 1}), (_global("a"), {"maxConsumerPerTopic": 2})]
        )
    assert str(refused.value) == MIXED_BATCH
    assert svc.get(local) is None and svc.get(_global("a")) is None
    assert _keys(transport, GLOBAL_EVENTS_TOPIC) == []
    # A rule a later item breaks refuses an all-global batch whole too.
    quorums = {"bookkeeperEnsemble": 1, "bookkeeperWriteQuorum": 2, "bookkeeperAckQuorum": 1}
    with pytest.raises(InvalidPolicyError, match="Ensemble"):
        svc.set_many(
            [(_global("a"), {"maxConsumerPerTopic": 1}), (_global("b"), {"persistence": quorums})]
        )
    assert svc.get(_global("a")) is None and _keys(transport, GLOBAL_EVENTS_TOPIC) == []


def test_set_each_routes_each_item_and_a_refusal_fails_alone(
    geo: tuple[MemoryTransport, PolicyService],
) -> None:
    transport, svc = geo
    local = PolicyTarget.parse("geo/ns/a")
    out = svc.set_each(
        [
            (_global("a"), {"maxConsumerPerTopic": 4}),
            (local, {"maxConsumerPerTopic": 5}),
            (_global("b"), {"maxConsumerPerTopic": "many"}),
            (PolicyTarget.parse("geo/ns"), {"maxConsumerPerTopic": 6}),
        ]
    )
    assert [type(r).__name__ for r in out] == [
        "WriteResult",
        "WriteResult",
        "InvalidPolicyError",
        "WriteResult",
    ]
    assert _json(svc, _global("a")) == {"maxConsumerPerTopic": 4}
    assert _json(svc, local) == {"maxConsumerPerTopic": 5}
    assert _keys(transport, GLOBAL_EVENTS_TOPIC) == [_global("a").key_bytes]
    assert not [k for k in _keys(transport, CHANGE_EVENTS_TOPIC) if k.startswith(b"__G__")]
