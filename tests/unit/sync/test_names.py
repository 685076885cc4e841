"""Topic and namespace names follow Pulsar's TopicName / NamespaceName rules exactly."""

from __future__ import annotations

import dataclasses
import re
from typing import Any, cast

import pytest

from sync._errors import InvalidInputError, InvalidTopicNameError
from sync.naming._names import (
    NamespaceName,
    TopicDomain,
    TopicName,
    parse_topic_cached,
)

# --- parsing: accepted names -------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        # short forms
        ("my-topic", "persistent://public/default/my-topic"),
        ("a/b/c", "persistent://a/b/c"),
        ("my-tenant/my-ns/my-topic", "persistent://my-tenant/my-ns/my-topic"),
        # commons-lang StringUtils.split drops empty tokens, so these are the short name "x"
        ("/x", "persistent://public/default/x"),
        ("x/", "persistent://public/default/x"),
        ("//x//", "persistent://public/default/x"),
        # full forms
        ("persistent://a/b/c", "persistent://a/b/c"),
        ("non-persistent://a/b/c", "non-persistent://a/b/c"),
        ("persistent://public/default/my-topic", "persistent://public/default/my-topic"),
        # the domain is case-insensitive and canonically lower case
        ("PERSISTENT://a/b/c", "persistent://a/b/c"),
        ("Persistent://a/b/c", "persistent://a/b/c"),
        ("NON-PERSISTENT://a/b/c", "non-persistent://a/b/c"),
        ("Non-Persistent://a/b/c", "non-persistent://a/b/c"),
        # Java's equalsIgnoreCase folds these non-ASCII letters onto "i" and "s"
        ("pers\u0130stent://a/b/c", "persistent://a/b/c"),
        ("pers\u0131stent://a/b/c", "persistent://a/b/c"),
        ("per\u017fi\u017ftent://a/b/c", "persistent://a/b/c"),
        # tenant and namespace: ASCII letters, digits and _ - = : .
        ("persistent://a-b_c=d:e.f/N-s.1/t", "persistent://a-b_c=d:e.f/N-s.1/t"),
        ("persistent://0/9/t", "persistent://0/9/t"),
        # the local name may hold anything but "/" and must not be blank
        ("persistent://a/b/with space", "persistent://a/b/with space"),
        ("persistent://a/b/ x ", "persistent://a/b/ x "),
        ("persistent://a/b/\u00fcber-\u65e5\u672c", "persistent://a/b/\u00fcber-\u65e5\u672c"),
        ("persistent://a/b/a:b=c%d", "persistent://a/b/a:b=c%d"),
        # Java's Character.isWhitespace is false for no-break spaces, so this is not blank
        ("persistent://a/b/\u00a0", "persistent://a/b/\u00a0"),
        ("persistent://a/b/\u0085", "persistent://a/b/\u0085"),
    ],
)
def test_parse_accepts(text: str, canonical: str) -> None:
    topic = TopicName.parse(text)
    assert topic.canonical == canonical
    assert str(topic) == canonical


@pytest.mark.parametrize(
    ("text", "domain", "tenant", "namespace", "local_name"),
    [
        ("my-topic", TopicDomain.PERSISTENT, "public", "default", "my-topic"),
        ("a/b/c", TopicDomain.PERSISTENT, "a", "b", "c"),
        ("non-persistent://t/n/l", TopicDomain.NON_PERSISTENT, "t", "n", "l"),
        (
            "NON-persistent://t/n/l-partition-2",
            TopicDomain.NON_PERSISTENT,
            "t",
            "n",
            "l-partition-2",
        ),
    ],
)
def test_parse_fields(
    text: str, domain: TopicDomain, tenant: str, namespace: str, local_name: str
) -> None:
    topic = TopicName.parse(text)
    assert topic.domain is domain
    assert topic.tenant == tenant
    assert topic.namespace == namespace
    assert topic.local_name == local_name
    assert topic.namespace_name == NamespaceName(tenant, namespace)
    assert str(topic.namespace_name) == f"{tenant}/{namespace}"


# --- parsing: refused names --------------------------------------------------------------

