"""Bad input on the binary protocol: thousands of malformed, truncated, oversized and
wrongly checksummed frames. Each such connection gets an error or is closed, the sidecar
keeps serving every other client (a real ``pulsar-client`` throughout), and nothing the bad
frames carried reaches Kafka."""

from __future__ import annotations

import asyncio
import random
import struct
import zlib

import pulsar
import pytest

from broker_shim.binary import BinaryServer
from broker_shim.binary import PulsarApi_pb2 as api
from broker_shim.binary._framing import MAX_FRAME_SIZE, encode_command, encode_payload_command
from sync import TopicName
from tests.integration.broker_shim.binary.test_binary_client import _records
from tests.support.kafka import make_topic
from tests.support.sidecars import BinarySidecar

pytestmark = pytest.mark.timeout(300)

_T = api.BaseCommand
FRAMES = 3000


def _connect() -> bytes:
    cmd = _T(type=_T.CONNECT)
    cmd.connect.client_version = "fuzz"
    cmd.connect.protocol_version = 21
    return encode_command(cmd)


def _producer(topic: TopicName) -> bytes:
    cmd = _T(type=_T.PRODUCER)
    cmd.producer.topic = str(topic)
    cmd.producer.producer_id = 1
    cmd.producer.request_id = 1
    return encode_command(cmd)


def _send(seq: int, meta: api.MessageMetadata, payload: bytes) -> bytes:
    cmd = _T(type=_T.SEND)
    cmd.send.producer_id = 1
    cmd.send.sequence_id = seq
    return encode_payload_command(cmd, meta, payload)


def _meta(**fields: object) -> api.MessageMetadata:
    meta = api.MessageMetadata(producer_name="fuzz", sequence_id=0, publish_time=1)
    for k, v in fields.items():
        setattr(meta, k, v)
    return meta


def _bad_frame(rng: random.Random, seq: int) -> tuple[str, bytes]:
    """One frame that must not store anything (and the kind of damage done)."""
    good = _send(seq, _meta(sequence_id=seq), b"must never be stored %d" % seq)
    kind = rng.choice(
        [
            "checksum",
            "truncated",
            "oversized",
            "garbage",
            "cmd-size",
            "bad-batch",
            "bad-compression",
            "unknown-command",
            "missing-field",
        ]
    )
    if kind == "checksum":  # a flipped bit after the checksum: SEND_ERROR ChecksumError
        data = bytearray(good)
        pos = rng.randrange(len(good) - 20, len(good))
        data[pos] ^= 1 << rng.randrange(8)
        return kind, bytes(data)
    if kind == "truncated":  # the peer dies mid-frame
        return kind, good[: rng.randrange(5, len(good) - 1)]
    if kind == "oversized":
        size = rng.randrange(MAX_FRAME_SIZE + 1, 1 << 32)
        return kind, struct.pack(">I", size) + good[4:]
    if kind == "garbage":
        body = rng.randbytes(rng.randrange(1, 200))
        return kind, struct.pack(">II", len(body) + 4, len(body)) + body
    if kind == "cmd-size":
        return kind, good[:4] + struct.pack(">I", len(good)) + good[8:]
    if kind == "bad-batch":  # a valid checksum over a batch that does not parse
        meta = _meta(sequence_id=seq, num_messages_in_batch=rng.randrange(2, 9))
        return kind, _send(seq, meta, rng.randbytes(rng.randrange(0, 64)))
    if kind == "bad-compression":
        payload = zlib.compress(b"x" * 50)
        meta = _meta(
            sequence_id=seq,
            compression=rng.choice([api.LZ4, api.ZLIB, api.ZSTD, api.SNAPPY]),
            uncompressed_size=rng.choice([10, 49, 51, 10_000]),
        )
        return kind, _send(seq, meta, payload if rng.random() < 0.5 else rng.randbytes(40))
    if kind == "unknown-command":
        cmd = _T(type=rng.choice([_T.NEW_TXN, _T.CONSUMER_STATS, _T.WATCH_TOPIC_LIST, _T.SUCCESS]))
        return kind, encode_command(cmd)
    # a SEND whose required fields are missing
    cmd = _T(type=_T.SEND)
    cmd.send.SetInParent()
    partial = cmd.SerializePartialToString()
    return kind, struct.pack(">II", len(partial) + 4, len(partial)) + partial


