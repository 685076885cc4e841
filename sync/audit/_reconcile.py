"""Reconciliation: does every sidecar hold exactly the state the log says it should?

The expected state is derived with Spark by replaying the log with the cache's own rule,
:func:`sync.table.judge` itself (run in Spark's Python workers, not a copy in Spark SQL):
a tombstone or a DELETE removes the key, an UPDATE sets it, an INSERT sets it only if the
key is absent (caches ignore conflicting INSERTs), a record that cannot be decoded (bad
magic, too short, unknown fingerprint, a body that does not decode or has trailing
bytes, a body naming another key) removes the key, NONE records change nothing. On a
well-formed log that is simply the last record of every key. Each value is
hashed with Spark's ``sha2(value, 256)`` and compared, per key, with the sidecar's
``GET /policy-sync/v1/entries`` (sha256 of the raw value bytes it holds).

A sidecar keeps applying writes while we look. Its ``/digest`` carries its positions (the
next offset to apply, per partition); we read the digest, then the entries, then the
digest again, and only accept entries whose positions did not move, then derive the
expected state at exactly those positions (``endingOffsets``). A sidecar that keeps
moving is compared against its latest positions and marked unstable: differences may then
be writes in flight.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

from sync._constants import SIDECAR_DIGEST_PATH, SIDECAR_ENTRIES_PATH
from sync._errors import InvalidInputError
from sync.policy._codec import Codec
from sync.table import Effect, judge

from ._decode import KafkaSource, check_source, read_log
from ._errors import SidecarError, spark_errors
from ._schemas import SparkSchemas

logger = logging.getLogger(__name__)

__all__ = [
    "DIGEST_PATH",
    "ENTRIES_PATH",
    "SidecarDivergence",
    "SidecarSnapshot",
    "expected_state",
    "fetch_sidecar",
    "parse_entries",
    "parse_positions",
    "reconcile",
    "validate_sidecar_url",
]

DIGEST_PATH = SIDECAR_DIGEST_PATH
ENTRIES_PATH = SIDECAR_ENTRIES_PATH
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def validate_sidecar_url(url: str) -> str:
    """``http(s)://host:port`` (a trailing slash or path prefix is kept), else InvalidInputError."""
    parsed = urllib.parse.urlsplit(url.strip())
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise InvalidInputError(f"--sidecar {url!r} is not an http(s)://HOST:PORT URL")
    try:
        parsed.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        raise InvalidInputError(f"--sidecar {url!r} has an invalid port") from exc
    return url.strip().rstrip("/")


def parse_positions(payload: Any, url: str = "?") -> dict[int, int]:
    """The ``positions`` of a ``/digest`` answer: partition -> next offset to apply."""
    if not isinstance(payload, Mapping) or not isinstance(payload.get("positions"), Mapping):
        raise SidecarError(url, f"{DIGEST_PATH} answered without a positions object")
    try:
        return {int(p): int(o) for p, o in payload["positions"].items()}
    except (TypeError, ValueError) as exc:
        raise SidecarError(url, f"{DIGEST_PATH} positions are not integers") from exc


def parse_entries(payload: Any, url: str = "?") -> dict[str, str]:
    """The ``entries`` of an ``/entries`` answer: key -> lowercase sha256 hex."""
    if not isinstance(payload, Mapping) or not isinstance(payload.get("entries"), Mapping):
        raise SidecarError(url, f"{ENTRIES_PATH} answered without an entries object")
    entries: dict[str, str] = {}
    for key, digest in payload["entries"].items():
        if not isinstance(key, str) or not isinstance(digest, str):
            raise SidecarError(url, f"{ENTRIES_PATH}: entry {key!r} is not a string pair")
        if not _SHA256_HEX.fullmatch(digest.lower()):
            raise SidecarError(url, f"{ENTRIES_PATH}: entry {key!r} is not a sha256 hex digest")
        entries[key] = digest.lower()
    return entries


@dataclass(frozen=True, slots=True)
class SidecarSnapshot:
    """A sidecar's cache as one consistent picture (when ``stable``)."""

    url: str
    positions: Mapping[int, int]
    entries: Mapping[str, str]
    stable: bool


