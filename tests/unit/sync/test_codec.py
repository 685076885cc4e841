"""Wire format: single-object encoding, fingerprints, schema evolution both ways."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.schema import load_schema

from sync import Codec, CodecError
from sync.policy._codec import default_schema_dir
from tests.support.events import change_event

SCHEMAS = default_schema_dir()


def _event(**policies: Any) -> dict[str, Any]:
    return change_event("t", "ns", "orders", policies, replicate_to=["standalone"])


def test_value_is_c301_fingerprint_body() -> None:
    codec = Codec()
    value = codec.encode(_event(maxConsumerPerTopic=5))
    assert value[:2] == b"\xc3\x01"
    assert value[2:10] == codec.current.fingerprint
    assert codec.decode(value)["topicPoliciesEvent"]["policies"]["maxConsumerPerTopic"] == 5


def test_fingerprint_is_crc64_avro_of_the_canonical_form() -> None:
    # Reference CRC-64-AVRO from the Avro specification, computed independently.
    empty = 0xC15D213AA4D7A795
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (empty & -(fp & 1))
        table.append(fp)
    fp = empty
    for byte in Codec().current.canonical.encode("utf-8"):
        fp = (fp >> 8) ^ table[(fp ^ byte) & 0xFF]
    assert Codec().current.fingerprint == fp.to_bytes(8, "little")


def test_both_schema_versions_are_known() -> None:
    codec = Codec()
    assert {v.name for v in codec.versions.values()} == {"current", "v1", "v2", "v3"}


def test_v1_events_decode_with_the_current_schema() -> None:
    v1 = parse_schema(load_schema(str(SCHEMAS / "history" / "v1" / "policysync.ChangeEvent.avsc")))
    codec = Codec()
    v1_version = next(v for v in codec.versions.values() if v.name == "v1")
    buf = io.BytesIO()
    buf.write(b"\xc3\x01" + v1_version.fingerprint)
    schemaless_writer(buf, v1, _event(messageTTLInSeconds=60))
    decoded = codec.decode(buf.getvalue())
    assert decoded["metadata"] is None  # added in v2, defaulted
    assert decoded["topicPoliciesEvent"]["policies"]["messageTTLInSeconds"] == 60
    assert decoded["topicPoliciesEvent"]["policies"]["shadowTopics"] is None


def test_current_events_decode_with_the_v1_reader() -> None:
    v1 = parse_schema(load_schema(str(SCHEMAS / "history" / "v1" / "policysync.ChangeEvent.avsc")))
    codec = Codec()
    event = _event(messageTTLInSeconds=60, shadowTopics=["persistent://t/ns/s"])
    event["metadata"] = {
        "eventId": "e1",
        "author": "alice",
        "timestampMillis": 1,
        "origin": "test",
    }
    value = codec.encode(event)
    old = schemaless_reader(io.BytesIO(value[10:]), codec.current.parsed, v1)
    assert isinstance(old, dict)
    assert old["topicPoliciesEvent"]["policies"]["messageTTLInSeconds"] == 60
    assert "metadata" not in old


def test_classify_reads_type_and_action_without_decoding() -> None:
    codec = Codec()
    for action in ("INSERT", "UPDATE", "DELETE", "NONE"):
        event = _event()
        event["actionType"] = action
        assert codec.classify(codec.encode(event)) == ("TOPIC_POLICY", action)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"\x00\x01" + b"\x00" * 20, "bad magic"),
        (b"\xc3\x01" + b"\x01" * 8 + b"\x00\x00", "unknown schema fingerprint"),
        (b"\xc3\x01", "too short"),
    ],
)
def test_bad_headers_are_explained(value: bytes, reason: str) -> None:
    problem = Codec().check_header(value)
    assert problem is not None and reason in problem
    with pytest.raises(CodecError):
        Codec().decode(value)


def test_garbage_body_is_a_codec_error() -> None:
    codec = Codec()
    with pytest.raises(CodecError, match="does not decode|trailing"):
        codec.decode(codec.header + b"\x00\x04\xff\xff\xff\xff\xff\xff\xff")


def test_trailing_bytes_are_refused() -> None:
    codec = Codec()
    with pytest.raises(CodecError, match="trailing"):
        codec.decode(codec.encode(_event()) + b"\x00")


def test_schema_files_only_add_nullable_fields_with_null_defaults() -> None:
    import json

    def fields(path: Path) -> dict[str, Any]:
        return {f["name"]: f for f in json.loads(path.read_text())["fields"]}

    for name in ("policysync.ChangeEvent.avsc", "policysync.TopicPolicies.avsc"):
        old = fields(SCHEMAS / "history" / "v1" / name)
        new = fields(SCHEMAS / name)
        assert list(new)[: len(old)] == list(old), "existing fields keep their order"
        for added in set(new) - set(old):
            assert new[added]["type"][0] == "null" and new[added]["default"] is None
