"""A TCP port held shut, then opened onto another: a client's reconnections wait there
until the test lets them through, so what it does first is the test's choice, not a
race. Connections accepted while shut are held (not refused: a refusal only grows the
client's back-off) and forwarded once :meth:`Gate.open` names where to."""

from __future__ import annotations

import contextlib
import socket
import threading

__all__ = ["Gate"]


def _pump(src: socket.socket, dst: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := src.recv(65536):
            dst.sendall(data)
    for s in (src, dst):
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)


class Gate:
    """Listens on ``127.0.0.1:port``; forwards to ``127.0.0.1:<target>`` once opened."""

    def __init__(self, port: int) -> None:
        self._server = socket.create_server(("127.0.0.1", port), reuse_port=False)
        self._lock = threading.Lock()
        self._held: list[socket.socket] = []
        self._sockets: list[socket.socket] = [self._server]
        self._target: int | None = None
        self.accepted = 0
        self._thread = threading.Thread(target=self._accept, name=f"gate-{port}", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return  # closed
            with self._lock:
                self.accepted += 1
                self._sockets.append(conn)
                if self._target is None:
                    self._held.append(conn)
                    continue
                target = self._target
            self._forward(conn, target)

    def _forward(self, conn: socket.socket, target: int) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", target), timeout=10)
        except OSError:
            conn.close()
            return
        upstream.settimeout(None)
        with self._lock:
            self._sockets.append(upstream)
        for src, dst in ((conn, upstream), (upstream, conn)):
            threading.Thread(target=_pump, args=(src, dst), daemon=True).start()

    def open(self, target: int) -> None:
        """Forward the held connections, and every later one, to ``target``."""
        with self._lock:
            self._target = target
            held, self._held = self._held, []
        for conn in held:
            self._forward(conn, target)

    def close(self) -> None:
        """Stop listening and drop every connection."""
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for s in sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def __enter__(self) -> Gate:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
