"""Bundle ownership across several sidecars on the in-memory twin (fast, deterministic).

The same scenarios run against real Kafka and real processes (kill -9) in
``tests/integration/sync/cluster/test_ownership_failover.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from functools import partial

import pytest

from sync._errors import ConflictError, GroupFencedError, NotFoundError
from sync.cluster import (
    BrokerIdentity,
    BundleState,
    ClusterConfig,
    ClusterService,
    LookupConfig,
    OwnershipConfig,
    OwnershipRecord,
    RequestOp,
    slot_of,
)
from sync.cluster._ownership_decisions import new_record
from sync.cluster._ownership_model import group_id, ownership_topic, slots_topic
from sync.naming._names import NamespaceName, TopicName
from sync.transport import MemoryTransport
from tests.support.waits import wait_for

SLOTS = 8


def make_service(
    transport: MemoryTransport,
    cluster: str,
    index: int,
    *,
    lookup: LookupConfig | None = None,
    auth: object = None,
) -> ClusterService:
    identity = BrokerIdentity(
        f"b{index}",
        cluster=cluster,
        service_url=f"pulsar://127.0.0.1:{6650 + index}",
        http_url=f"http://127.0.0.1:{8080 + index}",
    )
    config = ClusterConfig(
        identity,
        ownership=OwnershipConfig(
            slots=SLOTS,
            # Expiry is driven explicitly by crash(); a long session keeps a slow CI
            # machine from expiring members by accident.
            session_timeout_ms=60_000,
            membership_poll_s=0.02,
            reconcile_interval_s=0.5,
            poll_s=0.005,
        ),
        lookup=lookup or LookupConfig(lookup_timeout_s=5.0, request_retry_s=0.5),
        auth=auth,  # type: ignore[arg-type]
    )
    return ClusterService(transport, config)


def wait_until(check: Callable[[], bool], timeout: float = 10.0, *, what: str) -> None:
    wait_for(check, what, timeout_s=timeout, interval_s=0.005)


def settled(services: list[ClusterService]) -> bool:
    """Every service sees every live member, and the group is stable."""
    names = {s.identity.broker_id for s in services}
    return all(set(s.registry.live) == names for s in services)


@contextlib.contextmanager
def memory_cluster(
    n: int, transport: MemoryTransport | None = None, **kwargs: object
) -> Iterator[tuple[MemoryTransport, list[ClusterService]]]:
    """``n`` started sidecars of one fresh cluster on one in-memory broker."""
    transport = transport or MemoryTransport()
    cluster = "c" + uuid.uuid4().hex[:8]
    services = [make_service(transport, cluster, i, **kwargs) for i in range(n)]  # type: ignore[arg-type]
    for s in services:
        s.start()
    try:
        for s in services:
            s.wait_ready(20)
        wait_until(lambda: settled(services), what="membership")
        yield transport, services
    finally:
        for s in services:
            s.close()


def crash(transport: MemoryTransport, service: ClusterService) -> None:
    """``kill -9`` as the group sees it: the member stops, its session expires."""
    member = service.member
    member._graceful = False
    member._stop.set()
    if member._thread is not None:
        member._thread.join(5)
    service.registrar._stop.set()
    transport.broker.expire_group_member(group_id(service.identity.cluster), member._client_id)


def look_up_all(service: ClusterService, topics: list[TopicName]) -> list[bytes]:
    async def run() -> list[bytes]:
        return list(await asyncio.gather(*(service.lookups.lookup(t) for t in topics)))

    return asyncio.run(run())


def answers(service: ClusterService, topics: list[TopicName]) -> list[bytes | None]:
    out: list[bytes | None] = []
    for t in topics:
        try:
            out.append(service.lookups.lookup_now(t))
        except Exception:
            out.append(None)
    return out


def ownership_log(transport: MemoryTransport, cluster: str) -> list[OwnershipRecord | None]:
    return [
        None if value is None else OwnershipRecord.from_json(value)
        for _, _, _, value in transport.broker.records(ownership_topic(cluster))
    ]


def assert_log_invariants(transport: MemoryTransport, cluster: str) -> None:
    """Per bundle, committed records have strictly increasing versions (no zombie wrote
    from a stale view) and carry the bundle's slot."""
    last: dict[str, int] = {}
    for key, record in (
        ((k or b"").decode(), v)
        for _, _, k, v in transport.broker.records(ownership_topic(cluster))
    ):
        if record is None:
            last.pop(key, None)
            continue
        rec = OwnershipRecord.from_json(record)
        assert rec.version > last.get(key, 0), f"version went back for {key}: {rec}"
        assert rec.slot == slot_of(key, SLOTS)
        last[key] = rec.version