_SHORT = "it should be in the format of <tenant>/<namespace>/<topic> or <topic>"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", f"Invalid short topic name '', {_SHORT}"),
        ("/", "Invalid short topic name '/'"),
        ("a/b", f"Invalid short topic name 'a/b', {_SHORT}"),
        ("a//b", "Invalid short topic name 'a//b'"),
        ("a/b/c/d", "Invalid short topic name 'a/b/c/d'"),
        ("a/b/c/d/e", "Invalid short topic name 'a/b/c/d/e'"),
        ("foo://a/b/c", "Invalid topic domain: 'foo'"),
        ("://a/b/c", "Invalid topic domain: ''"),
        ("persistent ://a/b/c", "Invalid topic domain: 'persistent '"),
        ("persistentx://a/b/c", "Invalid topic domain: 'persistentx'"),
        ("non_persistent://a/b/c", "Invalid topic domain: 'non_persistent'"),
        ("a/b://c/d/e", "Invalid topic domain: 'a/b'"),
        ("persistent://a/b", "Invalid topic name: persistent://a/b"),
        ("persistent://a", "Invalid topic name: persistent://a"),
        ("persistent://", "Invalid topic name: persistent://"),
        # V1 names (with a cluster) are refused
        ("persistent://prop/cluster/ns/t", "V1 names with a cluster segment"),
        ("persistent://a/b/c/d/e", "V1 names with a cluster segment"),
        ("persistent://a/b/c://d", "V1 names with a cluster segment"),
        # the three-part short form keeps its empty tokens, which makes these four parts
        ("a//b/c", "Invalid topic name: persistent://a//b/c has four parts"),
        ("/a/b/c", "Invalid topic name: persistent:///a/b/c has four parts"),
        ("a/b/c/", "Invalid topic name: persistent://a/b/c/ has four parts"),
        # blank local names (Java StringUtils.isBlank)
        ("persistent://a/b/", "Invalid topic name: local name is blank"),
        ("persistent://a/b/ ", "Invalid topic name: local name is blank"),
        ("persistent://a/b/\t\n\r", "Invalid topic name: local name is blank"),
        ("persistent://a/b/\u2003", "Invalid topic name: local name is blank"),
        ("persistent://a/b/\u2028\u2029\x1c", "Invalid topic name: local name is blank"),
        ("   ", "Invalid topic name: local name is blank"),
        # tenants
        ("persistent:///b/c", "Invalid tenant name ''"),
        ("persistent://t\u00e9/b/c", "Invalid tenant name 't\u00e9'"),
        ("t\u00e9/b/c", "Invalid tenant name 't\u00e9'"),
        ("persistent://a b/ns/c", "Invalid tenant name 'a b'"),
        ("persistent://ten%41/ns/c", "Invalid tenant name 'ten%41'"),
        ("persistent://\uff41/ns/c", "Invalid tenant name '\uff41'"),
        ("persistent://\u0661/ns/c", "Invalid tenant name '\u0661'"),
        ("persistent://a\n/ns/c", "Invalid tenant name 'a\\n'"),
        ("persistent://a*/ns/c", "Invalid tenant name 'a*'"),
        # namespaces
        ("persistent://a//c", "Invalid namespace name ''"),
        ("persistent://a/n\u015b/c", "Invalid namespace name 'n\u015b'"),
        ("persistent://a/b\n/c", "Invalid namespace name 'b\\n'"),
        ("persistent://a/b+c/d", "Invalid namespace name 'b+c'"),
    ],
)
def test_parse_refuses(text: str, message: str) -> None:
    with pytest.raises(InvalidTopicNameError, match=re.escape(message)):
        TopicName.parse(text)


def test_invalid_topic_name_is_an_input_error() -> None:
    with pytest.raises(InvalidInputError):
        TopicName.parse("a/b")


def test_tenant_error_names_the_topic() -> None:
    with pytest.raises(InvalidTopicNameError) as info:
        TopicName.parse("persistent://t\u00e9/ns/x")
    assert "in topic 'persistent://t\u00e9/ns/x'" in str(info.value)
    assert "ASCII" in str(info.value)


