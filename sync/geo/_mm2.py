"""MirrorMaker 2's configuration (dedicated mode) for the global-policy topic.

Stdlib only, and it imports nothing from the package: ``docker/geo/geoctl.py`` (a stdlib-only
launcher, like ``docker/kafka/kafkactl.py``) loads this file by path to render
``mm2.properties`` before any virtualenv exists. Errors are therefore plain ``ValueError``.

Every key is explained in docs/geo-design.md §1; each was checked against the 4.1.1 sources
(``org.apache.kafka:connect-mirror:4.1.1``/``connect-runtime:4.1.1`` sources jars):

* ``<source>.consumer.isolation.level = read_committed``: ``MirrorMakerConfig.clusterProps``
  strips the ``<source>.`` prefix, ``connectorBaseConfig`` re-prefixes client keys with
  ``source.``, and ``MirrorConnectorConfig.sourceConsumerConfig`` takes
  ``source.consumer.*``; without it the consumer's default ``read_uncommitted`` copies
  aborted and open transactional records.
* ``topics`` is a list of regexes matched whole (``DefaultTopicFilter``); names starting with
  ``__`` or ``.`` are never mirrored (``ReplicationPolicy.isInternalTopic``), so the global
  topic has its own name.
* ``.properties`` has no inline comments: every comment is on its own line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Mm2Cluster", "Mm2Settings", "render_mm2_properties"]

# An MM2 cluster alias becomes the prefix of remote topics, split on "." by
# DefaultReplicationPolicy.topicSource(): no "." inside it.
_ALIAS = re.compile(r"^[A-Za-z0-9_-]+$")
_DEFAULT_POLICY = "org.apache.kafka.connect.mirror.DefaultReplicationPolicy"
_EXTRA_KEY = re.compile(r"^[A-Za-z0-9_.>-]+$")


@dataclass(frozen=True)
class Mm2Cluster:
    """One Kafka cluster MM2 connects to: its alias (the Pulsar cluster name) and bootstrap."""

    name: str
    bootstrap: str

    def __post_init__(self) -> None:
        if not _ALIAS.match(self.name):
            raise ValueError(
                f"cluster {self.name!r}: MirrorMaker 2 aliases here use only letters, digits, "
                "'_' and '-' (a '.' would split remote topic names)"
            )
        if not self.bootstrap.strip():
            raise ValueError(f"cluster {self.name!r}: empty bootstrap servers")


@dataclass(frozen=True)
class Mm2Settings:
    """What ``mm2.properties`` says: every ordered pair of clusters mirrors ``topic``."""

    clusters: tuple[Mm2Cluster, ...]
    topic: str
    #: One task (thread) per direction: the topic has few partitions.
    tasks_max: int = 1
    #: How often MM2 looks for new source topics (default 600 s).
    refresh_topics_interval_s: int = 30
    #: How often Connect flushes source offsets: what a kill -9 re-copies (default 60 s).
    offset_flush_interval_ms: int = 5000
    #: More ``key = value`` lines, after every other (``geoctl --mm2-set``; a later key
    #: overrides an earlier one): to try a setting, e.g. ``east.consumer.fetch.max.wait.ms``.
    extra: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        names = [c.name for c in self.clusters]
        if len(names) < 2:
            raise ValueError("MirrorMaker 2 needs at least two clusters")
        if len(set(names)) != len(names):
            raise ValueError(f"cluster names repeat: {names}")
        if not _ALIAS.match(self.topic) or self.topic.startswith("__"):
            raise ValueError(
                f"topic {self.topic!r}: MM2 never mirrors names starting with '__' or '.', "
                "and a '.' would be read as a cluster prefix"
            )
        if self.tasks_max < 1 or self.refresh_topics_interval_s < 1:
            raise ValueError("tasks_max and refresh_topics_interval_s must be at least 1")
        if self.offset_flush_interval_ms < 1:
            raise ValueError("offset_flush_interval_ms must be at least 1")
        for key, value in self.extra:
            if not _EXTRA_KEY.match(key) or "\n" in value or "\r" in value:
                raise ValueError(f"extra setting {key!r} = {value!r}: not one properties line")


def render_mm2_properties(settings: Mm2Settings) -> str:
    """``mm2.properties`` for ``org.apache.kafka.connect.mirror.MirrorMaker`` (dedicated mode)."""
    names = [c.name for c in settings.clusters]
    pairs = [(s, t) for s in names for t in names if s != t]
    latency = (
        ("plugin.discovery", "service_load"),
        ("producer.linger.ms", "0"),
        ("offset.flush.interval.ms", str(settings.offset_flush_interval_ms)),
        ("scheduled.rebalance.max.delay.ms", "0"),
    )
    lines = [
        "# Written by sync/geo/_mm2.py (docker/geo/geoctl.py); rewritten on every start.",
        "# Why each key: docs/geo-design.md section 1.",
        f"clusters = {', '.join(names)}",
        *(f"{c.name}.bootstrap.servers = {c.bootstrap}" for c in settings.clusters),
        "# every direction between every two clusters",
        *(f"{s}->{t}.enabled = true" for s, t in pairs),
        f"replication.policy.class = {_DEFAULT_POLICY}",
        "# the global-policy topic only (whole-name regex); no consumer group is mirrored",
        f"topics = {settings.topic}",
        "groups.exclude = .*",
        "# committed records only (else aborted and open transactions are copied); it becomes",
        "# source.consumer.isolation.level of every flow reading that cluster",
        *(f"{c.name}.consumer.isolation.level = read_committed" for c in settings.clusters),
        f"tasks.max = {settings.tasks_max}",
        "# single-broker clusters: remote topics (default 2), MM2's own topics and Connect's",
        "# mm2-{offsets,configs,status}.<source>.internal (default 3)",
        "replication.factor = 1",
        "checkpoints.topic.replication.factor = 1",
        "heartbeats.topic.replication.factor = 1",
        "offset.storage.replication.factor = 1",
        "config.storage.replication.factor = 1",
        "status.storage.replication.factor = 1",
        "# nothing reads heartbeats, checkpoints or offset syncs; with emit.offset-syncs off no",
        "# offset-syncs.* key may be set (the connector refuses it)",
        "emit.heartbeats.enabled = false",
        "emit.checkpoints.enabled = false",
        "sync.group.offsets.enabled = false",
        "emit.offset-syncs.enabled = false",
        "# MM2 mirrors every source's heartbeats topic whatever topics says, unless told not to",
        "heartbeats.replication.enabled = false",
        "# remote topics are pre-created with the source's exact config; no authorizer here",
        "sync.topic.configs.enabled = false",
        "sync.topic.acls.enabled = false",
        f"refresh.topics.interval.seconds = {settings.refresh_topics_interval_s}",
        "# start-up and latency, per herder (the one targeting each cluster): find plugins by",
        "# ServiceLoader only (Kafka's jars list theirs; the default also scans the classpath",
        "# by reflection, seconds per herder); Connect's producer sends at once (Kafka 4",
        "# default 5 ms); source offsets are flushed often; a lost member's task is reassigned",
        "# at once (default after 300 s)",
        *(f"{c.name}.{key} = {value}" for key, value in latency for c in settings.clusters),
    ]
    if settings.extra:
        lines.append("# extra settings (geoctl --mm2-set), after the rest: they win")
        lines += [f"{key} = {value}" for key, value in settings.extra]
    return "\n".join(lines) + "\n"