def topics_in(namespace: str, n: int) -> list[TopicName]:
    return [TopicName.parse(f"persistent://{namespace}/topic-{i}") for i in range(n)]


def test_every_looked_up_bundle_gets_one_live_owner_and_all_sidecars_agree() -> None:
    with memory_cluster(3) as (transport, services):
        services[0].admin.create_namespace(NamespaceName("t", "ns"), num_bundles=16)
        topics = topics_in("t/ns", 60)
        first = look_up_all(services[1], topics)
        for s in services:
            wait_until(partial(lambda s: answers(s, topics) == first, s), what="agreement")
        # The owner of a bundle is the member holding its slot.
        slots_of = {s.identity.broker_id: set(s.member.active) for s in services}
        for name, record in services[2].lookups.bundle_records().items():
            assert record.state is BundleState.OWNED
            assert slot_of(name, SLOTS) in slots_of[record.broker]
        # Load: every broker owns some of the 16 bundles.
        assert len(services[0].ownership.owned_by()) == 3
        assert_log_invariants(transport, services[0].identity.cluster)


def test_concurrent_lookups_of_an_unowned_bundle_share_one_acquisition() -> None:
    with memory_cluster(2) as (transport, services):
        topic = TopicName.parse("persistent://public/default/shared")
        bundle = services[0].lookups.bundle_of(topic)
        before = len(transport.broker.records(slots_topic(services[0].identity.cluster)))

        async def many() -> list[bytes]:
            return list(
                await asyncio.gather(*(services[0].lookups.lookup(topic) for _ in range(50)))
            )

        results = asyncio.run(many())
        assert len(set(results)) == 1
        requests = transport.broker.records(slots_topic(services[0].identity.cluster))[before:]
        assert [k for _, _, k, _ in requests] == [bundle.encode()]
        assert services[0].lookups.acquisitions == 1


def test_crashed_owner_is_replaced_and_forgotten() -> None:
    with memory_cluster(3) as (transport, services):
        topics = topics_in("public/default", 40)
        look_up_all(services[0], topics)
        victim = services[0]
        crash(transport, victim)
        survivors = services[1:]
        wait_until(
            lambda: (
                all(
                    None not in (a := answers(s, topics)) and a == answers(survivors[0], topics)
                    for s in survivors
                )
                and not any(b'6650"' in x for x in answers(survivors[0], topics) if x)
            ),
            what="failover",
        )
        cluster = victim.identity.cluster
        for s in survivors:
            wait_until(partial(lambda s: "b0" not in s.registry.live, s), what="live set")
            wait_until(
                partial(lambda s: (cluster, "b0") not in s.store.registrations, s), what="cleanup"
            )
        assert_log_invariants(transport, cluster)


def test_a_dead_owners_bundles_pass_through_releasing_before_the_new_owner() -> None:
    """Issue 11: a bundle of a crashed owner is marked Releasing, and claimed only
    ``handover_s`` later, so a sidecar whose view lags less than that never names the
    dead owner while another already names the new one."""
    with memory_cluster(3) as (transport, services):
        topics = topics_in("public/default", 40)
        look_up_all(services[0], topics)
        records = services[0].lookups.bundle_records()
        victim = max(
            services, key=lambda s: sum(r.broker == s.identity.broker_id for r in records.values())
        )
        dead = victim.identity.broker_id
        held = {k for k, r in records.items() if r.broker == dead}
        assert held
        crash(transport, victim)
        cluster = victim.identity.cluster
        survivor = next(s for s in services if s is not victim)
        wait_until(
            lambda: all(
                r.broker != dead and r.state is BundleState.OWNED
                for r in survivor.lookups.bundle_records().values()
            ),
            what="failover",
        )
        log = [r for r in ownership_log(transport, cluster) if r is not None]
        handover_ms = survivor.config.ownership.handover_s * 1000
        for bundle in held:
            history = [r for r in log if r.bundle == bundle]
            states = [(r.state, r.broker) for r in history]
            i = states.index((BundleState.OWNED, dead))
            released, claimed = history[i + 1], history[i + 2]
            assert (released.state, released.broker, released.reason) == (
                BundleState.RELEASING,
                dead,
                "failover",
            )
            assert claimed.state is BundleState.OWNED and claimed.broker != dead
            assert claimed.timestamp_ms - released.timestamp_ms >= handover_ms
        assert_log_invariants(transport, cluster)


