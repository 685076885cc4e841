"""``make chaos``: the project's own seeded, time-bounded chaos soak (issue #11 item 5).

It drives only the public interfaces — the ``broker-shim run`` and ``policyctl``
processes, HTTP, WebSocket and Kafka — on the 3-broker cluster of
``docker/kafka/kafkactl.py``, injects faults at random (kill -9 of sidecars and of Kafka
brokers, SIGSTOP/SIGCONT zombies, clean restarts), records what every client was told,
and checks at the end that nothing acknowledged was lost, that every cache equals a
fresh replay, that no two sidecars named different owners at once, and how long
failovers and recoveries took. ``python -m chaos`` exits 1 on any violation.

The soak's parts have public names here (and its processes in :mod:`chaos.procs`), so the
tests that check its verdicts need none of its private modules.
"""

from ._faults import Fault
from ._messaging import MessagingStats
from ._observer import Failover, HealthPoller, OwnershipObserver, percentile
from ._poison import HEADER, KINDS, PoisonFuzz
from ._soak import Soak, kafka_outages, overlaps
from ._world import ChaosConfig, World
from ._writers import Writer, lost_writes

__all__ = [
    "HEADER",
    "KINDS",
    "ChaosConfig",
    "Failover",
    "Fault",
    "HealthPoller",
    "MessagingStats",
    "OwnershipObserver",
    "PoisonFuzz",
    "Soak",
    "World",
    "Writer",
    "kafka_outages",
    "lost_writes",
    "overlaps",
    "percentile",
]
