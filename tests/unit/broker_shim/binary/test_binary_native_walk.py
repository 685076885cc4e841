"""The compiled batch walk (native/src/lib.rs) against an oracle built on protobuf's own
runtime (upb): randomized valid and corrupted batches, from a fixed seed, are accepted or
refused alike, with the same words, counts and sequence ids."""

from __future__ import annotations

import random
import struct
from collections import Counter

import pytest
from google.protobuf.message import DecodeError
from policy_sync_native import walk_batch

from broker_shim.binary import PulsarApi_pb2 as api
from broker_shim.binary._entries import check_entry
from broker_shim.binary._framing import FrameError

_SEED = 20261128
_CASES = 10_000

Outcome = tuple[int, int | None] | str


def _oracle(data: bytes, count: int) -> Outcome:
    """The walk as the Python loop did it, with upb's ParseFromString and IsInitialized
    (the required-field check unpack_messages makes)."""
    single = api.SingleMessageMetadata()
    total = len(data)
    pos = 0
    for index in range(count):
        if total - pos < 4:
            return f"batch truncated at message {index} of {count}"
        (size,) = struct.unpack_from(">I", data, pos)
        pos += 4
        end = pos + size
        if size == 0 or end > total:
            return f"batch message {index}: metadata size {size} does not fit"
        try:
            single.ParseFromString(data[pos:end])
        except DecodeError as exc:
            return f"batch message {index}: undecodable metadata: {exc}"
        if not single.IsInitialized():
            return f"batch message {index}: metadata lacks required fields"
        pos = end + single.payload_size
        if single.payload_size < 0 or pos > total:
            return f"batch message {index}: payload size {single.payload_size} does not fit"
    if pos != total:
        return f"batch has {total - pos} bytes after its {count} messages"
    return count, single.sequence_id if single.HasField("sequence_id") else None


def _native(data: bytes, count: int) -> Outcome:
    try:
        return walk_batch(data, count)
    except ValueError as exc:
        return str(exc)


def _plain(value: int) -> bytes:
    """``value`` as a varint of the fewest bytes (a negative one: its 64-bit two's complement)."""
    value &= (1 << 64) - 1
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _varint(rng: random.Random, value: int) -> bytes:
    """``value`` as a varint, sometimes padded with continuation bytes (still valid up to
    10 bytes), sometimes overlong or cut short."""
    out = bytearray(_plain(value))
    roll = rng.random()
    if roll < 0.1 and len(out) < 11:  # padded: 0x80 ... 0x00
        out[-1] |= 0x80
        out += b"\x80" * rng.randrange(0, 11 - len(out)) + b"\x00"
    elif roll < 0.13:
        out = out[:-1] + bytes([out[-1] | 0x80])  # never ends
    return bytes(out)


def _tag(rng: random.Random, field: int, wire: int) -> bytes:
    return _varint(rng, field << 3 | wire) if rng.random() < 0.97 else _plain(field << 3 | wire)


def _field(rng: random.Random, depth: int = 0) -> bytes:
    """One field of a random number and wire type, its value more or less well formed."""
    field = rng.choice([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 15, 16, 100, 2**29 - 1])
    wire = rng.choices(range(8), weights=[30, 8, 30, 6, 2, 8, 1, 1])[0]
    head = _tag(rng, field, wire)
    if wire == 0:
        value = rng.choice(
            [0, 1, 2**31 - 1, 2**31, 2**32, 2**63, 2**64 - 1, -1, rng.getrandbits(40)]
        )
        return head + _varint(rng, value)
    if wire == 1:
        return head + rng.randbytes(rng.choice([8, 8, 8, 3]))
    if wire == 5:
        return head + rng.randbytes(rng.choice([4, 4, 4, 1]))
    if wire == 2:
        body = (
            _key_value(rng, depth + 1)
            if field == 1 and rng.random() < 0.6
            else rng.randbytes(rng.randrange(0, 6))
        )
        size = len(body) + rng.choice([0] * 12 + [-1, 1, 3])
        return head + _varint(rng, max(size, 0)) + body
    if wire == 3:
        inner = b"".join(_field(rng, depth + 1) for _ in range(rng.randrange(0, 3)) if depth < 3)
        end = field if rng.random() < 0.9 else rng.choice([field + 1, 0])
        return head + inner + _plain(end << 3 | 4)
    return head  # an end group of its own, wire types 6 and 7


def _key_value(rng: random.Random, depth: int) -> bytes:
    kv = api.KeyValue(key=rng.choice(["k", "", "ключ"]), value=rng.choice(["v", ""]))
    data = kv.SerializeToString()
    if rng.random() < 0.2:
        data = data[: rng.randrange(0, len(data) + 1)]  # key or value cut off
    if rng.random() < 0.2:
        data += _field(rng, depth)
    return data