def test_graceful_leave_releases_and_new_owners_claim() -> None:
    with memory_cluster(2) as (transport, services):
        topics = topics_in("public/default", 20)
        look_up_all(services[0], topics)
        leaving = services[1]
        owned_before = {
            k for k, r in services[0].lookups.bundle_records().items() if r.broker == "b1"
        }
        leaving.close()
        cluster = leaving.identity.cluster
        wait_until(
            lambda: all(
                r.broker == "b0" and r.state is BundleState.OWNED
                for r in services[0].lookups.bundle_records().values()
            ),
            what="takeover",
        )
        log = [r for r in ownership_log(transport, cluster) if r is not None]
        for bundle in owned_before:
            states = [(r.state, r.broker) for r in log if r.bundle == bundle]
            i = states.index((BundleState.RELEASING, "b1"))
            assert (BundleState.OWNED, "b0") in states[i + 1 :]
        assert "b1" not in services[0].registry.live
        assert_log_invariants(transport, cluster)


def test_a_zombie_with_a_stale_generation_cannot_commit_a_claim() -> None:
    with memory_cluster(2) as (transport, services):
        topic = TopicName.parse("persistent://public/default/z")
        look_up_all(services[0], [topic])
        bundle = services[0].lookups.bundle_of(topic)
        slot = slot_of(bundle, SLOTS)
        owner = next(s for s in services if slot in s.member.active)
        other = next(s for s in services if s is not owner)
        crash(transport, owner)  # the zombie's thread stops; its metadata stays stale
        wait_until(
            lambda: (
                (r := other.ownership.get(bundle)) is not None
                and r.broker == other.identity.broker_id
            ),
            what="takeover",
        )
        cluster = owner.identity.cluster
        before = len(transport.broker.records(ownership_topic(cluster)))
        current = other.ownership.get(bundle)
        zombie = owner.member
        claim = new_record(bundle, current, BundleState.OWNED, "zombie", 0, zombie._decider())
        with pytest.raises(GroupFencedError):
            zombie._commit([claim], {slot: 0})
        assert len(transport.broker.records(ownership_topic(cluster))) == before
        assert other.ownership.get(bundle) == current
        assert_log_invariants(transport, cluster)


def test_unload_frees_the_bundle_and_the_next_lookup_claims_it_again() -> None:
    with memory_cluster(2) as (transport, services):
        topic = TopicName.parse("persistent://public/default/u")
        look_up_all(services[0], [topic])
        bundle = services[0].lookups.bundle_of(topic)
        ns, _, rng = bundle.rpartition("/")

        async def unload() -> bool:
            return await services[1].admin.unload_bundle(NamespaceName.parse(ns), rng)

        assert asyncio.run(unload()) is True
        wait_until(
            lambda: all(
                (r := s.ownership.get(bundle)) is not None and r.state is BundleState.FREE
                for s in services
            ),
            what="free",
        )
        assert services[0].lookups.lookup_now(topic) is None
        look_up_all(services[1], [topic])
        wait_until(
            lambda: (
                (r := services[0].ownership.get(bundle)) is not None
                and r.state is BundleState.OWNED
            ),
            what="owned again everywhere",
        )


