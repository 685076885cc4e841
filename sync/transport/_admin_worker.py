"""The worker process of :class:`sync.transport._kafka_isolated.IsolatedAdmin`.

``python -m sync.transport._admin_worker '<librdkafka config as JSON>'``: prints
``{"ready": true}``, then answers one JSON request per stdin line with one JSON line on
stdout (``{"ok": ...}`` or ``{"error": "..."}``); exits when stdin closes.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any

from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from sync._errors import TransportError

from ._kafka_failures import has_code
from ._kafka_group import describe_group


def _answer(admin: AdminClient, request: dict[str, Any]) -> dict[str, Any]:
    op, group, timeout_s = request["op"], request["group"], float(request["timeout_s"])
    if op == "describe_group":
        return {"ok": dataclasses.asdict(describe_group(admin, group, timeout_s))}
    if op == "delete_group":
        try:
            admin.delete_consumer_groups([group], request_timeout=timeout_s)[group].result()
        except KafkaException as exc:
            if not has_code(exc, KafkaError.GROUP_ID_NOT_FOUND):
                raise TransportError(f"delete consumer group {group!r} failed: {exc}") from exc
        return {"ok": {}}
    if op == "group_positions":
        return {"ok": _group_positions(admin, group, request["topic"], timeout_s)}
    if op == "alter_group_positions":
        topic = request["topic"]
        positions = request["positions"].items()
        request_tps = ConsumerGroupTopicPartitions(
            group, [TopicPartition(topic, int(p), o, metadata=m) for p, (o, m) in positions]
        )
        try:
            admin.alter_consumer_group_offsets([request_tps], request_timeout=timeout_s)[
                group
            ].result()
        except KafkaException as exc:
            raise TransportError(f"alter offsets of group {group!r} failed: {exc}") from exc
        return {"ok": {}}
    return {"error": f"unknown admin worker op {op!r}"}


def _group_positions(
    admin: AdminClient, group: str, topic: str, timeout_s: float
) -> dict[str, list[Any]]:
    """{partition: [offset, metadata]} of ``group``'s commits on ``topic`` (JSON keys)."""
    try:
        futures = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group)], request_timeout=timeout_s
        )
        result = futures[group].result()
    except KafkaException as exc:
        if has_code(exc, KafkaError.GROUP_ID_NOT_FOUND):
            return {}
        raise TransportError(f"offsets of group {group!r} failed: {exc}") from exc
    return {
        str(tp.partition): [tp.offset, tp.metadata or ""]
        for tp in result.topic_partitions or []
        if tp.topic == topic and tp.offset >= 0
    }


def serve(config: dict[str, Any]) -> None:
    """Answer requests until stdin closes."""
    admin = AdminClient(config)
    out = sys.stdout.buffer
    out.write(b'{"ready": true}\n')
    out.flush()
    for line in sys.stdin.buffer:
        if not line.strip():
            continue
        request = json.loads(line)
        try:
            answer = _answer(admin, request)
        except TransportError as exc:
            answer = {"error": str(exc)}
        except Exception as exc:  # noqa: BLE001 - any failure is the caller's TransportError
            answer = {"error": f"{request.get('op')} failed: {exc!r}"}
        out.write(json.dumps(answer).encode("utf-8") + b"\n")
        out.flush()


if __name__ == "__main__":
    serve(json.loads(sys.argv[1]))