async def _read_until(reader: asyncio.StreamReader, stop: int | None) -> list[api.BaseCommand]:
    """Commands the server sends until one of type ``stop`` (None: until it hangs up)."""
    out: list[api.BaseCommand] = []
    while True:
        try:
            header = await asyncio.wait_for(reader.readexactly(4), 20)
        except (asyncio.IncompleteReadError, ConnectionError):
            assert stop is None, "the server hung up on a healthy connection"
            return out
        body = await reader.readexactly(int.from_bytes(header, "big"))
        cmd = _T()
        cmd.ParseFromString(body[4 : 4 + int.from_bytes(body[:4], "big")])
        out.append(cmd)
        if cmd.type == stop:
            return out


def _ping() -> bytes:
    cmd = _T(type=_T.PING)
    cmd.ping.SetInParent()
    return encode_command(cmd)


async def _fuzz(port: int, topic: TopicName, rng: random.Random) -> dict[str, int]:
    kinds: dict[str, int] = {}
    seq = 0
    while sum(kinds.values()) < FRAMES:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        before_connect = rng.random() < 0.1
        if not before_connect:
            writer.write(_connect() + _producer(topic))
            answers = await _read_until(reader, _T.PRODUCER_SUCCESS)
            assert [a.type for a in answers] == [_T.CONNECTED, _T.PRODUCER_SUCCESS], answers
        # A burst of bad frames: checksum errors keep the connection, anything else ends it.
        still_open = True
        for _ in range(rng.randrange(1, 8)):
            kind, frame = _bad_frame(rng, seq)
            seq += 1
            label = "before-connect" if before_connect else kind
            kinds[label] = kinds.get(label, 0) + 1
            writer.write(frame)
            if kind == "truncated":
                writer.write_eof()  # the client dies mid-frame
            if before_connect or kind != "checksum":
                still_open = False
                break
        if still_open:
            writer.write(_ping())
        answers = await _read_until(reader, _T.PONG if still_open else None)
        for a in answers:
            # Only errors (and the PONG) come back; never a receipt.
            assert a.type in (_T.SEND_ERROR, _T.ERROR, _T.PONG), a
            if a.type == _T.SEND_ERROR:
                assert a.send_error.error == api.ChecksumError
        writer.close()
    return kinds


def test_thousands_of_bad_frames_write_nothing_and_harm_no_one(
    kafka_bootstrap: str, sidecar: BinarySidecar
) -> None:
    victim = make_topic(kafka_bootstrap, 1)
    bystander = make_topic(kafka_bootstrap, 1)
    client = pulsar.Client(sidecar.broker_url, operation_timeout_seconds=20)
    producer = client.create_producer(str(bystander), batching_enabled=False)
    consumer = client.subscribe(
        str(bystander), "bystander", initial_position=pulsar.InitialPosition.Earliest
    )
    producer.send(b"before")

    kinds = asyncio.run(_fuzz(sidecar.broker_port, victim, random.Random(14)))
    assert sum(kinds.values()) >= FRAMES
    assert len(kinds) >= 9, kinds  # every kind of damage was tried

    producer.send(b"after")  # the well-behaved client was served all along
    got = [consumer.receive(timeout_millis=20_000).data() for _ in range(2)]
    assert got == [b"before", b"after"]
    assert _records(kafka_bootstrap, victim) == {0: 0}  # nothing the bad frames carried
    assert _records(kafka_bootstrap, bystander) == {0: 2}
    client.close()
    assert sidecar.server is not None
    server = sidecar.server
    assert asyncio.run(_connections_gone(server, 20.0)), f"{len(server.connections)} still open"


async def _connections_gone(server: BinaryServer, timeout_s: float) -> bool:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout_s
    while loop.time() < end:
        if not server.connections:
            return True
        await asyncio.sleep(0.1)
    return False
