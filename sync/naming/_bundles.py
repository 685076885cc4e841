"""Namespace bundles: how Pulsar shards a namespace's topics by hash range.

A topic's hash is the unsigned CRC-32 of its canonical name (each partition hashed on its
own). A namespace's hash space ``0x00000000..0xffffffff`` is cut at sorted boundaries into
bundles; bundle ``i`` is ``[p[i], p[i+1])`` and the last one also holds ``0xffffffff``.
Ownership and lookup work per bundle, so these rules must match Pulsar exactly or a topic
would be routed to a different owner than a Pulsar broker would pick.
"""

from __future__ import annotations

import string
import zlib
from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TypedDict

from sync._errors import InvalidInputError, NotFoundError
from sync.naming._names import NamespaceName, TopicName, parse_topic_cached

__all__ = [
    "DEFAULT_NUM_BUNDLES",
    "FULL_LOWER",
    "FULL_UPPER",
    "BundleRange",
    "BundlesData",
    "NamespaceBundles",
    "SplitAlgorithm",
    "topic_hash",
]

FULL_LOWER = 0x00000000
FULL_UPPER = 0xFFFFFFFF
DEFAULT_NUM_BUNDLES = 4

# Pulsar takes the bundle count as a Java int.
_MAX_NUM_BUNDLES = 2**31 - 1
_HEX_DIGITS = frozenset(string.hexdigits)


class SplitAlgorithm(StrEnum):
    """How :meth:`NamespaceBundles.split` picks the cut (Pulsar's algorithm names)."""

    RANGE_EQUALLY_DIVIDE = "range_equally_divide"
    TOPIC_COUNT_EQUALLY_DIVIDE = "topic_count_equally_divide"


class BundlesData(TypedDict):
    """JSON body of Pulsar's ``GET /admin/v2/namespaces/{tenant}/{namespace}/bundles``."""

    boundaries: list[str]
    numBundles: int


def topic_hash(topic: TopicName | str) -> int:
    """The unsigned CRC-32 of the topic's canonical name, as Pulsar's bundle factory hashes it.

    A string is parsed first, so short and full forms of one topic hash alike.

    Raises:
        InvalidTopicNameError: ``topic`` is a string that is not a valid topic name.
    """
    if isinstance(topic, str):
        topic = parse_topic_cached(topic)
    # Java's String.getBytes(UTF_8) writes a lone surrogate as "?"; so does "replace".
    return zlib.crc32(topic.canonical.encode("utf-8", "replace"))


