"""The reversible mapping between Pulsar topic names and Kafka topic names.

A Pulsar topic ``<domain>://<tenant>/<namespace>/<local>`` (partitioned or not) is
backed by ONE Kafka topic; Pulsar partition ``-partition-N`` is Kafka partition N.

Kafka topic names allow only ``[A-Za-z0-9._-]`` and 249 characters, so the mapping is::

    p.<tenant>.<namespace>.<local>      persistent
    np.<tenant>.<namespace>.<local>     non-persistent

where each part escapes every byte of its UTF-8 encoding that is not ``[A-Za-z0-9-]``
as ``_`` + two lower-case hex digits (``_`` itself becomes ``_5f``, ``.`` becomes
``_2e``). The mapping is injective, so :func:`pulsar_topic_of` inverts it exactly.
"""

from __future__ import annotations

import functools
import string

from sync._constants import COMPACTED_TOPIC_PREFIX
from sync._errors import InvalidTopicNameError

from ._names import TopicDomain, TopicName

__all__ = ["KAFKA_TOPIC_MAX_LEN", "compacted_topic_of", "kafka_topic_of", "pulsar_topic_of"]

KAFKA_TOPIC_MAX_LEN = 249
_PLAIN = frozenset((string.ascii_letters + string.digits + "-").encode("ascii"))
_PREFIX = {TopicDomain.PERSISTENT: "p", TopicDomain.NON_PERSISTENT: "np"}
_DOMAIN = {v: k for k, v in _PREFIX.items()}


def _escape(part: str) -> str:
    out = []
    for byte in part.encode("utf-8", "surrogatepass"):
        out.append(chr(byte) if byte in _PLAIN else f"_{byte:02x}")
    return "".join(out)


def _unescape(part: str) -> str:
    data = bytearray()
    i = 0
    while i < len(part):
        ch = part[i]
        if ch == "_":
            hexpair = part[i + 1 : i + 3]
            if len(hexpair) != 2 or any(c not in "0123456789abcdef" for c in hexpair):
                raise InvalidTopicNameError(f"bad escape {part[i : i + 3]!r} in Kafka topic part")
            data.append(int(hexpair, 16))
            i += 3
        elif ord(ch) < 128 and ord(ch) in _PLAIN:
            data.append(ord(ch))
            i += 1
        else:
            raise InvalidTopicNameError(f"character {ch!r} cannot appear in a mapped Kafka topic")
    return data.decode("utf-8", "surrogatepass")


@functools.lru_cache(maxsize=65_536)
def kafka_topic_of(topic: TopicName) -> str:
    """The Kafka topic backing a Pulsar topic (its partitions share one Kafka topic)."""
    base = topic.base
    name = ".".join(
        (
            _PREFIX[base.domain],
            _escape(base.tenant),
            _escape(base.namespace),
            _escape(base.local_name),
        )
    )
    if len(name) > KAFKA_TOPIC_MAX_LEN:
        raise InvalidTopicNameError(
            f"topic {base.canonical!r} maps to a Kafka name of {len(name)} characters; "
            f"Kafka allows {KAFKA_TOPIC_MAX_LEN}. Use a shorter name"
        )
    return name


def pulsar_topic_of(kafka_topic: str) -> TopicName:
    """Inverse of :func:`kafka_topic_of` (the base, non-partition Pulsar topic)."""
    parts = kafka_topic.split(".")
    if len(parts) != 4 or parts[0] not in _DOMAIN:
        raise InvalidTopicNameError(f"{kafka_topic!r} is not a policy-sync mapped topic name")
    domain = _DOMAIN[parts[0]]
    tenant, namespace, local = (_unescape(p) for p in parts[1:])
    return TopicName(domain, tenant, namespace, local)


def compacted_topic_of(kafka_topic: str) -> str:
    """The companion compacted topic of a data topic (topic compaction: the latest message
    per key up to a horizon; see :mod:`sync.messaging._compaction`). Its prefix makes it
    no mapped name, so :func:`pulsar_topic_of` refuses it and topic listings skip it."""
    return COMPACTED_TOPIC_PREFIX + kafka_topic