def test_split_changes_the_layout_everywhere_and_drops_the_parent_record() -> None:
    with memory_cluster(2) as (transport, services):
        ns = NamespaceName("t", "split")
        services[0].admin.create_namespace(ns, num_bundles=1)
        topics = topics_in(str(ns), 10)
        look_up_all(services[0], topics)
        parent = f"{ns}/0x00000000_0xffffffff"
        wait_until(lambda: services[1].ownership.get(parent) is not None, what="parent owned")
        low, high = services[1].admin.split_bundle(ns, "0x00000000_0xffffffff")
        assert (low, high) == ("0x00000000_0x7fffffff", "0x7fffffff_0xffffffff")
        for s in services:
            wait_until(
                partial(lambda s: s.lookups.layout(ns).bundles.to_json()["numBundles"] == 2, s),
                what="layout",
            )
        # unload=False: the children are claimed at once; the parent's record is dropped.
        wait_until(
            lambda: all(
                (r := services[0].ownership.get(f"{ns}/{b}")) is not None
                and r.state is BundleState.OWNED
                for b in (low, high)
            ),
            what="children owned",
        )
        wait_until(lambda: services[0].ownership.get(parent) is None, what="parent dropped")
        with pytest.raises(NotFoundError):
            services[0].admin.split_bundle(ns, "0x00000000_0xffffffff")
        result = look_up_all(services[1], topics)
        assert all(result)


def test_metadata_writes_are_decided_on_a_complete_view() -> None:
    with memory_cluster(3) as (transport, services):
        ns = NamespaceName("t", "race")

        async def race() -> list[object]:
            return list(
                await asyncio.gather(
                    *(
                        asyncio.to_thread(s.admin.create_namespace, ns, num_bundles=2)
                        for s in services
                    ),
                    return_exceptions=True,
                )
            )

        results = asyncio.run(race())
        assert sum(isinstance(r, ConflictError) for r in results) == 2
        assert services[2].store.layout(ns) is not None


def test_requests_for_foreign_or_unknown_bundles_are_harmless() -> None:
    with memory_cluster(2) as (transport, services):
        services[0].member.request(RequestOp.ACQUIRE, "nosuch/ns/0x00000000_0xffffffff")
        services[0].member.request(RequestOp.UNLOAD, "public/default/0x00000000_0x40000000")
        time.sleep(0.2)
        assert services[0].ownership.get("nosuch/ns/0x00000000_0xffffffff") is None
        assert all(s.member.state.value == "ACTIVE" for s in services)


def test_a_member_fenced_by_its_own_timed_out_transaction_renews_its_producer() -> None:
    """The coordinator aborting our transaction after transaction.timeout.ms (a stalled
    process) bumps the epoch: the producer is fenced though no other process took the broker
    id. The member renews its producer and keeps deciding; it does not FAIL the service."""
    _renews_after_its_own_fence(unreadable_registry=0)


def test_a_member_fenced_again_soon_after_a_renewal_renews_again() -> None:
    """A second fence within the renewal window with no newer incarnation registered (a
    fresh-clone CI run, 2026-11-29: the epoch bump, retried on CONCURRENT_TRANSACTIONS,
    landed after the member had renewed) is renewed too, after a back-off: only a newer
    registration of the broker id makes a fence final."""
    _renews_after_its_own_fence(unreadable_registry=0, bumps=2)


def test_a_fenced_member_that_cannot_read_the_registry_yet_retries_and_renews() -> None:
    """Whether a newer incarnation took the broker id is read from the registry; when that
    read times out (a loaded machine), the member does not give its broker id up: the step
    is tried again, still fenced (nothing written), and the producer is renewed once the
    registry answers. (A fresh-clone run failed its cluster service this way, 2026-11-29.)"""
    _renews_after_its_own_fence(unreadable_registry=2)


def _agrees(service: ClusterService, topics: list[TopicName], expected: list[bytes]) -> bool:
    return answers(service, topics) == expected


