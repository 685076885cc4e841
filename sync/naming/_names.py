"""Pulsar topic and namespace names, parsed exactly as Pulsar's ``TopicName`` does.

A topic name is written either in full, ``<domain>://<tenant>/<namespace>/<local>``, or in
one of two short forms: ``<local>`` (tenant ``public``, namespace ``default``) and
``<tenant>/<namespace>/<local>`` (both persistent). The canonical string is what Pulsar
hashes to find a topic's bundle, so every rule here must match Pulsar byte for byte; the
quirks copied from Java are marked where they happen.

V1 names (``<domain>://<tenant>/<cluster>/<namespace>/<local>``) are refused: policy-sync
only speaks the V2 layout.

``parse_topic_cached`` is the entry point for hot lookup paths: it memoises parsed names, so
a repeated lookup costs one dictionary probe instead of a parse.
"""

from __future__ import annotations

import functools
import string
import unicodedata
import urllib.parse
from dataclasses import dataclass, field
from enum import StrEnum

from sync._errors import InvalidTopicNameError

__all__ = [
    "DEFAULT_NAMESPACE",
    "PARTITION_SUFFIX",
    "PUBLIC_TENANT",
    "NamespaceName",
    "TopicDomain",
    "TopicName",
    "parse_topic_cached",
]

PUBLIC_TENANT = "public"
DEFAULT_NAMESPACE = "default"
PARTITION_SUFFIX = "-partition-"

# Pulsar's TopicName cache holds 100,000 names; a parsed name is a few hundred bytes, so the
# full cache stays in the tens of megabytes.
_PARSE_CACHE_SIZE = 100_000

_SUFFIX_LEN = len(PARTITION_SUFFIX)
_JAVA_INT_MAX = 2**31 - 1

# Pulsar's NamedEntity pattern is ^[-=:.\w]*$ in Java, where \w is ASCII-only.
_NAMED_ENTITY_CHARS = frozenset(string.ascii_letters + string.digits + "_-=:.")
_NAMED_ENTITY_HINT = "it must be non-empty and use only ASCII letters, digits and _ - = : ."

# Java's Character.isWhitespace, which StringUtils.isBlank uses: the Unicode space, line and
# paragraph separators except the three no-break spaces, plus these ASCII controls. Python's
# str.isspace() disagrees on U+0085 and the no-break spaces.
_JAVA_WHITESPACE_CONTROLS = frozenset("\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f")
_JAVA_NO_BREAK_SPACES = frozenset("\u00a0\u2007\u202f")
_JAVA_SEPARATOR_CATEGORIES = frozenset({"Zs", "Zl", "Zp"})

# Java's String.equalsIgnoreCase compares Character.toUpperCase and then toLowerCase of each
# char, which folds these non-ASCII letters onto ASCII ones ("perſistent" is a valid domain in
# Pulsar). These are all the chars whose simple case mapping lands on an ASCII letter.
_JAVA_CASE_FOLD = str.maketrans({"\u0130": "i", "\u0131": "i", "\u017f": "s", "\u212a": "k"})

_HEX_DIGITS = frozenset(string.hexdigits)


class TopicDomain(StrEnum):
    """Whether a topic's messages are stored (``persistent``) or only relayed."""

    PERSISTENT = "persistent"
    NON_PERSISTENT = "non-persistent"


_DOMAINS: dict[str, TopicDomain] = {d.value: d for d in TopicDomain}


def _domain_of(text: str) -> TopicDomain:
    """Resolve a domain case-insensitively, with Java's equalsIgnoreCase semantics."""
    domain = _DOMAINS.get(text)
    if domain is not None:
        return domain
    folded = text.translate(_JAVA_CASE_FOLD)
    # Only ASCII can match after folding; lower() on other text could invent ASCII letters.
    if folded.isascii():
        domain = _DOMAINS.get(folded.lower())
        if domain is not None:
            return domain
    raise InvalidTopicNameError(
        f"Invalid topic domain: '{text}'; use 'persistent' or 'non-persistent'"
    )


def _check_named_entity(kind: str, value: str, where: str) -> None:
    if not value or not _NAMED_ENTITY_CHARS.issuperset(value):
        raise InvalidTopicNameError(f"Invalid {kind} name {value!r}{where}: {_NAMED_ENTITY_HINT}")


