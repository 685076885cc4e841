"""Frames of Pulsar's binary protocol: parsing, checksums, batches, compression."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable

import cramjam
import crc32c
import pytest

from broker_shim.binary import PulsarApi_pb2 as api
from broker_shim.binary._framing import (
    ChecksumError,
    FrameError,
    encode_command,
    encode_payload_command,
    parse_frame,
    unpack_messages,
)

_T = api.BaseCommand


def _send_cmd(seq: int = 7) -> api.BaseCommand:
    cmd = _T(type=_T.SEND)
    cmd.send.producer_id = 1
    cmd.send.sequence_id = seq
    return cmd


def _meta(**fields: object) -> api.MessageMetadata:
    meta = api.MessageMetadata(producer_name="p", sequence_id=7, publish_time=1)
    for k, v in fields.items():
        setattr(meta, k, v)
    return meta


def _body(frame: bytes) -> bytes:
    (total,) = struct.unpack_from(">I", frame, 0)
    assert total == len(frame) - 4
    return frame[4:]


def _batch(messages: list[tuple[bytes, str | None, dict[str, str]]]) -> bytes:
    out = bytearray()
    for payload, key, props in messages:
        single = api.SingleMessageMetadata(payload_size=len(payload))
        if key is not None:
            single.partition_key = key
        for k, v in props.items():
            single.properties.add(key=k, value=v)
        data = single.SerializeToString()
        out += struct.pack(">I", len(data)) + data + payload
    return bytes(out)


def test_simple_command_round_trip() -> None:
    cmd = _T(type=_T.PING)
    cmd.ping.SetInParent()
    frame = parse_frame(_body(encode_command(cmd)))
    assert frame.command.type == _T.PING
    assert frame.metadata is None


def test_payload_command_round_trip_with_checksum() -> None:
    wire = encode_payload_command(_send_cmd(), _meta(partition_key="k"), b"hello")
    body = _body(wire)
    cmd_size = struct.unpack_from(">I", body, 0)[0]
    assert struct.unpack_from(">H", body, 4 + cmd_size)[0] == 0x0E01
    checksum = struct.unpack_from(">I", body, 4 + cmd_size + 2)[0]
    assert checksum == crc32c.crc32c(body[4 + cmd_size + 6 :])
    frame = parse_frame(body)
    assert frame.payload == b"hello"
    assert frame.metadata is not None and frame.metadata.partition_key == "k"
    [msg] = unpack_messages(frame.metadata, frame.payload)
    assert (msg.payload, msg.key, msg.sequence_id) == (b"hello", "k", 7)


def test_payload_without_magic_is_accepted_unchecked() -> None:
    cmd = _send_cmd().SerializeToString()
    meta = _meta().SerializeToString()
    body = struct.pack(">I", len(cmd)) + cmd + struct.pack(">I", len(meta)) + meta + b"x"
    frame = parse_frame(body)
    assert frame.payload == b"x"


def test_wrong_checksum_keeps_the_command() -> None:
    body = bytearray(_body(encode_payload_command(_send_cmd(9), _meta(), b"hello")))
    body[-1] ^= 0xFF
    with pytest.raises(ChecksumError) as info:
        parse_frame(bytes(body))
    assert info.value.command.send.sequence_id == 9


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"\x00\x00",
        b"\x00\x00\x00\x00",
        b"\x00\x00\x00\x09abc",
        b"\x00\x00\x00\x03\xff\xff\xff",
        b"\x00\x00\x00\x02\x12\x00",  # a BaseCommand without its required type
    ],
)
def test_malformed_frames_are_refused(body: bytes) -> None:
    with pytest.raises(FrameError):
        parse_frame(body)


def test_truncated_payload_command_is_refused() -> None:
    body = _body(encode_payload_command(_send_cmd(), _meta(), b"hello"))
    for cut in range(1, len(body)):
        try:
            frame = parse_frame(body[:cut])
        except FrameError:
            continue
        # A cut right after the command leaves a valid simple command: no payload then.
        assert frame.metadata is None or frame.payload != b"hello"


def test_batch_is_unpacked_with_keys_and_properties() -> None:
    data = _batch([(b"a", "k1", {"x": "1"}), (b"bb", None, {}), (b"", "k3", {"y": "2"})])
    meta = _meta(num_messages_in_batch=3)
    msgs = unpack_messages(meta, data)
    assert [(m.payload, m.key, m.properties) for m in msgs] == [
        (b"a", "k1", {"x": "1"}),
        (b"bb", None, {}),
        (b"", "k3", {"y": "2"}),
    ]


def test_batch_keeps_present_default_values_apart_from_absent_fields() -> None:
    # An empty key and a sequence id of 0 are present fields; absent ones are None and
    # the batch's first sequence id plus the index (as Pulsar's clients number them).
    out = bytearray()
    for fields in ({"partition_key": "", "sequence_id": 0}, {}, {"sequence_id": 42}):
        data = api.SingleMessageMetadata(payload_size=1, **fields).SerializeToString()
        out += struct.pack(">I", len(data)) + data + b"x"
    msgs = unpack_messages(_meta(num_messages_in_batch=3, sequence_id=100), bytes(out))
    assert [(m.key, m.sequence_id) for m in msgs] == [("", 0), (None, 101), (None, 42)]


@pytest.mark.parametrize("codec", ["LZ4", "ZLIB", "ZSTD", "SNAPPY"])
def test_compressed_batches(codec: str) -> None:
    data = _batch([(b"payload-%d" % i * 10, f"k{i}", {}) for i in range(20)])
    compress: Callable[[bytes], bytes] = {
        "LZ4": lambda d: bytes(cramjam.lz4.compress_block(d, store_size=False)),
        "ZLIB": zlib.compress,
        "ZSTD": lambda d: bytes(cramjam.zstd.compress(d)),
        "SNAPPY": lambda d: bytes(cramjam.snappy.compress_raw(d)),
    }[codec]
    meta = _meta(
        num_messages_in_batch=20,
        compression=getattr(api, codec),
        uncompressed_size=len(data),
    )
    msgs = unpack_messages(meta, compress(data))
    assert [m.key for m in msgs] == [f"k{i}" for i in range(20)]
    assert msgs[3].payload == b"payload-3" * 10


def test_wrong_uncompressed_size_is_refused() -> None:
    data = _batch([(b"x" * 100, None, {})])
    meta = _meta(num_messages_in_batch=1, compression=api.ZLIB, uncompressed_size=len(data) + 1)
    with pytest.raises(FrameError, match="announced"):
        unpack_messages(meta, zlib.compress(data))


def test_corrupt_batches_are_refused() -> None:
    good = _batch([(b"a", None, {}), (b"b", None, {})])
    for count, data in [
        (3, good),  # fewer messages than announced
        (1, good),  # bytes left over
        (2, good[:-1]),  # truncated payload
        (2, b"\x00\x00\x00\x05abc"),  # metadata size past the end
        (0, good),  # no messages
    ]:
        with pytest.raises(FrameError):
            unpack_messages(_meta(num_messages_in_batch=count), data)


def test_decompression_bomb_is_refused() -> None:
    meta = _meta(compression=api.ZLIB, uncompressed_size=64 * 1024 * 1024)
    with pytest.raises(FrameError, match="exceeds"):
        unpack_messages(meta, zlib.compress(b"\x00" * 1000))
