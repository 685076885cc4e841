"""The in-process lookup rate (``LookupService.lookup_now``), as a script of its own: run by
``bench.lookup`` in a child process with ``PYTHONPATH`` set to the checkout to measure
(this one, or another one's code for a before/after comparison), so it imports nothing of
``bench``. Prints ``{"warm": lookups/s, "first_sight": lookups/s}``.

    python bench/_lookup_inprocess.py BOOTSTRAP
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid

from sync import NamespaceName, TopicName
from sync.cluster import (
    BrokerIdentity,
    ClusterConfig,
    ClusterService,
    LookupConfig,
    OwnershipConfig,
)
from sync.transport import KafkaConfig, KafkaTransport

SESSION_TIMEOUT_MS = 1000
BUNDLES = 16


def bench_inprocess(
    bootstrap: str, names: int = 10_000, seconds: float = 2.0
) -> tuple[float, float]:
    """Lookups per second through one in-process service whose bundles are all owned."""
    cluster = "bench" + uuid.uuid4().hex[:8]
    identity = BrokerIdentity("bench-0", cluster=cluster)
    service = ClusterService(
        KafkaTransport(KafkaConfig(bootstrap)),
        ClusterConfig(
            identity,
            ownership=OwnershipConfig(slots=16, session_timeout_ms=SESSION_TIMEOUT_MS),
            lookup=LookupConfig(default_namespaces=()),
        ),
    ).start()
    try:
        service.wait_ready(60)
        namespace = NamespaceName("bench", cluster)
        service.admin.create_namespace(namespace, num_bundles=BUNDLES)
        texts = [f"persistent://{namespace}/topic-{i}" for i in range(names)]

        async def own_all() -> None:
            await asyncio.gather(*(service.lookups.lookup(TopicName.parse(t)) for t in texts[:256]))

        asyncio.run(own_all())
        lookup_now = service.lookups.lookup_now
        assert all(lookup_now(t) is not None for t in texts)  # noqa: S101 - a setup check
        count, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            for text in texts:
                lookup_now(text)
            count += len(texts)
        warm = count / (time.perf_counter() - started)
        fresh = [f"persistent://{namespace}/new-{i}" for i in range(100_000)]
        started = time.perf_counter()
        for text in fresh:
            lookup_now(text)
        first_sight = len(fresh) / (time.perf_counter() - started)
        return warm, first_sight
    finally:
        service.close()


if __name__ == "__main__":
    warm, first_sight = bench_inprocess(sys.argv[1])
    print(json.dumps({"warm": warm, "first_sight": first_sight}))
