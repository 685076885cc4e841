"""A paused process answers 503 until its view caught up (issue 11: double owners right
after a SIGSTOP). Time is a fake clock here; the real SIGSTOP runs in
``tests/integration/sync/cluster/test_ownership_failover.py``."""

from __future__ import annotations

import threading

import pytest

from sync._errors import UnavailableError
from sync.cluster import ViewState
from sync.cluster._freshness import PauseWatch
from sync.naming._names import TopicName

from .test_ownership_cluster import look_up_all, memory_cluster, wait_until


def pause(watch: PauseWatch, seconds: float = 30.0) -> threading.Event:
    """Make ``watch`` see a pause of ``seconds``, its catch-up held until the returned
    event is set (so the STALE state can be looked at without a race)."""
    release = threading.Event()
    catch_up = watch._catch_up

    def held_catch_up() -> None:
        release.wait(30)
        catch_up()

    watch._catch_up = held_catch_up
    watch._tick -= seconds  # as if the process had not run for that long
    return release


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_pause_makes_the_view_stale_until_it_caught_up() -> None:
    clock = FakeClock()
    entered, release = threading.Event(), threading.Event()
    calls: list[float] = []

    def catch_up() -> None:
        calls.append(clock.now)
        entered.set()
        assert release.wait(10)

    watch = PauseWatch(catch_up, name="test", pause_s=1.0, tick_s=0.01, clock=clock).start()
    try:
        clock.now += 0.5  # shorter than a pause: nothing happens
        wait_until(lambda: watch._tick == clock.now, what="a tick")
        assert watch.state.value == "FRESH" and calls == []
        clock.now += 5.0  # the process "did not run" for 5 s
        stale = watch.state
        assert stale is ViewState.STALE  # before the watch thread even ran
        assert entered.wait(10)
        assert watch.state is ViewState.STALE  # while catching up
        release.set()
        wait_until(lambda: watch.state is ViewState.FRESH, what="caught up")
        assert watch.pauses == 1 and watch.last_pause_s == pytest.approx(5.0)
        assert len(calls) == 1
    finally:
        release.set()
        watch.stop()


def test_a_catch_up_that_fails_is_retried_and_the_view_stays_stale() -> None:
    clock = FakeClock()
    failures = [UnavailableError("Kafka is down"), UnavailableError("still down")]

    def catch_up() -> None:
        if failures:
            raise failures.pop(0)

    watch = PauseWatch(catch_up, name="test", pause_s=1.0, tick_s=0.01, clock=clock).start()
    try:
        clock.now += 3.0
        wait_until(lambda: watch.pauses == 1, what="the pause noticed")
        wait_until(lambda: not failures and watch.state is ViewState.FRESH, what="retries")
        assert watch.pauses == 1  # one pause, however many attempts
    finally:
        watch.stop()


def test_a_paused_sidecar_refuses_lookups_until_its_view_caught_up() -> None:
    topics = [TopicName.parse(f"persistent://public/default/t{i}") for i in range(8)]
    with memory_cluster(2) as (_, services):
        first, second = services
        before = look_up_all(first, topics)
        watch = first.pause_watch
        release = pause(watch)  # as if SIGSTOPped for 30 s
        with pytest.raises(UnavailableError, match="paused"):
            first.require_ready()
        assert first.view is ViewState.STALE
        release.set()
        wait_until(lambda: first.view is ViewState.FRESH, what="caught up")
        assert watch.pauses == 1
        first.require_ready()
        assert look_up_all(first, topics) == before == look_up_all(second, topics)
        assert first.status()["view"] == "FRESH" and first.status()["pauses"] == 1