def _is_java_blank(text: str) -> bool:
    for char in text:
        if char in _JAVA_WHITESPACE_CONTROLS:
            continue
        if char in _JAVA_NO_BREAK_SPACES:
            return False
        if unicodedata.category(char) not in _JAVA_SEPARATOR_CATEGORIES:
            return False
    return True


def _java_partition_index(local_name: str) -> int:
    """Pulsar's ``TopicName.getPartitionIndex``: -1 unless the name ends in a partition suffix.

    Java runs ``Integer.parseInt`` on everything after the last ``-partition-`` and keeps the
    result only if it is non-negative and prints back to the same length. So signs, leading
    zeros, spaces and values past 2**31-1 all mean "not a partition". ``parseInt`` accepts any
    Unicode decimal digit in the BMP, and so do we.
    """
    cut = local_name.rfind(PARTITION_SUFFIX)
    if cut < 0:
        return -1
    digits = local_name[cut + _SUFFIX_LEN :]
    if not digits.isdecimal():
        return -1
    # Java parses UTF-16 chars one by one, so a digit outside the BMP is a surrogate pair,
    # which is not a digit.
    if not digits.isascii() and any(ord(char) > 0xFFFF for char in digits):
        return -1
    value = int(digits)
    if value > _JAVA_INT_MAX or len(digits) != len(str(value)):
        return -1
    return value


def _java_url_encode(text: str) -> str:
    # java.net.URLEncoder (what Pulsar's Codec.encode calls) keeps only letters, digits and
    # ". - * _", turns a space into "+", and writes lone surrogates as "?" (so "%3F").
    # Python's quote_plus also keeps "~", which Java escapes.
    return urllib.parse.quote_plus(text, safe="*", errors="replace").replace("~", "%7E")


def _java_url_decode(text: str, where: str) -> str:
    # java.net.URLDecoder (Pulsar's Codec.decode) rejects a "%" not followed by two hex digits;
    # Python's unquote_plus would keep it as it is, so check first.
    start = text.find("%")
    while start >= 0:
        escape = text[start + 1 : start + 3]
        if len(escape) != 2 or not _HEX_DIGITS.issuperset(escape):
            raise InvalidTopicNameError(
                f"Invalid topic name: malformed URL escape {text[start : start + 3]!r} in "
                f"local name {text!r}{where}; percent-encode '%' as %25"
            )
        start = text.find("%", start + 3)
    try:
        # Strict: Java would turn every invalid sequence into U+FFFD, so "%FF" and "%FE"
        # would address one topic, "\uFFFD" (issue 11: one name, one key).
        return urllib.parse.unquote_plus(text, encoding="utf-8", errors="strict")
    except UnicodeDecodeError:
        raise InvalidTopicNameError(
            f"Invalid topic name: local name {text!r}{where} is not UTF-8 once "
            "percent-decoded; percent-encode the UTF-8 bytes of the name"
        ) from None


def _check_path_segment(local_name: str, where: str) -> None:
    """A local name taken from a URL path must be a name a URL path can carry.

    ``.`` and ``..`` are dot segments: HTTP normalizes them away (Pulsar's Jetty never
    routes them to a topic), and control characters (``%00``, ...) are refused by Jetty.
    """
    if local_name in (".", ".."):
        raise InvalidTopicNameError(
            f"Invalid topic name: {local_name!r}{where} is a URL dot segment, not a name"
        )
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in local_name):
        raise InvalidTopicNameError(
            f"Invalid topic name: local name {local_name!r}{where} contains a control "
            "character"
        )


@dataclass(frozen=True, slots=True, repr=False)
class NamespaceName:
    """A V2 namespace, ``<tenant>/<namespace>``; construction validates both parts."""

    tenant: str
    namespace: str

    def __post_init__(self) -> None:
        where = f" in namespace '{self.tenant}/{self.namespace}'"
        _check_named_entity("tenant", self.tenant, where)
        _check_named_entity("namespace", self.namespace, where)

    @classmethod
    def parse(cls, text: str) -> NamespaceName:
        """Parse ``"tenant/namespace"``; V1 ``"tenant/cluster/namespace"`` is refused.

        Stricter than Java's ``String.split``, which drops trailing empty parts and so lets
        Pulsar accept ``"tenant/namespace/"`` as a different name from ``"tenant/namespace"``.

        Raises:
            InvalidTopicNameError: the text is not exactly two valid, non-empty parts.
        """
        parts = text.split("/")
        if len(parts) == 3 and all(parts):
            raise InvalidTopicNameError(
                f"Invalid namespace name {text!r}: V1 names with a cluster segment "
                "(<tenant>/<cluster>/<namespace>) are not supported; use <tenant>/<namespace>"
            )
        if len(parts) != 2:
            raise InvalidTopicNameError(
                f"Invalid namespace format. expected <tenant>/<namespace> but got: {text!r}"
            )
        return _namespace(parts[0], parts[1])

    def __str__(self) -> str:
        return f"{self.tenant}/{self.namespace}"

    def __repr__(self) -> str:
        return f"NamespaceName('{self.tenant}/{self.namespace}')"


