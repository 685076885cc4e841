"""What the slot-0 owner writes to the registry, decided without Kafka: the pure functions
of ``sync.cluster._ownership_housekeeping`` (the jobs that run them are exercised in
``test_ownership_cluster.py``)."""

from __future__ import annotations

import dataclasses

from sync._constants import OWNERSHIP_MEMBER_CLIENT_PREFIX as PREFIX
from sync.cluster._ownership_housekeeping import (
    forget_cluster_writes,
    group_members,
    membership_writes,
    quiet_clusters,
)
from sync.cluster._ownership_model import Write
from sync.cluster._records import (
    PERM_READ,
    BrokerRegistration,
    MemberInfo,
    Membership,
    WritePerm,
    broker_key,
    members_key,
    perm_key,
)
from sync.transport import GroupDescription, GroupMember

TOPIC = "__policy_sync.registry"
NOW = 1_700_000_000_000.0
GRACE_S = 30.0


def reg(cluster: str, broker_id: str, incarnation: str, age_s: float = 0.0) -> BrokerRegistration:
    return BrokerRegistration(
        cluster=cluster,
        broker_id=broker_id,
        broker_name=f"name-{broker_id}",
        replica_id=0,
        incarnation=incarnation,
        service_url=f"pulsar://{broker_id}:6650",
        service_url_tls=None,
        http_url=f"http://{broker_id}:8080",
        http_url_tls=None,
        heartbeat_ms=int(NOW - age_s * 1000),
    )


def member(incarnation: str, *slots: int) -> MemberInfo:
    return MemberInfo(PREFIX + incarnation, f"m-{incarnation}", "/127.0.0.1", slots)


def snapshot(cluster: str, *members: MemberInfo, age_s: float = 0.0) -> Membership:
    return Membership(cluster, members, "b1", 4, int(NOW - age_s * 1000))


def perm(cluster: str, broker_id: str) -> WritePerm:
    return WritePerm(cluster, f"name-{broker_id}", PERM_READ, int(NOW))


def tombstone(key: str) -> Write:
    return Write(key, None, None, TOPIC)


def test_group_members_keeps_ownership_members_by_client_id() -> None:
    desc = GroupDescription(
        "g",
        "Stable",
        (
            GroupMember("m2", PREFIX + "i2", "/h2", {"slots": (1, 3), "other": (0,)}),
            GroupMember("mx", "someone-else", "/hx", {"slots": (2,)}),
            GroupMember("m1", PREFIX + "i1", "/h1", {}),
        ),
    )
    assert group_members(desc, "slots") == (
        MemberInfo(PREFIX + "i1", "m1", "/h1", ()),
        MemberInfo(PREFIX + "i2", "m2", "/h2", (1, 3)),
    )


def _membership_writes(
    members: tuple[MemberInfo, ...],
    previous: Membership | None,
    registrations: dict[tuple[str, str], BrokerRegistration],
    perms: dict[tuple[str, str], WritePerm] | None = None,
) -> list[Write]:
    return membership_writes(
        cluster="c1",
        members=members,
        previous=previous,
        registrations=registrations,
        perms=perms or {},
        leader="b1",
        generation=4,
        grace_s=GRACE_S,
        now_ms=NOW,
        topic=TOPIC,
    )


def test_a_changed_group_publishes_a_new_snapshot_an_unchanged_one_nothing() -> None:
    members = (member("i1", 0, 1), member("i2", 2, 3))
    regs = {("c1", "b1"): reg("c1", "b1", "i1"), ("c1", "b2"): reg("c1", "b2", "i2")}
    expected = snapshot("c1", *members)
    assert _membership_writes(members, None, regs) == [
        Write(members_key("c1"), expected.to_json(), None, TOPIC)
    ]
    assert _membership_writes(members, expected, regs) == []


def test_a_broker_that_left_the_group_loses_its_registration_and_wiped_perm() -> None:
    before = snapshot("c1", member("i1", 0), member("i2", 1))
    now = (member("i1", 0, 1),)
    regs = {
        ("c1", "b1"): reg("c1", "b1", "i1"),
        ("c1", "b2"): reg("c1", "b2", "i2"),  # was in the group: removed at once
        ("c1", "b3"): reg("c1", "b3", "i3", age_s=5),  # never seen, fresh: kept
        ("c1", "b4"): reg("c1", "b4", "i4", age_s=GRACE_S + 1),  # never seen, stale: removed
        ("c2", "b2"): reg("c2", "b2", "i9"),  # another cluster: not ours to judge
    }
    perms = {
        ("c1", "name-b2"): perm("c1", "b2"),
        ("c1", "name-b1"): perm("c1", "b1"),
        ("c2", "name-b2"): perm("c2", "b2"),
    }
    writes = _membership_writes(now, before, regs, perms)
    assert writes[0].key == members_key("c1")
    assert writes[1:] == [
        tombstone(broker_key("c1", "b2")),
        tombstone(broker_key("c1", "b4")),
        tombstone(perm_key("c1", "name-b2")),
    ]


def test_a_wiped_perm_stays_while_a_live_broker_has_the_name() -> None:
    regs = {
        # A live replica of the broker name that b2 had.
        ("c1", "b1"): dataclasses.replace(reg("c1", "b1", "i1"), broker_name="name-b2"),
        ("c1", "b2"): reg("c1", "b2", "i2"),
    }
    before = snapshot("c1", member("i1", 0), member("i2", 1))
    perms = {("c1", "name-b2"): perm("c1", "b2")}
    writes = _membership_writes((member("i1", 0, 1),), before, regs, perms)
    assert tombstone(broker_key("c1", "b2")) in writes
    assert tombstone(perm_key("c1", "name-b2")) not in writes


def test_quiet_clusters_are_other_clusters_with_nothing_fresh() -> None:
    regs = {
        ("c1", "b1"): reg("c1", "b1", "i1", age_s=GRACE_S + 1),  # our own: never a candidate
        ("c2", "b1"): reg("c2", "b1", "j1", age_s=GRACE_S + 1),
        ("c3", "b1"): reg("c3", "b1", "k1", age_s=GRACE_S + 1),
        ("c3", "b2"): reg("c3", "b2", "k2", age_s=1),  # one live broker keeps c3
    }
    memberships = {
        "c4": snapshot("c4", age_s=GRACE_S + 1),  # only a stale snapshot left
        "c5": snapshot("c5", age_s=1),
    }
    assert quiet_clusters("c1", regs, memberships, grace_s=GRACE_S, now_ms=NOW) == ["c2", "c4"]


def test_a_forgotten_cluster_loses_everything_the_registry_holds_of_it() -> None:
    regs = {
        ("c2", "b1"): reg("c2", "b1", "j1"),
        ("c2", "b2"): reg("c2", "b2", "j2"),
        ("c1", "b1"): reg("c1", "b1", "i1"),
    }
    memberships = {"c2": snapshot("c2"), "c1": snapshot("c1")}
    perms = {("c2", "name-b1"): perm("c2", "b1"), ("c1", "name-b1"): perm("c1", "b1")}
    assert forget_cluster_writes("c2", regs, memberships, perms, TOPIC) == [
        tombstone(broker_key("c2", "b1")),
        tombstone(broker_key("c2", "b2")),
        tombstone(members_key("c2")),
        tombstone(perm_key("c2", "name-b1")),
    ]
    assert forget_cluster_writes("c9", regs, memberships, perms, TOPIC) == []