# --- partitions ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("local_name", "index"),
    [
        ("t-partition-0", 0),
        ("t-partition-7", 7),
        ("t-partition-10", 10),
        ("t-partition-2147483647", 2147483647),
        ("-partition-3", 3),
        ("t-partition-1-partition-2", 2),
        ("a-partition-b-partition-4", 4),
        # not written in canonical decimal
        ("t-partition-01", -1),
        ("t-partition-00", -1),
        ("t-partition-+1", -1),
        ("t-partition--1", -1),
        ("t-partition--0", -1),
        ("t-partition- 1", -1),
        ("t-partition-1 ", -1),
        ("t-partition-1_0", -1),
        ("t-partition-1a", -1),
        ("t-partition-0x1", -1),
        ("t-partition-", -1),
        ("t-partition-2147483648", -1),
        ("t-partition-99999999999999999999", -1),
        ("t-partition-1-partition-x", -1),
        ("t-partition1", -1),
        ("t_partition_1", -1),
        ("t-Partition-1", -1),
        ("t", -1),
        ("t-partition-\u00b2", -1),
        # Java's Integer.parseInt takes any BMP decimal digit (here Arabic-Indic)...
        ("t-partition-\u0663", 3),
        ("t-partition-\u0661\u0662", 12),
        ("t-partition-\u0660\u0661", -1),
        # ... but sees a digit outside the BMP as two surrogates, which are not digits
        ("t-partition-\U0001d7d1", -1),
    ],
)
def test_partition_index(local_name: str, index: int) -> None:
    topic = TopicName.parse(f"persistent://a/b/{local_name}")
    assert topic.partition_index == index
    assert topic.is_partition is (index >= 0)


def test_partition_suffix_in_tenant_or_namespace_does_not_count() -> None:
    topic = TopicName.parse("persistent://t-partition-1/ns-partition-2/x")
    assert topic.partition_index == -1
    assert topic.base is topic


@pytest.mark.parametrize(
    ("text", "base"),
    [
        ("persistent://a/b/c-partition-3", "persistent://a/b/c"),
        ("a/b/c-partition-0", "persistent://a/b/c"),
        ("NON-PERSISTENT://a/b/c-partition-12", "non-persistent://a/b/c"),
        ("my-topic-partition-5", "persistent://public/default/my-topic"),
        ("persistent://a/b/c-partition-1-partition-2", "persistent://a/b/c-partition-1"),
        ("persistent://a/b/x-partition--partition-1", "persistent://a/b/x-partition-"),
    ],
)
def test_base_strips_last_partition_suffix(text: str, base: str) -> None:
    assert TopicName.parse(text).base == TopicName.parse(base)
    assert TopicName.parse(text).base.canonical == base


@pytest.mark.parametrize(
    "text", ["persistent://a/b/c", "persistent://a/b/c-partition-01", "a/b/c-partition--1"]
)
def test_base_of_non_partition_is_self(text: str) -> None:
    topic = TopicName.parse(text)
    assert topic.base is topic


def test_base_with_blank_remainder_is_refused() -> None:
    topic = TopicName.parse("persistent://a/b/-partition-0")
    assert topic.partition_index == 0
    with pytest.raises(InvalidTopicNameError, match="local name is blank"):
        _ = topic.base


@pytest.mark.parametrize("index", [0, 1, 9, 10, 255, 2147483647])
def test_partition_round_trips(index: int) -> None:
    topic = TopicName.parse("persistent://a/b/orders")
    part = topic.partition(index)
    assert part.canonical == f"persistent://a/b/orders-partition-{index}"
    assert part.partition_index == index
    assert part.base == topic
    assert part.namespace_name == topic.namespace_name


def test_partition_minus_one_is_self() -> None:
    topic = TopicName.parse("a/b/c")
    assert topic.partition(-1) is topic


@pytest.mark.parametrize("index", [-2, -100])
def test_partition_below_minus_one_is_refused(index: int) -> None:
    with pytest.raises(InvalidTopicNameError, match=f"Invalid partition index {index}"):
        TopicName.parse("a/b/c").partition(index)


def test_partition_of_a_partition_follows_pulsar() -> None:
    part = TopicName.parse("a/b/c-partition-3")
    # Same index: Pulsar returns the name itself.
    assert part.partition(3) is part
    # Other index: Pulsar appends another suffix; the sibling comes from base.
    assert part.partition(4).canonical == "persistent://a/b/c-partition-3-partition-4"
    assert part.base.partition(4).canonical == "persistent://a/b/c-partition-4"


# --- equality, hashing, immutability ------------------------------------------------------


def test_short_and_full_forms_are_equal() -> None:
    short = TopicName.parse("my-topic")
    full = TopicName.parse("persistent://public/default/my-topic")
    upper = TopicName.parse("PERSISTENT://public/default/my-topic")
    assert short == full == upper
    assert hash(short) == hash(full) == hash(upper)
    assert len({short, full, upper}) == 1


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ("persistent://a/b/c", "non-persistent://a/b/c"),
        ("persistent://a/b/c", "persistent://a/b/C"),
        ("persistent://a/b/c", "persistent://A/b/c"),
        ("persistent://a/b/c", "persistent://a/b/c-partition-0"),
    ],
)
def test_different_names_are_not_equal(left: str, right: str) -> None:
    assert TopicName.parse(left) != TopicName.parse(right)


