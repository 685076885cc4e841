"""Sidecars with the Pulsar binary protocol for the binary-protocol tests."""

from __future__ import annotations

import uuid
from pathlib import Path

from broker_shim._binary_app import BINARY_KEY
from broker_shim._http import build_app
from broker_shim._sidecar import Sidecar, SidecarConfig
from broker_shim.binary import BinaryServer
from tests.integration._ws_harness import ThreadSidecar, make_topic, wait_healthy
from tests.kafka_broker import free_port

__all__ = ["BinarySidecar", "make_topic", "wait_healthy"]


class BinarySidecar(ThreadSidecar):
    """The real sidecar app served from a thread, with its ``pulsar://`` listener."""

    def __init__(self, bootstrap: str, state_dir: Path, advertised_url: str | None = None) -> None:
        """``advertised_url``: what lookups answer (default: the listener itself)."""
        super().__init__(bootstrap, state_dir, app_factory=self._build)
        self.broker_port = free_port()
        self.broker_url = f"pulsar://127.0.0.1:{self.broker_port}"
        self.sidecar = Sidecar(
            SidecarConfig(
                broker_id=f"b-{uuid.uuid4().hex[:6]}",
                http_port=self.port,
                bootstrap_servers=bootstrap,
                state_dir=state_dir,
                broker_port=self.broker_port,
                broker_url=advertised_url,
            )
        )
        self.server: BinaryServer | None = None

    def _build(self) -> object:
        app = build_app(self.sidecar)
        self.server = app[BINARY_KEY]
        return app

    def __enter__(self) -> BinarySidecar:
        super().__enter__()
        return self
