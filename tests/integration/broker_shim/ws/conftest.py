"""What the WebSocket tests of this folder share: one sidecar in a thread per test module
(a module that needs another kind defines its own)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.sidecars import ThreadSidecar


@pytest.fixture(scope="module")
def sidecar(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ThreadSidecar]:
    with ThreadSidecar(kafka_bootstrap, tmp_path_factory.mktemp("sidecar")) as s:
        yield s