def test_topic_name_is_not_equal_to_its_string() -> None:
    topic = TopicName.parse("persistent://a/b/c")
    assert topic != "persistent://a/b/c"
    assert repr(topic) == "TopicName('persistent://a/b/c')"


def test_topic_name_is_frozen() -> None:
    topic = TopicName.parse("a/b/c")
    with pytest.raises(dataclasses.FrozenInstanceError):
        topic.tenant = "x"  # type: ignore[misc]


def test_constructor_validates() -> None:
    topic = TopicName(TopicDomain.NON_PERSISTENT, "a", "b", "c")
    assert topic.canonical == "non-persistent://a/b/c"
    with pytest.raises(InvalidTopicNameError, match="Invalid tenant name"):
        TopicName(TopicDomain.PERSISTENT, "", "b", "c")
    with pytest.raises(InvalidTopicNameError, match="must not contain '/'"):
        TopicName(TopicDomain.PERSISTENT, "a", "b", "c/d")
    with pytest.raises(InvalidTopicNameError, match="local name is blank"):
        TopicName(TopicDomain.PERSISTENT, "a", "b", "")


def test_constructor_resolves_a_domain_string() -> None:
    topic = TopicName(cast(Any, "Non-Persistent"), "a", "b", "c")
    assert topic.domain is TopicDomain.NON_PERSISTENT
    with pytest.raises(InvalidTopicNameError, match="Invalid topic domain: 'queue'"):
        TopicName(cast(Any, "queue"), "a", "b", "c")


def test_topic_domain_values() -> None:
    assert [d.value for d in TopicDomain] == ["persistent", "non-persistent"]
    assert str(TopicDomain.NON_PERSISTENT) == "non-persistent"


# --- REST paths ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ("persistent://a/b/c", "persistent/a/b/c"),
        ("non-persistent://t/n/my-topic", "non-persistent/t/n/my-topic"),
        ("my-topic-partition-1", "persistent/public/default/my-topic-partition-1"),
        # java.net.URLEncoder: letters, digits and . - * _ stay; space is +; ~ is escaped
        ("persistent://a/b/x y", "persistent/a/b/x+y"),
        ("persistent://a/b/a~b", "persistent/a/b/a%7Eb"),
        ("persistent://a/b/a*b.c-d_e", "persistent/a/b/a*b.c-d_e"),
        ("persistent://a/b/100%", "persistent/a/b/100%25"),
        ("persistent://a/b/a+b", "persistent/a/b/a%2Bb"),
        ("persistent://a/b/k=v:w", "persistent/a/b/k%3Dv%3Aw"),
        ("persistent://a/b/\u00e9", "persistent/a/b/%C3%A9"),
        ("persistent://a/b/x\ud800", "persistent/a/b/x%3F"),
    ],
)
def test_rest_path(text: str, path: str) -> None:
    assert TopicName.parse(text).rest_path == path


def test_from_rest_decoded_segments() -> None:
    assert TopicName.from_rest("persistent", "a", "b", "c") == TopicName.parse("a/b/c")
    topic = TopicName.from_rest("NON-PERSISTENT", "a", "b", "x+y%20")
    assert topic.domain is TopicDomain.NON_PERSISTENT
    # Already decoded: "+" and "%20" are literal characters of the name.
    assert topic.local_name == "x+y%20"


@pytest.mark.parametrize(
    ("segments", "local_name"),
    [
        (("persistent", "a", "b", "x+y"), "x y"),
        (("persistent", "a", "b", "x%20y"), "x y"),
        (("persistent", "a", "b", "%C3%A9t%C3%A9"), "\u00e9t\u00e9"),
        (("persistent", "a", "b", "a%7Eb"), "a~b"),
        (("persistent", "a", "b", "a%2Bb"), "a+b"),
        (("persistent", "a", "b", "100%25"), "100%"),
    ],
)
def test_from_rest_encoded_segments(segments: tuple[str, str, str, str], local_name: str) -> None:
    assert TopicName.from_rest(*segments, encoded=True).local_name == local_name


def test_from_rest_encoded_decodes_tenant_and_namespace() -> None:
    topic = TopicName.from_rest("persistent", "%61", "n%73", "c", encoded=True)
    assert topic.canonical == "persistent://a/ns/c"