def _check_hash(value: int, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputError(f"{what} must be an int, got {type(value).__name__}")
    if not FULL_LOWER <= value <= FULL_UPPER:
        raise InvalidInputError(
            f"{what} {value!r} is outside the hash range 0x00000000..0xffffffff"
        )


def _format(value: int) -> str:
    return f"0x{value:08x}"


@dataclass(frozen=True, slots=True, order=True)
class BundleRange:
    """One hash range ``[lower, upper)``; closed at ``upper`` when that is ``0xffffffff``."""

    lower: int
    upper: int

    def __post_init__(self) -> None:
        _check_hash(self.lower, "bundle lower bound")
        _check_hash(self.upper, "bundle upper bound")
        if self.lower >= self.upper:
            raise InvalidInputError(
                f"Invalid bundle range {self.name}: the lower bound must be below the upper bound"
            )

    @classmethod
    def parse(cls, name: str) -> BundleRange:
        """Parse a bundle name such as ``"0x00000000_0x40000000"``.

        Raises:
            InvalidInputError: the name is not two ``0x`` + 8 hex digit bounds joined by
                ``_`` with the lower one first.
        """
        lower, sep, upper = name.partition("_")
        if not (sep and _is_hex32(lower) and _is_hex32(upper)):
            raise InvalidInputError(
                f"Invalid bundle range {name!r}: expected <lower>_<upper> with each bound "
                "written as 0x and 8 hex digits, e.g. '0x00000000_0x40000000'"
            )
        low, high = int(lower, 16), int(upper, 16)
        if low >= high:
            raise InvalidInputError(
                f"Invalid bundle range {name!r}: the lower bound must be below the upper bound"
            )
        return cls(low, high)

    @property
    def name(self) -> str:
        """``0x%08x_0x%08x``, the bundle's name in Pulsar's admin API and metadata."""
        return f"{_format(self.lower)}_{_format(self.upper)}"

    def contains(self, hash_value: int) -> bool:
        """True if ``hash_value`` falls in this range (upper bound excluded unless 0xffffffff)."""
        if self.upper == FULL_UPPER:
            return self.lower <= hash_value <= FULL_UPPER
        return self.lower <= hash_value < self.upper

    def __str__(self) -> str:
        return self.name


def _is_hex32(text: str) -> bool:
    return len(text) == 10 and text.startswith("0x") and _HEX_DIGITS.issuperset(text[2:])


@dataclass(frozen=True, slots=True)
class NamespaceBundles:
    """A namespace's bundle boundaries: sorted, from 0x00000000 to 0xffffffff.

    Construction validates the boundaries; splits return a new instance.
    """

    namespace: NamespaceName
    boundaries: tuple[int, ...]
    # Built once: find() runs on every lookup and must not allocate.
    _bundles: tuple[BundleRange, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.namespace, NamespaceName):
            raise InvalidInputError(
                f"namespace must be a NamespaceName, got {type(self.namespace).__name__}"
            )
        boundaries = tuple(self.boundaries)
        object.__setattr__(self, "boundaries", boundaries)
        where = f" for namespace {self.namespace}"
        if len(boundaries) < 2:
            raise InvalidInputError(
                f"Invalid bundle boundaries {list(boundaries)!r}{where}: need at least 2 "
                "(0x00000000 and 0xffffffff)"
            )
        for value in boundaries:
            _check_hash(value, f"bundle boundary{where}")
        if boundaries[0] != FULL_LOWER or boundaries[-1] != FULL_UPPER:
            raise InvalidInputError(
                f"Invalid bundle boundaries{where}: they must start at 0x00000000 and end at "
                f"0xffffffff to cover the whole hash range, got first {_format(boundaries[0])} "
                f"and last {_format(boundaries[-1])}"
            )
        for low, high in zip(boundaries, boundaries[1:], strict=False):
            if low >= high:
                raise InvalidInputError(
                    f"Invalid bundle boundaries{where}: they must be strictly increasing, "
                    f"but {_format(low)} is followed by {_format(high)}"
                )
        bundles = tuple(
            BundleRange(low, high) for low, high in zip(boundaries, boundaries[1:], strict=False)
        )
        object.__setattr__(self, "_bundles", bundles)

    @classmethod
    def default(
        cls, namespace: NamespaceName | str, n: int = DEFAULT_NUM_BUNDLES
    ) -> NamespaceBundles:
        """``n`` equal bundles, as Pulsar creates them for a new namespace.

        Boundaries are ``[0, seg, 2*seg, ..., (n-1)*seg, 0xffffffff]`` with
        ``seg = 2**32 // n``, so the last bundle absorbs the remainder.

        Raises:
            InvalidInputError: ``n`` is not an int in 1..2**31-1.
        """
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= _MAX_NUM_BUNDLES:
            raise InvalidInputError(
                f"Invalid number of bundles {n!r}: it must be an int from 1 to {_MAX_NUM_BUNDLES}"
            )
        seg = 2**32 // n
        return cls(_as_namespace(namespace), (*range(0, n * seg, seg), FULL_UPPER))

    @classmethod
    def from_boundaries(
        cls, namespace: NamespaceName | str, boundaries: Iterable[int]
    ) -> NamespaceBundles:
        """Bundles from explicit boundaries (at least 2, strictly increasing, full range).

        Raises:
            InvalidInputError: the boundaries are not a valid partition of the hash range.
        """
        return cls(_as_namespace(namespace), tuple(boundaries))

    @property
    def bundles(self) -> tuple[BundleRange, ...]:
        """The bundles in hash order."""
        return self._bundles

    def find(self, hash_value: int) -> BundleRange:
        """The bundle holding ``hash_value``.

        A hash equal to an interior boundary belongs to the bundle starting there; 0xffffffff
        belongs to the last bundle (where Pulsar's ``getBundle`` would index past the end).

        Raises:
            InvalidInputError: ``hash_value`` is outside 0x00000000..0xffffffff.
        """
        if not FULL_LOWER <= hash_value <= FULL_UPPER:
            _check_hash(hash_value, "topic hash")
        bundles = self._bundles
        index = bisect_right(self.boundaries, hash_value) - 1
        return bundles[index] if index < len(bundles) else bundles[-1]

    def find_topic(self, topic: TopicName | str) -> BundleRange:
        """The bundle that owns ``topic`` (each partition is placed on its own).

        Raises:
            InvalidTopicNameError: ``topic`` is a string that is not a valid topic name.
            InvalidInputError: the topic belongs to another namespace.
        """
        if isinstance(topic, str):
            topic = parse_topic_cached(topic)
        if topic.namespace_name != self.namespace:
            raise InvalidInputError(
                f"topic {topic} is in namespace {topic.namespace_name}, not {self.namespace}; "
                "look it up in its own namespace's bundles"
            )
        return self.find(topic_hash(topic))

    def split(
        self,
        bundle: BundleRange | str,
        algorithm: SplitAlgorithm | str,
        topic_hashes: Iterable[int] = (),
    ) -> NamespaceBundles:
        """Split one bundle in two and return the new bundles of the namespace.

        ``range_equally_divide`` cuts at ``lower + (upper - lower) // 2``.
        ``topic_count_equally_divide`` cuts between the middle two of the sorted hashes of
        the topics in the bundle: ``s + (e - s) // 2`` with ``s = h[max(n//2 - 1, 0)]`` and
        ``e = h[n//2]``. ``topic_hashes`` may hold hashes of the whole namespace; only those
        inside ``bundle`` count.

        Raises:
            NotFoundError: ``bundle`` is not one of this namespace's current bundles.
            InvalidInputError: unknown algorithm, a hash outside the hash range, fewer than
                two topics in the bundle, or the cut would land on a boundary.
        """
        target = BundleRange.parse(bundle) if isinstance(bundle, str) else bundle
        boundaries = self.boundaries
        index = bisect_left(boundaries, target.lower)
        if (
            index >= len(boundaries) - 1
            or boundaries[index] != target.lower
            or boundaries[index + 1] != target.upper
        ):
            raise NotFoundError(
                f"bundle {target.name} is not a bundle of namespace {self.namespace}; "
                "re-read the namespace's bundles, it may have been split already"
            )
        try:
            chosen = SplitAlgorithm(algorithm)
        except ValueError:
            valid = ", ".join(a.value for a in SplitAlgorithm)
            raise InvalidInputError(
                f"Unknown bundle split algorithm {algorithm!r}; valid algorithms: {valid}"
            ) from None

        if chosen is SplitAlgorithm.RANGE_EQUALLY_DIVIDE:
            cut = target.lower + (target.upper - target.lower) // 2
        else:
            cut = _topic_count_cut(target, topic_hashes)

        # Pulsar requires lower < cut < upper; a cut on a boundary would leave an empty bundle.
        if not target.lower < cut < target.upper:
            raise InvalidInputError(
                f"bundle {target.name} of namespace {self.namespace} can't be split with "
                f"{chosen.value}: the split point {_format(cut)} equals a bundle boundary"
            )
        new_boundaries = (*boundaries[: index + 1], cut, *boundaries[index + 1 :])
        return NamespaceBundles(self.namespace, new_boundaries)

    def to_json(self) -> BundlesData:
        """The bundles as Pulsar's admin API returns them (``BundlesData``)."""
        return {
            "boundaries": [_format(value) for value in self.boundaries],
            "numBundles": len(self._bundles),
        }


def _as_namespace(namespace: NamespaceName | str) -> NamespaceName:
    return NamespaceName.parse(namespace) if isinstance(namespace, str) else namespace


def _topic_count_cut(target: BundleRange, topic_hashes: Iterable[int]) -> int:
    hashes: list[int] = []
    for value in topic_hashes:
        _check_hash(value, "topic hash")
        if target.contains(value):
            hashes.append(value)
    count = len(hashes)
    if count <= 1:
        raise InvalidInputError(
            f"bundle {target.name} holds {count} topic(s); topic_count_equally_divide needs at "
            "least 2 (use range_equally_divide to split by hash range)"
        )
    hashes.sort()
    # max() only matters for count < 2, refused above; kept to read like Pulsar's source.
    start = hashes[max(count // 2 - 1, 0)]
    end = hashes[count // 2]
    return start + (end - start) // 2