# Few namespaces, many topics: share one NamespaceName per namespace instead of validating the
# same tenant and namespace again for every topic parsed.
_namespace = functools.lru_cache(maxsize=4096)(NamespaceName)


@dataclass(frozen=True, slots=True, repr=False, eq=False)
class TopicName:
    """A V2 Pulsar topic name; construction validates every part.

    Equality and hashing use the canonical string, like Pulsar's ``TopicName.equals``.
    Use :meth:`parse` (or :func:`parse_topic_cached` on hot paths) for user input.
    """

    domain: TopicDomain
    tenant: str
    namespace: str
    local_name: str
    # Derived once at construction: lookups read these for every routed message.
    _canonical: str = field(init=False)
    _namespace_name: NamespaceName = field(init=False)
    _partition_index: int = field(init=False)

    def __post_init__(self) -> None:
        domain = self.domain
        if not isinstance(domain, TopicDomain):
            domain = _domain_of(domain)
            object.__setattr__(self, "domain", domain)
        canonical = f"{domain.value}://{self.tenant}/{self.namespace}/{self.local_name}"
        try:
            namespace = _namespace(self.tenant, self.namespace)  # validated once per namespace
        except InvalidTopicNameError:
            # Say it about the topic, as Pulsar does.
            where = f" in topic {canonical!r}"
            _check_named_entity("tenant", self.tenant, where)
            _check_named_entity("namespace", self.namespace, where)
            raise
        first = self.local_name[:1]
        # A name starting with an ASCII letter or digit is not blank: skip the scan.
        if not (first.isascii() and first.isalnum()) and _is_java_blank(self.local_name):
            raise InvalidTopicNameError(
                f"Invalid topic name: local name is blank in {canonical!r}; "
                "give the topic a name after <tenant>/<namespace>/"
            )
        if "/" in self.local_name:
            # Pulsar would read the extra segment as a V1 cluster and address another topic.
            raise InvalidTopicNameError(
                f"Invalid topic name: local name {self.local_name!r} must not contain '/'"
                f" in topic {canonical!r}"
            )
        object.__setattr__(self, "_canonical", canonical)
        object.__setattr__(self, "_namespace_name", namespace)
        object.__setattr__(self, "_partition_index", _java_partition_index(self.local_name))

    @classmethod
    def parse(cls, text: str) -> TopicName:
        """Parse a full or short topic name with Pulsar's ``TopicName.get`` rules.

        Raises:
            InvalidTopicNameError: the name is malformed, uses an unknown domain, has an
                invalid tenant or namespace, a blank local name, or is a V1 name.
        """
        sep = text.find("://")
        if sep < 0:
            # Pulsar splits short names with commons-lang StringUtils.split, which drops
            # empty tokens: "/x" and "x//" are both the short name "x".
            tokens = [token for token in text.split("/") if token]
            if len(tokens) == 1:
                return cls(TopicDomain.PERSISTENT, PUBLIC_TENANT, DEFAULT_NAMESPACE, tokens[0])
            if len(tokens) != 3:
                raise InvalidTopicNameError(
                    f"Invalid short topic name '{text}', it should be in the format of "
                    "<tenant>/<namespace>/<topic> or <topic>"
                )
            # ... but the three-part form keeps the original text, empty tokens and all, so
            # "a//b/c" below becomes four parts (V1).
            domain = TopicDomain.PERSISTENT
            rest = text
            full = f"persistent://{text}"
        else:
            domain = _domain_of(text[:sep])
            rest = text[sep + 3 :]
            full = text
        parts = rest.split("/", 3)
        if len(parts) == 3:
            return cls(domain, parts[0], parts[1], parts[2])
        if len(parts) == 4:
            raise InvalidTopicNameError(
                f"Invalid topic name: {full} has four parts after the domain; V1 names with a "
                "cluster segment (<tenant>/<cluster>/<namespace>/<topic>) are not supported, "
                "use <domain>://<tenant>/<namespace>/<topic>"
            )
        raise InvalidTopicNameError(
            f"Invalid topic name: {full}; expected <domain>://<tenant>/<namespace>/<topic>"
        )

    @classmethod
    def from_rest(
        cls,
        domain: str,
        tenant: str,
        namespace: str,
        local_name: str,
        *,
        encoded: bool = False,
    ) -> TopicName:
        """Build a name from the segments of a Pulsar admin REST path.

        With ``encoded=False`` (the default) the segments are already decoded, as a web
        framework's path parameters are. With ``encoded=True`` they are raw path segments and
        are decoded as Pulsar does: the local name with ``java.net.URLDecoder`` (so ``+`` is a
        space), tenant and namespace with plain percent-decoding, strictly as UTF-8.

        Raises:
            InvalidTopicNameError: a segment is invalid, exactly as :meth:`parse` would say,
                or the local name cannot be a URL path segment (``.``, ``..``, a control
                character such as ``%00``) or is not UTF-8 once percent-decoded.
        """
        where = f" in REST path {domain}/{tenant}/{namespace}/{local_name}"
        if encoded:
            tenant = urllib.parse.unquote(tenant)
            namespace = urllib.parse.unquote(namespace)
            local_name = _java_url_decode(local_name, where)
        _check_path_segment(local_name, where)
        return cls(_domain_of(domain), tenant, namespace, local_name)

    @property
    def canonical(self) -> str:
        """``<domain>://<tenant>/<namespace>/<local>``: the string Pulsar hashes and compares."""
        return self._canonical

    @property
    def namespace_name(self) -> NamespaceName:
        """The namespace this topic lives in."""
        return self._namespace_name

    @property
    def partition_index(self) -> int:
        """The partition number, or -1 if this is not a partition of a partitioned topic."""
        return self._partition_index

    @property
    def is_partition(self) -> bool:
        """True if the name ends in ``-partition-N`` with N in canonical decimal."""
        return self._partition_index >= 0

    @property
    def base(self) -> TopicName:
        """The partitioned topic this partition belongs to; ``self`` if not a partition.

        Raises:
            InvalidTopicNameError: stripping the suffix leaves a blank local name
                (``persistent://t/ns/-partition-0``).
        """
        if self._partition_index < 0:
            return self
        cut = self._canonical.rfind(PARTITION_SUFFIX)
        return parse_topic_cached(self._canonical[:cut])

    def partition(self, index: int) -> TopicName:
        """The name of partition ``index`` of this topic (Pulsar's ``getPartition``).

        Like Pulsar, returns ``self`` for index -1 (the "not a partition" index) and when the
        name already ends in ``-partition-<index>``; otherwise the suffix is appended, even to
        a name that is itself a partition (use ``base.partition(i)`` for a sibling).

        Raises:
            InvalidTopicNameError: index is below -1.
        """
        if index == -1:
            return self
        if index < 0:
            raise InvalidTopicNameError(
                f"Invalid partition index {index} for topic {self._canonical!r}; "
                "partition indexes start at 0"
            )
        suffix = f"{PARTITION_SUFFIX}{index}"
        if self._canonical.endswith(suffix):
            return self
        return parse_topic_cached(self._canonical + suffix)

    @property
    def rest_path(self) -> str:
        """``<domain>/<tenant>/<namespace>/<encoded local>`` as in Pulsar admin REST URLs.

        The local name is encoded with ``java.net.URLEncoder`` rules, as Pulsar's
        ``getRestPath`` does (a space becomes ``+``).
        """
        return (
            f"{self.domain.value}/{self.tenant}/{self.namespace}/"
            f"{_java_url_encode(self.local_name)}"
        )

    def __str__(self) -> str:
        return self._canonical

    def __repr__(self) -> str:
        return f"TopicName({self._canonical!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TopicName):
            return self._canonical == other._canonical
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._canonical)


@functools.lru_cache(maxsize=_PARSE_CACHE_SIZE)
def parse_topic_cached(text: str) -> TopicName:
    """:meth:`TopicName.parse`, memoised for hot lookup paths.

    Returns the same object for the same text while it stays in the cache. Invalid names are
    not cached: they raise :class:`InvalidTopicNameError` every time.
    """
    return TopicName.parse(text)
