"""A Pulsar broker that stores nothing: every SEND is answered at once.

It measures the benchmark's client program alone (:func:`bench.binary._client_throughput`):
whatever a real broker does, the program cannot send faster than against this one on the
same machine, so it is the ceiling both the sidecar and Pulsar are measured under. It
serves just what the Python ``pulsar-client`` needs to produce on a non-partitioned topic:
CONNECT, PARTITIONED_METADATA, LOOKUP (to itself), PRODUCER, SEND, CLOSE_PRODUCER, PING.

Run: ``python -m bench._null_pulsar PORT`` (serves until killed).
"""

from __future__ import annotations

import asyncio
import sys

from broker_shim.binary import PulsarApi_pb2 as api
from broker_shim.binary._framing import encode_command

__all__ = ["serve"]

_T = api.BaseCommand


def _answer(cmd: api.BaseCommand, port: int) -> api.BaseCommand | None:
    """The answer to one command (None: none is due)."""
    out: api.BaseCommand | None = None
    if cmd.type == _T.CONNECT:
        out = _T(type=_T.CONNECTED)
        out.connected.server_version = "null-pulsar"
        out.connected.protocol_version = min(cmd.connect.protocol_version, 19)
        out.connected.max_message_size = 5 * 1024 * 1024
    elif cmd.type == _T.PARTITIONED_METADATA:
        out = _T(type=_T.PARTITIONED_METADATA_RESPONSE)
        meta = out.partitionMetadataResponse
        meta.request_id = cmd.partitionMetadata.request_id
        meta.partitions = 0
        meta.response = api.CommandPartitionedTopicMetadataResponse.Success
    elif cmd.type == _T.LOOKUP:
        out = _T(type=_T.LOOKUP_RESPONSE)
        lookup = out.lookupTopicResponse
        lookup.request_id = cmd.lookupTopic.request_id
        lookup.response = api.CommandLookupTopicResponse.Connect
        lookup.brokerServiceUrl = f"pulsar://127.0.0.1:{port}"
        lookup.authoritative = True
    elif cmd.type == _T.PRODUCER:
        out = _T(type=_T.PRODUCER_SUCCESS)
        ok = out.producer_success
        ok.request_id = cmd.producer.request_id
        ok.producer_name = f"null-{cmd.producer.producer_id}"
        ok.last_sequence_id = -1
        ok.producer_ready = True
    elif cmd.type == _T.SEND:
        out = _T(type=_T.SEND_RECEIPT)
        receipt = out.send_receipt
        receipt.producer_id = cmd.send.producer_id
        receipt.sequence_id = cmd.send.sequence_id
        receipt.highest_sequence_id = cmd.send.highest_sequence_id
        receipt.message_id.ledgerId = 0
        receipt.message_id.entryId = cmd.send.sequence_id
    elif cmd.type == _T.CLOSE_PRODUCER:
        out = _T(type=_T.SUCCESS)
        out.success.request_id = cmd.close_producer.request_id
    elif cmd.type == _T.PING:
        out = _T(type=_T.PONG)
        out.pong.SetInParent()
    return out


async def _connection(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, port: int
) -> None:
    try:
        while True:
            size = int.from_bytes(await reader.readexactly(4), "big")
            body = await reader.readexactly(size)
            cmd_size = int.from_bytes(body[:4], "big")
            cmd = _T.FromString(body[4 : 4 + cmd_size])  # the payload is never read
            out = _answer(cmd, port)
            if out is not None:
                writer.write(encode_command(out))
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def serve(port: int) -> None:
    """Serve on 127.0.0.1:``port`` until cancelled."""
    server = await asyncio.start_server(lambda r, w: _connection(r, w, port), "127.0.0.1", port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1])))
