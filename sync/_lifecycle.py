"""One lifecycle helper: explicit states, allowed transitions checked in one place.

Every component with states (the compacted tables and the policy cache, the cluster
service, the ownership member, messaging producers/consumers/subscriptions) declares its
states as an :class:`enum.Enum` and its allowed moves as a table, and moves only through
:meth:`Lifecycle.move`. A move the table does not allow raises the component's
:class:`~sync._errors.LifecycleError` subclass, except out of the terminal state (a
close racing a failure, say), which is refused quietly: ``move`` returns False.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Iterable, Mapping
from typing import Generic, TypeVar

from ._errors import LifecycleError

__all__ = ["Lifecycle", "check_move"]

logger = logging.getLogger(__name__)

S = TypeVar("S", bound=enum.Enum)


def check_move(
    allowed: Mapping[S, Iterable[S]],
    current: S,
    new: S,
    what: str,
    error: type[LifecycleError] = LifecycleError,
) -> S:
    """Return ``new`` if ``current → new`` is in ``allowed``; raise ``error`` otherwise."""
    if new not in allowed[current]:
        raise error(f"{what}: {current.value} → {new.value} is not allowed")
    return new


class Lifecycle(Generic[S]):
    """The state of one component, moved under a lock through an allowed-moves table."""

    def __init__(
        self,
        what: str,
        initial: S,
        allowed: Mapping[S, Iterable[S]],
        *,
        terminal: S | None = None,
        error: type[LifecycleError] = LifecycleError,
        log: logging.Logger | None = None,
    ) -> None:
        self.what = what
        self._allowed = {s: frozenset(nxt) for s, nxt in allowed.items()}
        missing = [s for s in type(initial) if s not in self._allowed]
        if missing:
            raise ValueError(f"{what}: no allowed moves declared for {missing}")
        self._state = initial
        self._terminal = terminal
        self._error = error
        self._log = log or logger
        self._lock = threading.Lock()

    @property
    def state(self) -> S:
        """The current state (a plain read: states are replaced, never mutated)."""
        return self._state

    def allows(self, new: S) -> bool:
        """Whether ``new`` may follow the current state."""
        return new in self._allowed[self._state]

    def move(self, new: S) -> bool:
        """Move to ``new``; False if refused because the component already reached its
        terminal state, the component's error if the table forbids the move."""
        with self._lock:
            if new not in self._allowed[self._state]:
                if self._state is self._terminal:
                    return False
                raise self._error(f"{self.what} cannot go from {self._state.value} to {new.value}")
            self._log.info("%s: %s -> %s", self.what, self._state.value, new.value)
            self._state = new
            return True

    def try_move(self, new: S) -> bool:
        """Move to ``new`` if the table allows it; False (and no move) otherwise."""
        with self._lock:
            if new not in self._allowed[self._state]:
                return False
            self._log.info("%s: %s -> %s", self.what, self._state.value, new.value)
            self._state = new
            return True

    def __repr__(self) -> str:
        return f"Lifecycle({self.what!r}, {self._state.value})"
