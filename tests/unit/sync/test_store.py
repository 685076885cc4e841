from __future__ import annotations

import random
import uuid

import pytest

from sync import Codec
from sync.policy._policy_store import PolicyStore, squeeze, unsqueeze
from tests.support.events import change_event

CODEC = Codec()


def _event(domain: str, tenant: str, ns: str, topic: str, action: str = "UPDATE") -> bytes:
    return CODEC.encode(
        change_event(
            tenant,
            ns,
            topic,
            {"isGlobal": False, "maxConsumerPerTopic": 3},
            action=action,
            domain=domain,
            replicate_to=["standalone"],
            metadata={
                "eventId": str(uuid.uuid4()),
                "author": "ops",
                "timestampMillis": 1_700_000_000_000,
                "origin": "test",
            },
        )
    )


@pytest.mark.parametrize("seed", range(5))
def test_squeeze_round_trips_any_bytes(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(2_000):
        alphabet = [0, 0, 0, 0, 0xFF, 1, 2, 3, rng.randrange(256)]
        data = bytes(rng.choice(alphabet) for _ in range(rng.randrange(80)))
        assert unsqueeze(squeeze(data)) == data


def test_topic_values_are_packed_and_read_back_byte_for_byte() -> None:
    store = PolicyStore(CODEC.header)
    written = {}
    for i in range(200):
        name = f"t{i}" + "x" * (i % 90)  # also topic names whose length needs 2 varint bytes
        key = f"persistent://acme/ops/{name}".encode()
        written[key] = _event("persistent", "acme", "ops", name)
        store.put(key, written[key])
    glob = b"__G__persistent://acme/ops/t1"
    written[glob] = _event("persistent", "acme", "ops", "t1")
    store.put(glob, written[glob])
    for key, value in written.items():
        assert store.get(key) == value
        token = store.token(key)
        assert token is not None and token[0] == 1  # packed, not stored whole
        assert len(token) < len(value) - 40
    assert sorted(store.keys()) == sorted(written)
    assert dict(store.items()) == written
    assert len(store) == len(written)


def test_values_that_do_not_match_their_key_are_kept_whole() -> None:
    store = PolicyStore(CODEC.header)
    cases = {
        b"persistent://acme/ops/a": _event("persistent", "acme", "ops", "b"),  # other topic
        b"persistent://acme/ops/c": _event("non-persistent", "acme", "ops", "c"),
        b"__NS__acme/ops": _event("persistent", "acme", "ops", ""),
        b"persistent://acme/ops/d": b"\xc3\x01" + bytes(8) + b"junk",  # another fingerprint
        b"persistent://acme/ops/e": CODEC.header + b"\x02",  # truncated
        b"": b"\x00\xff\xff",
        b"/": b"",
        b"/x": b"v",
        b"a//": b"w",
        b"persistent://a/b/c/d": _event("persistent", "a", "b", "c/d"),
    }
    for key, value in cases.items():
        store.put(key, value)
    for key, value in cases.items():
        assert store.get(key) == value, key
    assert sorted(store.keys()) == sorted(cases)


def test_insert_many_adds_only_absent_keys_and_names_the_others() -> None:
    store = PolicyStore(CODEC.header)
    first = _event("persistent", "acme", "ops", "a", "INSERT")
    store.put(b"persistent://acme/ops/a", first)
    keys = [b"persistent://acme/ops/a", b"persistent://acme/ops/b", b"persistent://acme/ops/b"]
    values = [_event("persistent", "acme", "ops", n, "INSERT") for n in ("a", "b", "b")]
    assert store.insert_many(keys, values) == [0, 2]
    assert store.get(keys[0]) == first
    assert store.get(keys[1]) == values[1]


def test_pop_token_identity_and_restore() -> None:
    store = PolicyStore(CODEC.header)
    key = b"persistent://acme/ops/a"
    value = _event("persistent", "acme", "ops", "a")
    token = store.put(key, value)
    assert store.token(key) is token and key in store
    state = store.packed_state()
    assert store.pop(key) and not store.pop(key) and key not in store
    assert store.get(key) is None and len(store) == 0
    again = PolicyStore.restore(CODEC.header, state)
    assert again.get(key) == value == again.unpack(key, token)


def test_header_must_be_a_single_object_header() -> None:
    with pytest.raises(ValueError, match="10-byte"):
        PolicyStore(b"\xc3\x01")


def test_a_value_cut_right_after_its_names_is_stored_byte_for_byte() -> None:
    """The truncated record of issue #11 (a body cut after the namespace string) once
    made packing fail with "index out of range" and wedged every fresh replay."""
    store = PolicyStore(CODEC.header)
    full = _event("persistent", "acme", "ops", "orders", "UPDATE")
    for cut in range(len(CODEC.header), len(full) + 1):
        key = b"persistent://acme/ops/orders"
        store.put(key, full[:cut])
        assert store.get(key) == full[:cut]
    store.put_many([b"persistent://acme/ops/x"], [full[: len(CODEC.header) + 20]])
    assert store.get(b"persistent://acme/ops/x") == full[: len(CODEC.header) + 20]
