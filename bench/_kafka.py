"""The broker a benchmark runs against: $KAFKA_BOOTSTRAP_SERVERS, else our jar launcher."""

from __future__ import annotations

import contextlib
import os
import platform
from collections.abc import Iterator

from tests.support.kafka import jar_broker


@contextlib.contextmanager
def bench_broker() -> Iterator[str]:
    env = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if env:
        yield env
        return
    with jar_broker() as bootstrap:
        yield bootstrap


def machine() -> str:
    cpus = os.cpu_count()
    mem = ""
    try:
        with open("/proc/meminfo") as fh:
            kb = int(fh.readline().split()[1])
            mem = f", {kb / 1024 / 1024:.0f} GiB"
    except OSError:
        pass
    return f"{platform.machine()} {cpus} cores{mem}, Python {platform.python_version()}"