@pytest.mark.parametrize(
    "text",
    [
        "persistent://a/b/c",
        "persistent://a/b/x y+z",
        "persistent://a/b/\u00fcber~50%",
        "non-persistent://t/n/k=v:w*",
    ],
)
def test_rest_path_round_trips(text: str) -> None:
    topic = TopicName.parse(text)
    domain, tenant, namespace, local_name = topic.rest_path.split("/")
    assert TopicName.from_rest(domain, tenant, namespace, local_name, encoded=True) == topic


@pytest.mark.parametrize(
    ("segments", "encoded", "message"),
    [
        (("topics", "a", "b", "c"), False, "Invalid topic domain: 'topics'"),
        (("persistent", "t\u00e9", "b", "c"), False, "Invalid tenant name 't\u00e9'"),
        (("persistent", "a", "", "c"), False, "Invalid namespace name ''"),
        (("persistent", "a", "b", ""), False, "local name is blank"),
        (("persistent", "a", "b", " "), False, "local name is blank"),
        (("persistent", "a", "b", "c/d"), False, "must not contain '/'"),
        (("persistent", "a", "b", "c%2Fd"), True, "must not contain '/'"),
        (("persistent", "a", "b", "+"), True, "local name is blank"),
        (("persistent", "a", "b", "100%"), True, "malformed URL escape '%'"),
        (("persistent", "a", "b", "x%zzy"), True, "malformed URL escape '%zz'"),
        (("persistent", "a", "b", "x%2"), True, "malformed URL escape '%2'"),
        # issue 11: names a URL path cannot carry, and one name per key.
        (("persistent", "a", "b", "."), False, "is a URL dot segment"),
        (("persistent", "a", "b", "%2E%2E"), True, "is a URL dot segment"),
        (("persistent", "a", "b", "a%00b"), True, "contains a control character"),
        (("persistent", "a", "b", "x\x7fy"), False, "contains a control character"),
        (("persistent", "a", "b", "x%FF"), True, "is not UTF-8 once percent-decoded"),
        (("persistent", "a", "b", "x%C3"), True, "is not UTF-8 once percent-decoded"),
    ],
)
def test_from_rest_refuses(
    segments: tuple[str, str, str, str], encoded: bool, message: str
) -> None:
    with pytest.raises(InvalidTopicNameError, match=re.escape(message)):
        TopicName.from_rest(*segments, encoded=encoded)


# --- the cached parser --------------------------------------------------------------------


def test_parse_topic_cached_returns_the_same_object() -> None:
    first = parse_topic_cached("persistent://cache/test/topic")
    assert parse_topic_cached("persistent://cache/test/topic") is first
    assert first == TopicName.parse("persistent://cache/test/topic")


def test_parse_topic_cached_raises_every_time() -> None:
    for _ in range(2):
        with pytest.raises(InvalidTopicNameError, match="Invalid short topic name 'x/y'"):
            parse_topic_cached("x/y")


# --- namespace names ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "tenant", "namespace"),
    [
        ("public/default", "public", "default"),
        ("my-tenant/my.ns", "my-tenant", "my.ns"),
        ("a_b/c=d:e", "a_b", "c=d:e"),
    ],
)
def test_namespace_parse(text: str, tenant: str, namespace: str) -> None:
    name = NamespaceName.parse(text)
    assert (name.tenant, name.namespace) == (tenant, namespace)
    assert str(name) == text
    assert name == NamespaceName(tenant, namespace)
    assert hash(name) == hash(NamespaceName(tenant, namespace))
    assert repr(name) == f"NamespaceName('{text}')"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "Invalid namespace format"),
        ("public", "Invalid namespace format"),
        ("a/b/c/d", "Invalid namespace format"),
        ("a/b/", "Invalid namespace format"),
        ("a//b", "Invalid namespace format"),
        ("prop/cluster/ns", "V1 names with a cluster segment"),
        ("a/", "Invalid namespace name ''"),
        ("/b", "Invalid tenant name ''"),
        ("t\u00e9/ns", "Invalid tenant name 't\u00e9'"),
        ("a/b c", "Invalid namespace name 'b c'"),
        ("a/b\n", "Invalid namespace name 'b\\n'"),
        ("a/\u0661", "Invalid namespace name '\u0661'"),
    ],
)
def test_namespace_parse_refuses(text: str, message: str) -> None:
    with pytest.raises(InvalidTopicNameError, match=re.escape(message)):
        NamespaceName.parse(text)


def test_namespace_constructor_validates() -> None:
    with pytest.raises(InvalidTopicNameError, match="Invalid namespace name ''"):
        NamespaceName("a", "")
    with pytest.raises(InvalidTopicNameError, match="Invalid tenant name 'a/b'"):
        NamespaceName("a/b", "c")
