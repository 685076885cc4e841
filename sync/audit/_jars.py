"""The Spark connector jars (Kafka source, Avro), fetched by Maven once and cached.

``sync/audit/connectors.pom.xml`` (package data) pins them at the installed pyspark's version.
The first call runs
``mvn dependency:copy-dependencies`` into ``$XDG_CACHE_HOME/policy-sync/spark/jars-<version>/``
(``~/.cache`` by default: an installed package's own folder may not be writable); a
``.complete`` marker holding the pom's sha256 makes every later call a file read.
Concurrent callers (parallel test workers, two CLIs) serialise on a file lock and the
jars appear by an atomic rename, so nobody ever sees half a directory.

``$POLICY_SYNC_SPARK_JARS`` (comma-separated jar paths) skips Maven entirely, e.g. on a
machine that has the jars but no Maven.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.resources
import logging
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from sync._errors import ConfigurationError

from ._errors import SparkSetupError

logger = logging.getLogger(__name__)

__all__ = ["JARS_ENV_VAR", "default_pom", "pyspark_version", "resolve_spark_jars"]

JARS_ENV_VAR = "POLICY_SYNC_SPARK_JARS"
_POM_ENV_VAR = "POLICY_SYNC_SPARK_POM"
_MARKER = ".complete"
# A version segment: "4.1.1", "2.3.10", "4.2.7.Final" (but not "10_2.13", a Scala suffix).
_VERSION_SEGMENT = re.compile(r"\d+\.\d[A-Za-z0-9.]*")
_MVN_TIMEOUT_S = 900.0


def default_pom() -> Path:
    """``$POLICY_SYNC_SPARK_POM`` if set, else the pom shipped in this package."""
    env = os.environ.get(_POM_ENV_VAR)
    if env:
        return Path(env)
    resource = importlib.resources.files("sync.audit").joinpath("connectors.pom.xml")
    if not isinstance(resource, Path):
        raise ConfigurationError(
            f"package data {resource} is not a file on disk; set {_POM_ENV_VAR}"
        )
    return resource


def pyspark_version() -> str:
    import pyspark

    return str(pyspark.__version__)


def _pinned_version(pom: Path) -> str:
    match = re.search(r"<spark\.version>\s*([^<\s]+)\s*</spark\.version>", pom.read_text())
    if match is None:
        raise ConfigurationError(f"no <spark.version> property in {pom}")
    return match.group(1)


def _artifact(jar: Path) -> str:
    """``spark-sql-kafka-0-10_2.13-4.1.1.jar`` -> ``spark-sql-kafka-0-10_2.13``."""
    parts = jar.stem.split("-")
    for i in range(1, len(parts)):
        if _VERSION_SEGMENT.fullmatch(parts[i]):
            return "-".join(parts[:i])
    return jar.stem


def _shipped_artifacts() -> set[str]:
    import pyspark

    jars = Path(pyspark.__file__).resolve().parent / "jars"
    return {_artifact(j) for j in jars.glob("*.jar")}


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    root = Path(base) / "policy-sync" / "spark"
    root.mkdir(parents=True, exist_ok=True)
    return root


def _fetch(pom: Path, cache_dir: Path, target: Path, digest: str) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise SparkSetupError(
            "Maven (mvn) is not on PATH; it fetches the Spark Kafka/Avro connectors once "
            f"(or set ${JARS_ENV_VAR} to the jar paths)"
        )
    staging = Path(tempfile.mkdtemp(prefix=f"{target.name}.partial-", dir=cache_dir))
    cmd = [
        # -U: retry what an earlier failed attempt left marked "not found" in ~/.m2
        mvn, "-q", "-B", "-U", "-Dstyle.color=never", "-f", str(pom),
        "dependency:copy-dependencies", "-DincludeScope=runtime",
        f"-DoutputDirectory={staging}",
    ]  # fmt: skip
    logger.warning("fetching the Spark connector jars with Maven into %s (once)", target)
    started = time.monotonic()
    try:
        result = subprocess.run(  # noqa: S603 - fixed argv, no shell
            cmd, capture_output=True, text=True, check=False, timeout=_MVN_TIMEOUT_S
        )
        if result.returncode != 0 or not any(staging.glob("spark-sql-kafka-*.jar")):
            raise SparkSetupError(
                f"mvn failed (exit {result.returncode}) resolving {pom}; is Maven Central "
                f"reachable?\n{result.stdout[-2000:]}{result.stderr[-2000:]}"
            )
        (staging / _MARKER).write_text(digest + "\n")
        staging.chmod(0o755)  # mkdtemp made it private; the jars are not secrets
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    except subprocess.TimeoutExpired as exc:
        raise SparkSetupError(f"mvn did not finish within {_MVN_TIMEOUT_S:.0f}s") from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    logger.warning(
        "fetched %d jars in %.1fs", len(list(target.glob("*.jar"))), time.monotonic() - started
    )


def resolve_spark_jars(pom: Path | None = None) -> list[Path]:
    """Paths of the connector jars for ``spark.jars`` (fetching them on first use).

    Jars whose artifact pyspark already ships are dropped: two versions of one library
    on a classpath is a conflict, whatever the pom says.
    """
    env = os.environ.get(JARS_ENV_VAR)
    if env:
        paths = [Path(p.strip()) for p in env.split(",") if p.strip()]
        missing = [str(p) for p in paths if not p.is_file()]
        if missing:
            raise ConfigurationError(f"${JARS_ENV_VAR} names missing files: {missing}")
        return paths
    pom = pom or default_pom()
    if not pom.is_file():
        raise SparkSetupError(f"{pom} is missing; it pins the Spark connector jars")
    version = _pinned_version(pom)
    installed = pyspark_version()
    if version != installed:
        raise SparkSetupError(
            f"{pom} pins Spark {version} but pyspark {installed} is installed; the "
            "connectors must match pyspark exactly: fix <spark.version> or the pyspark pin"
        )
    cache_dir = _cache_root()
    target = cache_dir / f"jars-{version}"
    digest = hashlib.sha256(pom.read_bytes()).hexdigest()

    def cached() -> bool:
        marker = target / _MARKER
        return marker.is_file() and marker.read_text().strip() == digest

    if not cached():
        with _file_lock(cache_dir / ".fetch.lock"):
            if not cached():
                _fetch(pom, cache_dir, target, digest)
    shipped = _shipped_artifacts()
    jars = []
    for jar in sorted(target.glob("*.jar")):
        if _artifact(jar) in shipped:
            logger.info("not adding %s: pyspark ships %s already", jar.name, _artifact(jar))
            continue
        jars.append(jar)
    return jars