def _metadata(rng: random.Random, payload_size: int, index: int) -> bytes:
    """A SingleMessageMetadata as a client writes it, then sometimes damaged."""
    single = api.SingleMessageMetadata(payload_size=payload_size)
    if rng.random() < 0.6:
        single.sequence_id = rng.choice([index, 2**63 + index, 2**64 - 1, 0])
    if rng.random() < 0.4:
        single.partition_key = f"key-{index}"
    for i in range(rng.choice([0, 0, 1, 3])):
        single.properties.add(key=f"p{i}", value="x" * i)
    if rng.random() < 0.2:
        single.event_time = rng.getrandbits(64)
    if rng.random() < 0.1:
        single.null_value = single.compacted_out = True
    if rng.random() < 0.1:
        single.ordering_key = rng.randbytes(3)
    data = bytearray(single.SerializeToString())
    roll = rng.random()
    if roll < 0.25:  # random fields among the client's
        for _ in range(rng.randrange(1, 4)):
            at = rng.randrange(0, len(data) + 1)
            data[at:at] = _field(rng)
    elif roll < 0.32:  # a byte flipped
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif roll < 0.36:  # cut short
        del data[rng.randrange(len(data)) :]
    elif roll < 0.40:  # anything
        data = bytearray(rng.randbytes(rng.randrange(1, 12)))
    elif roll < 0.43:  # payload_size of another wire type, or negative
        single.ClearField("payload_size")
        data = bytearray(single.SerializePartialToString())
        data += rng.choice([b"\x1d\x05\x00\x00\x00", _plain(3 << 3) + _plain(2**64 - 7)])
    return bytes(data)


def _batch(rng: random.Random) -> tuple[bytes, int]:
    count = rng.choice([1, 1, 2, 3, 5, 10, 30])
    out = bytearray()
    for index in range(count):
        payload = rng.randbytes(rng.choice([0, 1, 5, 100]))
        meta = _metadata(rng, len(payload), index)
        size = len(meta) if rng.random() < 0.97 else rng.choice([0, len(meta) + 1, 2**32 - 1])
        out += struct.pack(">I", size) + meta + payload
    roll = rng.random()
    if roll < 0.03:
        count += rng.choice([-1, 1]) if count > 1 else 1
    elif roll < 0.06 and out:
        del out[rng.randrange(len(out)) :]
    elif roll < 0.08:
        out += rng.randbytes(rng.randrange(1, 5))
    return bytes(out), count


_KINDS = (
    "metadata lacks required fields",
    "undecodable metadata: Error parsing message with type "
    "'pulsar.proto.SingleMessageMetadata': Wire format was corrupt",
    "metadata size",
    "payload size",
    "batch truncated",
    "bytes after its",
)


def _kind(outcome: Outcome) -> str:
    if not isinstance(outcome, str):
        return "accepted"
    return next((kind for kind in _KINDS if kind in outcome), outcome)


def test_the_native_walk_accepts_and_refuses_as_protobuf_s_runtime() -> None:
    rng = random.Random(_SEED)
    kinds: Counter[str] = Counter()
    for case in range(_CASES):
        data, count = _batch(rng)
        expected = _oracle(data, count)
        assert _native(data, count) == expected, f"case {case}: {data.hex()} count {count}"
        kinds[_kind(expected)] += 1
    # the corpus reaches every outcome, and often
    assert kinds["accepted"] > _CASES // 4, kinds
    assert set(kinds) == {"accepted", *_KINDS}, kinds
    assert min(kinds.values()) >= 10, kinds


_G, _E = b"\x5b", b"\x5c"  # start and end of a group of field 11, unknown


@pytest.mark.parametrize(
    "meta",
    [
        b"\x00\x01",  # field number 0
        b"\x18\x01" + _G + b"\x00\x01\x03\x04" + _E,  # field 0 inside a group: taken
        b"\x18\x01" + _G + b"\x04" + _E,  # another group's end
        b"\x18\x01\x04",  # an end without a group
        b"\x18\x01" + _G * 100 + _E * 100,  # as deep as upb goes
        b"\x18\x01" + _G * 101 + _E * 101,
        b"\x18\x01\x3a\x80\x80\x80\x80\x00",  # a size of 5 bytes
        b"\x18\x01\x3a\x80\x80\x80\x80\x80\x00",  # of 6
        b"\x18\x01\xf8\xff\xff\xff\x0f\x01",  # the highest field number
        b"\x18\x01\xf8\xff\xff\xff\x1f\x01",  # a tag past 32 bits
        b"\x18" + b"\xff" * 9 + b"\x01",  # payload_size -1
        b"\x18\x80\x80\x80\x80\x10",  # 2^32: its low 32 bits are 0
        b"\x18\x00\x40" + b"\xff" * 9 + b"\x7f",  # bits past the 64th
        b"\x18\x00\x40" + b"\xff" * 10 + b"\x01",  # 11 bytes
        b"\x18\x00\x12\x02\xff\xfe",  # a partition key that is not UTF-8
        b"\x18\x00\x0a\x07\x0a\x01k\x12\x01v\x00",  # a property with a field 0
    ],
)
def test_edges_of_the_wire_format_are_judged_as_protobuf_s_runtime(meta: bytes) -> None:
    batch = struct.pack(">I", len(meta)) + meta
    assert _native(batch, 1) == _oracle(batch, 1)


@pytest.mark.parametrize(
    "meta",
    [
        b"\x48\x01",  # null_value only
        b"\x40\x05",  # a sequence id only
        b"\x1d\x01\x00\x00\x00",  # payload_size as fixed32: an unknown field
        b"\x18\x00\x0a\x03\x0a\x01k",  # a property without its value
    ],
    ids=["null-value-only", "sequence-only", "wrong-wire-type", "property-without-value"],
)
def test_a_message_without_its_required_fields_is_refused_at_publish(meta: bytes) -> None:
    batch = struct.pack(">I", len(meta)) + meta
    metadata = api.MessageMetadata(
        producer_name="p", sequence_id=7, publish_time=1, num_messages_in_batch=1
    )
    with pytest.raises(FrameError, match="^batch message 0: metadata lacks required fields$"):
        check_entry(metadata, batch, is_chunk=False)
