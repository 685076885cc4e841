"""How a message's Pulsar properties, event time, producer name and sequence id are Kafka
headers (the wire contract in :mod:`._producer`), both ways."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from sync._constants import (
    HEADER_EVENT_TIME,
    HEADER_PRODUCER,
    HEADER_SEQUENCE,
    RESERVED_HEADER_PREFIX,
)
from sync._errors import (
    InvalidInputError,
)
from sync.transport import (
    Header,
)

logger = logging.getLogger(__name__)

__all__ = ["decode_origin", "decode_properties", "encode_headers", "origin_headers"]


def encode_headers(
    properties: Mapping[str, str] | None, event_time_ms: int | None = None
) -> list[Header] | None:
    """Kafka headers for Pulsar properties and event time (``None`` when there are none).

    Raises:
        InvalidInputError: a property name is empty or reserved, or a value is not a str.
    """
    if not properties and event_time_ms is None:
        return None
    headers: list[Header] = []
    for name, value in (properties or {}).items():
        if not isinstance(name, str) or not name or name.startswith(RESERVED_HEADER_PREFIX):
            raise InvalidInputError(
                f"property name {name!r} is empty or reserved (prefix {RESERVED_HEADER_PREFIX!r})"
            )
        if not isinstance(value, str):
            raise InvalidInputError(f"property {name!r} must be a string, got {value!r}")
        headers.append((name, value.encode("utf-8")))
    if event_time_ms is not None:
        if isinstance(event_time_ms, bool) or not isinstance(event_time_ms, int):
            raise InvalidInputError(f"event time must be epoch milliseconds, got {event_time_ms!r}")
        headers.append((HEADER_EVENT_TIME, str(event_time_ms).encode("ascii")))
    return headers


def decode_properties(
    headers: list[tuple[str, bytes]] | None,
) -> tuple[dict[str, str], int | None]:
    """Inverse of :func:`encode_headers`: ``(properties, event_time_ms or None)``.

    Headers written by other Kafka producers are kept as properties (values decoded as
    UTF-8, undecodable bytes replaced); unknown reserved headers are dropped.
    """
    properties: dict[str, str] = {}
    event_time: int | None = None
    for name, value in headers or ():
        if name.startswith(RESERVED_HEADER_PREFIX):
            if name == HEADER_EVENT_TIME and value:
                try:
                    event_time = int(value)
                except ValueError:
                    event_time = None
            continue
        properties[name] = "" if value is None else value.decode("utf-8", "replace")
    return properties, event_time


def origin_headers(producer_name: str, sequence_id: int) -> list[Header]:
    """The reserved headers naming a message's producer and its sequence id."""
    return [
        (HEADER_PRODUCER, producer_name.encode("utf-8")),
        (HEADER_SEQUENCE, str(sequence_id).encode("ascii")),
    ]


def decode_origin(headers: list[tuple[str, bytes]] | None) -> tuple[str | None, int | None]:
    """``(producer name, sequence id)`` from :func:`origin_headers` (None where a record
    does not carry them: plain Kafka producers, unnamed producers)."""
    name: str | None = None
    sequence: int | None = None
    for key, value in headers or ():
        if key == HEADER_PRODUCER and value:
            name = value.decode("utf-8", "replace")
        elif key == HEADER_SEQUENCE and value:
            try:
                sequence = int(value)
            except ValueError:
                sequence = None
    return name, sequence
