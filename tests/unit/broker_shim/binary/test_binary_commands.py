"""The outbound command builders (one place per command) and the package's import graph."""

from __future__ import annotations

import ast
from pathlib import Path

from broker_shim.binary import PulsarApi_pb2 as api
from broker_shim.binary import _commands as commands
from sync.errors import UnavailableError
from sync.messaging import MessageId

_T = api.BaseCommand


def test_broker_initiated_closes_carry_request_id_minus_one() -> None:
    prod = commands.close_producer(7)
    assert prod.type == _T.CLOSE_PRODUCER
    assert prod.close_producer.producer_id == 7
    assert prod.close_producer.request_id == (1 << 64) - 1
    cons = commands.close_consumer(3)
    assert cons.type == _T.CLOSE_CONSUMER
    assert (cons.close_consumer.consumer_id, cons.close_consumer.request_id) == (3, (1 << 64) - 1)


def test_lookup_response_always_carries_proxy_flag() -> None:
    out = commands.lookup_response(5, "pulsar://h:6650", local=False, proxy=False)
    resp = out.lookupTopicResponse
    assert resp.response == api.CommandLookupTopicResponse.Redirect
    assert resp.HasField("proxy_through_service_url")
    assert resp.authoritative


def test_failed_answers_carry_the_error_table_code() -> None:
    exc = UnavailableError("not here")
    for out in (
        commands.lookup_failed(1, exc),
        commands.partitioned_metadata_failed(1, exc),
        commands.error(1, exc),
    ):
        assert "not here" in str(out)
    resp = commands.partitioned_metadata_failed(1, exc).partitionMetadataResponse
    assert not resp.HasField("partitions")


def test_receipts_acks_and_last_ids() -> None:
    receipt = commands.send_receipt(2, 10, 12, MessageId(1, 40)).send_receipt
    assert (receipt.message_id.ledgerId, receipt.message_id.entryId) == (0, 40)
    assert receipt.message_id.partition == 1
    assert not commands.ack_response(4, 9, found=True).ackResponse.HasField("error")
    missing = commands.ack_response(4, 9, found=False).ackResponse
    assert missing.error == api.ConsumerNotFound
    empty = commands.last_message_id_response(1, None, partitioned=True)
    assert empty.getLastMessageIdResponse.last_message_id.ledgerId == (1 << 64) - 1
    last = commands.last_message_id_response(1, (41, 2), partitioned=False)
    mid = last.getLastMessageIdResponse.last_message_id
    assert (mid.ledgerId, mid.entryId, mid.partition) == (0, 41, -1)


def test_binary_modules_import_no_cycle_typing_included() -> None:
    package = Path(commands.__file__).parent
    graph: dict[str, set[str]] = {}
    for path in package.glob("_*.py"):
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module:
                    deps.add(node.module)
                else:
                    deps.update(alias.name for alias in node.names)
        graph[path.stem] = {d for d in deps if d.startswith("_")}

    def visit(name: str, stack: tuple[str, ...]) -> None:
        assert name not in stack, f"import cycle: {' -> '.join((*stack, name))}"
        for dep in graph.get(name, ()):
            visit(dep, (*stack, name))

    for module in graph:
        visit(module, ())