def _renews_after_its_own_fence(*, unreadable_registry: int, bumps: int = 1) -> None:
    """Bump the victim's transactional epoch as the coordinator does after
    transaction.timeout.ms, ``bumps`` times (each after the previous renewal); the registry
    read that decides whether to renew fails ``unreadable_registry`` times first. The member
    renews each time and keeps deciding."""
    from sync._constants import OWNERSHIP_TRANSACTIONAL_ID_PREFIX
    from sync._errors import TransportError
    from sync.cluster._ownership_model import MemberState

    with memory_cluster(2) as (transport, services):
        victim = services[0]
        cluster = victim.identity.cluster
        look_up_all(victim, topics_in("public/default", 20))
        member = victim.member
        registered = member._registered_incarnation
        failures = [unreadable_registry]

        def flaky_registry() -> str | None:
            if failures[0] > 0:
                failures[0] -= 1
                raise TransportError("registry sync timed out (test)")
            return registered()

        member._registered_incarnation = flaky_registry  # type: ignore[method-assign]
        topics = topics_in("public/default", 20) + topics_in("public/other", 0)
        for round_ in range(bumps):
            # What the coordinator's epoch bump does to the member's producer.
            bump = transport.producer(
                transactional_id=f"{OWNERSHIP_TRANSACTIONAL_ID_PREFIX}{cluster}.{victim.identity.broker_id}"
            )
            bump.init_transactions(5)
            bump.close()
            # New bundles need claims committed by both members' slots.
            namespace = f"fresh{round_}"
            services[0].admin.create_namespace(NamespaceName("public", namespace), num_bundles=16)
            fresh = topics_in(f"public/{namespace}", 60)
            first = look_up_all(services[1], fresh)
            for s in services:
                wait_until(partial(_agrees, s, fresh, first), what="agreement")
            assert victim.member.producer_renewals == round_ + 1
        assert failures == [0]
        assert victim.member.state is MemberState.ACTIVE and victim.member.failure is None
        assert {r.broker for r in victim.lookups.bundle_records().values()} == {
            s.identity.broker_id for s in services
        }
        assert answers(victim, topics) == answers(services[1], topics)
        assert_log_invariants(transport, cluster)


def test_a_moving_slot_stops_being_served_before_its_new_owner_claims_it() -> None:
    """A joining sidecar takes slots: their old owner is told which topics stop being
    served there (its messaging engine closes them) before the revoke returns, so before
    the new owner may claim their bundles, and it no longer holds those bundles then."""
    with memory_cluster(2) as (transport, services):
        cluster = services[0].identity.cluster
        topics = topics_in("public/default", 40)
        services[0].admin.create_namespace(NamespaceName("public", "spread"), num_bundles=16)
        topics += topics_in("public/spread", 40)
        look_up_all(services[0], topics)
        before = {t: services[0].ownership.get(services[0].lookups.bundle_of(t)) for t in topics}
        #: (broker, topic) -> ownership log length when the broker let the topic go
        released: dict[tuple[str, TopicName], int] = {}

        def hook(service: ClusterService) -> Callable[[Callable[[TopicName], bool]], None]:
            def on_release(moving: Callable[[TopicName], bool]) -> None:
                at = len(ownership_log(transport, cluster))
                for t in topics:
                    if moving(t):
                        assert not service.member.holds(service.lookups.bundle_of(t))
                        released.setdefault((service.identity.broker_id, t), at)

            return on_release

        for s in services:
            s.on_release(hook(s))
        joining = make_service(transport, cluster, 2)
        joining.start()
        try:
            joining.wait_ready(20)
            wait_until(lambda: settled([*services, joining]), what="membership")
            wait_until(lambda: bool(joining.member.active), what="slots for the new member")
            # Every bundle owned again (a lookup during the move is refused, "being unloaded").
            wait_until(lambda: None not in answers(joining, topics), what="owners after the move")
            log = ownership_log(transport, cluster)
            moved = 0
            for t in topics:
                old = before[t]
                assert old is not None
                bundle = services[0].lookups.bundle_of(t)
                claims = [
                    i
                    for i, r in enumerate(log)
                    if r is not None and r.bundle == bundle and r.broker == "b2"
                ]
                if not claims:
                    continue
                moved += 1
                assert joining.member.holds(bundle), f"{bundle} claimed but not held"
                let_go = released.get((old.broker, t))
                assert let_go is not None, f"{t} moved from {old.broker} without a release"
                assert let_go <= claims[0], f"{t} claimed by b2 before {old.broker} let it go"
            assert moved, "no bundle moved to the joining sidecar"
        finally:
            joining.close()
