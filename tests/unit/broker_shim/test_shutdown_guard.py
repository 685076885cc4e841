"""The bounded graceful stop (``broker-shim run --shutdown-timeout``)."""

from __future__ import annotations

import argparse
import asyncio
import threading

import pytest
from aiohttp import web

from broker_shim._shutdown import ShutdownGuard
from broker_shim.cli.shim import build_parser


def test_a_stop_that_hangs_is_ended_at_the_budget() -> None:
    exited: list[int] = []
    fired = threading.Event()

    def exit_now(code: int) -> None:
        exited.append(code)
        fired.set()

    guard = ShutdownGuard(0.05, exit_now=exit_now)
    guard.arm()
    assert fired.wait(10), "the guard never ended the stop"
    assert exited == [0]


def test_a_stop_that_finishes_is_left_alone() -> None:
    exited: list[int] = []
    guard = ShutdownGuard(0.2, exit_now=exited.append)
    guard.arm()
    guard.disarm()
    assert guard._timer is not None
    guard._timer.join(10)
    assert exited == []


def test_the_guard_arms_before_every_other_shutdown_step_and_disarms_after_cleanup() -> None:
    order: list[str] = []
    exited: list[int] = []
    app = web.Application()

    async def step(_app: web.Application) -> None:
        order.append("release, guard armed" if guard._timer is not None else "release")

    app.on_shutdown.append(step)
    guard = ShutdownGuard(30, exit_now=exited.append)
    guard.install(app)
    app.freeze()

    async def run() -> None:
        await app.shutdown()
        await app.cleanup()

    asyncio.run(run())
    assert order == ["release, guard armed"]
    assert guard._done.is_set() and exited == []


@pytest.mark.parametrize("bad", ["0", "-1", "abc", "inf", "nan"])
def test_shutdown_timeout_must_be_positive_seconds(bad: str) -> None:
    parser = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(
            ["run", "--broker-id", "1", "--http-port", "8080", "--shutdown-timeout", bad]
        )


def test_shutdown_timeout_defaults_to_five_seconds() -> None:
    args = build_parser().parse_args(["run", "--broker-id", "1", "--http-port", "8080"])
    assert isinstance(args, argparse.Namespace)
    assert args.shutdown_timeout == 5.0
