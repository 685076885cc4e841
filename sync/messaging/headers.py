"""The reserved Kafka header names of message records, public for the front ends.

A message record's wire contract (see :mod:`sync._constants`, where each is described):
front ends outside the library (the binary protocol's metadata mapping) read the names
from here.
"""

from __future__ import annotations

from sync._constants import (
    ENTRY_FORMAT_VERSION,
    HEADER_BATCH_SIZE,
    HEADER_CHUNK_COUNT,
    HEADER_CHUNK_ID,
    HEADER_CHUNK_SEQUENCE,
    HEADER_CHUNK_TOTAL_SIZE,
    HEADER_CHUNK_UUID,
    HEADER_COMPRESSION,
    HEADER_ENCRYPTION_ALGO,
    HEADER_ENCRYPTION_KEY,
    HEADER_ENCRYPTION_PARAM,
    HEADER_ENTRY,
    HEADER_ENTRY_COUNT,
    HEADER_EVENT_TIME,
    HEADER_KEY_B64,
    HEADER_NULL_VALUE,
    HEADER_ORDERING_KEY,
    HEADER_PRODUCER,
    HEADER_SCHEMA_VERSION,
    HEADER_SEQUENCE,
    HEADER_UNCOMPRESSED_SIZE,
    RESERVED_HEADER_PREFIX,
)

__all__ = [
    "ENTRY_FORMAT_VERSION",
    "HEADER_BATCH_SIZE",
    "HEADER_CHUNK_COUNT",
    "HEADER_CHUNK_ID",
    "HEADER_CHUNK_SEQUENCE",
    "HEADER_CHUNK_TOTAL_SIZE",
    "HEADER_CHUNK_UUID",
    "HEADER_COMPRESSION",
    "HEADER_ENCRYPTION_ALGO",
    "HEADER_ENCRYPTION_KEY",
    "HEADER_ENCRYPTION_PARAM",
    "HEADER_ENTRY",
    "HEADER_ENTRY_COUNT",
    "HEADER_EVENT_TIME",
    "HEADER_KEY_B64",
    "HEADER_NULL_VALUE",
    "HEADER_ORDERING_KEY",
    "HEADER_PRODUCER",
    "HEADER_SCHEMA_VERSION",
    "HEADER_SEQUENCE",
    "HEADER_UNCOMPRESSED_SIZE",
    "RESERVED_HEADER_PREFIX",
]
