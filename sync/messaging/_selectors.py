"""Which consumer gets a message: Failover's active consumer and Key_Shared's hash ring."""

from __future__ import annotations

import base64
import binascii
import bisect
from collections.abc import Sequence
from typing import TYPE_CHECKING

import mmh3

from sync._constants import HEADER_KEY_B64, HEADER_ORDERING_KEY
from sync.routing import murmur3_32_hash

if TYPE_CHECKING:
    from ._consumer import Consumer

__all__ = [
    "KeySharedSelector",
    "NO_KEY",
    "failover_active",
    "message_sticky_hash",
    "sticky_key_hash",
]

#: What Pulsar's Key_Shared dispatcher hashes for a message without a key.
NO_KEY = b"NONE_KEY"
_POINTS = 100


def sticky_key_hash(key: str | None) -> int:
    """Pulsar's sticky-key hash: Murmur3_32 of the key bytes, sign bit cleared."""
    if key is None:
        return int(mmh3.hash(NO_KEY, 0, False)) & 0x7FFFFFFF
    return murmur3_32_hash(key)


def message_sticky_hash(key: str | None, headers: Sequence[tuple[str, bytes]] | None) -> int:
    """The Key_Shared hash of a stored message, as Pulsar's ``peekStickyKey``: its ordering
    key when the client set one, else its partition key (the bytes, when the client sent a
    binary key), else ``NONE_KEY``."""
    if headers:
        binary = False
        for name, raw in headers:
            if name == HEADER_ORDERING_KEY:
                return int(mmh3.hash(raw, 0, False)) & 0x7FFFFFFF
            if name == HEADER_KEY_B64:
                binary = True
        if binary and key is not None:
            try:
                return int(mmh3.hash(base64.b64decode(key), 0, False)) & 0x7FFFFFFF
            except (binascii.Error, ValueError):
                pass  # not base64 after all: hash the text, as it came
    return sticky_key_hash(key)


def failover_active(consumers: Sequence[Consumer], partition_index: int) -> Consumer | None:
    """Pulsar's Failover choice: consumers sorted by name, ``[partition % n]``.

    A non-partitioned topic (index -1) takes the first consumer in that order. Equal
    names are ordered by connection order.
    """
    if not consumers:
        return None
    ordered = sorted(consumers, key=lambda c: (c.name, c.seq))
    return ordered[max(partition_index, 0) % len(ordered)]


class KeySharedSelector:
    """Pulsar's ``ConsistentHashingStickyKeyConsumerSelector`` (100 points per consumer).

    Each consumer owns the points ``murmur3(name + str(i))`` for ``i < 100``; a key goes to
    the consumer of the first point at or above its hash, wrapping around. A point two
    consumers share goes to the one that joined first.
    """

    def __init__(self, points: int = _POINTS) -> None:
        self._points_per_consumer = points
        self._hashes: list[int] = []
        self._owners: list[list[Consumer]] = []

    def add(self, consumer: Consumer) -> None:
        """Place ``consumer``'s points on the ring."""
        for i in range(self._points_per_consumer):
            h = murmur3_32_hash(f"{consumer.name}{i}")
            at = bisect.bisect_left(self._hashes, h)
            if at < len(self._hashes) and self._hashes[at] == h:
                self._owners[at].append(consumer)
            else:
                self._hashes.insert(at, h)
                self._owners.insert(at, [consumer])

    def remove(self, consumer: Consumer) -> None:
        """Take ``consumer``'s points off the ring."""
        keep_h: list[int] = []
        keep_o: list[list[Consumer]] = []
        for h, owners in zip(self._hashes, self._owners, strict=True):
            rest = [c for c in owners if c is not consumer]
            if rest:
                keep_h.append(h)
                keep_o.append(rest)
        self._hashes, self._owners = keep_h, keep_o

    def select(self, key_hash: int) -> Consumer | None:
        """The consumer that owns ``key_hash`` (None when the ring is empty)."""
        if not self._hashes:
            return None
        at = bisect.bisect_left(self._hashes, key_hash)
        if at == len(self._hashes):
            at = 0
        return self._owners[at][0]
