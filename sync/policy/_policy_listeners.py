"""Policy listeners: the latest value per key, delivered off the cache's reader thread."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable

from ._policies import Policies

logger = logging.getLogger(__name__)

__all__ = ["Listener", "ListenerDispatcher"]

#: Called with a key and its new value (None: deleted).
Listener = Callable[[str, Policies | None], None]


class ListenerDispatcher:
    """Delivers the latest value per key to listeners, off the reader thread.

    Updates to one key coalesce (A→B→null→C may arrive as C) and keys are
    delivered in the order they first became pending; a listener's exception is
    logged and counted, never propagated.
    """

    def __init__(self, on_error: Callable[[], None]) -> None:
        self._cond = threading.Condition()
        self._pending: OrderedDict[str, Policies | None] = OrderedDict()
        self._listeners: list[Listener] = []
        self._on_error = on_error
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="policy-listeners", daemon=True)
        self._thread.start()

    def add(self, listener: Listener) -> Callable[[], None]:
        with self._cond:
            self._listeners.append(listener)

        def remove() -> None:
            with self._cond:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return remove

    @property
    def active(self) -> bool:
        return bool(self._listeners)

    def submit(self, key: str, value: Policies | None) -> None:
        with self._cond:
            self._pending[key] = value
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if self._closed and not self._pending:
                    return
                key, value = self._pending.popitem(last=False)
                listeners = list(self._listeners)
            for listener in listeners:
                try:
                    listener(key, value)
                except Exception:
                    self._on_error()
                    logger.exception("policy listener %r failed for %s", listener, key)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=5)