def _get_json(url: str, path: str, timeout_s: float) -> Any:
    # validate_sidecar_url admitted http(s) only
    request = urllib.request.Request(url + path, headers={"Accept": "application/json"})  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        hint = " (the cache is not ready yet)" if exc.code == 503 else ""
        raise SidecarError(url, f"GET {path} answered HTTP {exc.code}{hint}") from exc
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise SidecarError(url, f"GET {path} failed: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise SidecarError(url, f"GET {path} did not answer JSON: {exc}") from exc


def fetch_sidecar(url: str, *, timeout_s: float = 30.0, attempts: int = 5) -> SidecarSnapshot:
    """Entries and the positions they correspond to (retrying while the sidecar moves)."""
    url = validate_sidecar_url(url)
    snapshot: SidecarSnapshot | None = None
    for attempt in range(1, attempts + 1):
        before = parse_positions(_get_json(url, DIGEST_PATH, timeout_s), url)
        entries = parse_entries(_get_json(url, ENTRIES_PATH, timeout_s), url)
        after = parse_positions(_get_json(url, DIGEST_PATH, timeout_s), url)
        snapshot = SidecarSnapshot(url, after, entries, stable=before == after)
        if snapshot.stable:
            return snapshot
        logger.info("sidecar %s moved while read (attempt %d); reading again", url, attempt)
        time.sleep(0.2 * attempt)
    assert snapshot is not None  # noqa: S101 - attempts >= 1
    return snapshot


#: One codec per schema directory in each Spark Python worker.
_CODECS: dict[str, Codec] = {}


def effect_of(schema_dir: str, key: bytes | None, value: bytes | None) -> str:
    """The :class:`~sync.table.Effect` name of one record: the cache's rule, verbatim."""
    codec = _CODECS.get(schema_dir)
    if codec is None:
        codec = _CODECS[schema_dir] = Codec(Path(schema_dir))
    return judge(codec, None if key is None else bytes(key), value and bytes(value)).effect.name


def expected_state(
    spark: SparkSession,
    source: KafkaSource,
    schemas: SparkSchemas | None = None,
    ending_offsets: Mapping[int, int] | None = None,
    *,
    codec: Codec | None = None,
) -> DataFrame:
    """(key, sha256) of every key a correct cache holds after applying the log.

    ``schemas`` is accepted for callers of the Spark-decoding audit; the judgement is the
    Python codec's (``codec``, default: the schemas it finds), as in every cache.
    """
    del schemas  # the rule is judge(), which decodes with the Python codec
    schema_dir = str((codec or Codec()).current.path.parent)
    effect = F.udf(functools.partial(effect_of, schema_dir), StringType())
    delete = Effect.DELETE.name
    insert = Effect.INSERT.name
    raw = read_log(spark, source, ending_offsets).where(F.col("key").isNotNull())
    judged = raw.select(
        F.col("key").cast("string").alias("key"),
        "partition",
        "offset",
        effect(F.col("key"), F.col("value")).alias("effect"),
        F.sha2(F.col("value"), 256).alias("value_sha256"),
    )
    effects = judged.where(F.col("effect") != Effect.IGNORE.name).select(
        "key",
        "partition",
        "offset",
        # What every cache does with poison: the key becomes absent.
        F.when(F.col("effect") == Effect.POISON.name, delete)
        .otherwise(F.col("effect"))
        .alias("action"),
        "value_sha256",
    )
    by_key = Window.partitionBy("key").orderBy("partition", "offset")
    previous = F.lag("action").over(by_key)
    # An INSERT takes effect only on an absent key: first record, or right after a delete.
    applied = effects.select(
        "*",
        ((F.col("action") != insert) | previous.isNull() | (previous == delete)).alias("_applies"),
    ).where("_applies")
    last = applied.groupBy("key").agg(
        F.max_by(F.struct("action", "value_sha256"), F.struct("partition", "offset")).alias("last")
    )
    return last.where(F.col("last.action") != delete).select(
        "key", F.col("last.value_sha256").alias("sha256")
    )


@dataclass(frozen=True, slots=True)
class SidecarDivergence:
    """How one sidecar's cache compares with the log, per key."""

    url: str
    positions: Mapping[int, int]
    stable: bool
    expected_keys: int
    sidecar_keys: int
    matching: int
    #: in the log's state, absent from the sidecar
    missing: int
    #: held by the sidecar, absent from the log's state
    extra: int
    #: held by both with different values
    different: int
    #: (key, kind, expected sha256, sidecar sha256), the first few in key order
    examples: Sequence[tuple[str, str, str | None, str | None]]
    #: Why the sidecar could not be compared at all (it then counts as diverged).
    error: str | None = None

    @classmethod
    def failed(cls, url: str, error: str) -> SidecarDivergence:
        return cls(url, {}, False, 0, 0, 0, 0, 0, 0, (), error)

    @property
    def diverged(self) -> bool:
        return bool(self.error or self.missing or self.extra or self.different)

    def lines(self) -> list[str]:
        if self.error is not None:
            return [f"{self.url}: UNREACHABLE: {self.error}"]
        verdict = "DIVERGED" if self.diverged else "in sync"
        note = "" if self.stable else " (kept moving while read: writes may be in flight)"
        out = [
            f"{self.url}: {verdict}{note}",
            f"  keys: log {self.expected_keys:,}, sidecar {self.sidecar_keys:,}; matching "
            f"{self.matching:,}, missing {self.missing:,}, extra {self.extra:,}, "
            f"different {self.different:,}",
        ]
        for key, kind, want, have in self.examples:
            out.append(f"    {kind:<9} {key}  log={want or '-'} sidecar={have or '-'}")
        shown = len(self.examples)
        total = self.missing + self.extra + self.different
        if total > shown:
            out.append(f"    ... and {total - shown:,} more")
        return out


def _compare(
    spark: SparkSession, expected: DataFrame, snapshot: SidecarSnapshot, max_examples: int
) -> SidecarDivergence:
    table = pa.table(
        {
            "key": pa.array(list(snapshot.entries.keys()), pa.string()),
            "sidecar": pa.array(list(snapshot.entries.values()), pa.string()),
        }
    )
    sidecar = spark.createDataFrame(table)
    joined = expected.join(sidecar, on="key", how="full_outer")
    kind = (
        F.when(F.col("sidecar").isNull(), F.lit("missing"))
        .when(F.col("sha256").isNull(), F.lit("extra"))
        .when(F.col("sha256") != F.col("sidecar"), F.lit("different"))
        .otherwise(F.lit("match"))
    )
    classified = joined.select("key", "sha256", "sidecar", kind.alias("kind")).cache()
    try:
        counts = {r["kind"]: r["count"] for r in classified.groupBy("kind").count().collect()}
        examples = [
            (r["key"], r["kind"], r["sha256"], r["sidecar"])
            for r in classified.where(F.col("kind") != "match")
            .orderBy("key")
            .limit(max_examples)
            .collect()
        ]
    finally:
        classified.unpersist()
    matching = counts.get("match", 0)
    return SidecarDivergence(
        url=snapshot.url,
        positions=dict(snapshot.positions),
        stable=snapshot.stable,
        expected_keys=matching + counts.get("missing", 0) + counts.get("different", 0),
        sidecar_keys=len(snapshot.entries),
        matching=matching,
        missing=counts.get("missing", 0),
        extra=counts.get("extra", 0),
        different=counts.get("different", 0),
        examples=examples,
    )


def reconcile(
    spark: SparkSession,
    source: KafkaSource,
    sidecars: Sequence[str],
    *,
    schemas: SparkSchemas | None = None,
    max_examples: int = 20,
    timeout_s: float = 30.0,
) -> list[SidecarDivergence]:
    """Compare every sidecar with the state the log implies at that sidecar's positions.

    A sidecar that cannot be read is reported (``error``) and counts as diverged; the
    others are still compared.
    """
    if not sidecars:
        raise InvalidInputError("name at least one --sidecar URL")
    urls = [validate_sidecar_url(u) for u in sidecars]
    schemas = schemas or SparkSchemas.load()
    check_source(source)
    states: dict[tuple[tuple[int, int], ...], DataFrame] = {}
    results = []
    try:
        for url in urls:
            try:
                snapshot = fetch_sidecar(url, timeout_s=timeout_s)
            except SidecarError as exc:
                logger.warning("%s", exc)
                results.append(SidecarDivergence.failed(url, exc.reason))
                continue
            at = tuple(sorted(snapshot.positions.items()))
            with spark_errors(f"reconciling {url} with {source.describe()}"):
                if at not in states:
                    states[at] = expected_state(
                        spark, source, schemas, dict(at) if at else None
                    ).cache()
                results.append(_compare(spark, states[at], snapshot, max_examples))
    finally:
        for state in states.values():
            state.unpersist()
    return results
