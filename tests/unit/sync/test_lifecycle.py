"""The one lifecycle helper: allowed moves checked in one place, one error type."""

from __future__ import annotations

import enum

import pytest

from sync._errors import CacheStateError, LifecycleError, StateTransitionError
from sync._lifecycle import Lifecycle, check_move
from sync.cluster._ownership_model import MEMBER_MOVES, MemberState
from sync.cluster._service import _ALLOWED as SERVICE_MOVES
from sync.cluster._service import ServiceState
from sync.messaging import ConsumerState
from sync.messaging._types import transition
from sync.table import TABLE_MOVES, TableState


class Light(enum.Enum):
    OFF = "OFF"
    ON = "ON"
    BROKEN = "BROKEN"


MOVES = {Light.OFF: {Light.ON}, Light.ON: {Light.OFF, Light.BROKEN}, Light.BROKEN: set()}


def test_moves_follow_the_table_and_the_terminal_state_refuses_quietly() -> None:
    life = Lifecycle("lamp", Light.OFF, MOVES, terminal=Light.BROKEN)
    assert life.move(Light.ON) and life.state is Light.ON
    with pytest.raises(LifecycleError, match="lamp cannot go from ON to ON"):
        life.move(Light.ON)
    assert life.move(Light.BROKEN)
    assert life.move(Light.ON) is False
    assert life.state.value == "BROKEN"


def test_each_component_raises_its_own_error_type() -> None:
    life = Lifecycle("lamp", Light.OFF, MOVES, error=StateTransitionError)
    with pytest.raises(StateTransitionError):
        life.move(Light.BROKEN)
    with pytest.raises(StateTransitionError, match="lamp: OFF → BROKEN"):
        check_move(MOVES, Light.OFF, Light.BROKEN, "lamp", StateTransitionError)
    assert issubclass(CacheStateError, LifecycleError)
    assert issubclass(StateTransitionError, LifecycleError)
    assert not issubclass(StateTransitionError, CacheStateError)


def test_every_state_needs_its_moves_declared() -> None:
    with pytest.raises(ValueError, match="no allowed moves"):
        Lifecycle("lamp", Light.OFF, {Light.OFF: {Light.ON}})


@pytest.mark.parametrize(
    ("initial", "table"),
    [
        (TableState.NEW, TABLE_MOVES),
        (ServiceState.NEW, SERVICE_MOVES),
        (MemberState.NEW, MEMBER_MOVES),
    ],
)
def test_the_components_tables_are_complete(initial: enum.Enum, table: object) -> None:
    Lifecycle("component", initial, table)  # type: ignore[arg-type]


def test_messaging_moves_use_the_helper() -> None:
    assert transition(ConsumerState.ACTIVE, ConsumerState.BLOCKED, "c") is ConsumerState.BLOCKED
    with pytest.raises(StateTransitionError):
        transition(ConsumerState.CLOSED, ConsumerState.ACTIVE, "c")
