"""The Spark session the audit runs in: embedded ``local[*]`` by default, any master on demand.

Cluster use, either way:

* ``policy-audit --master spark://host:7077 --output DIR`` (client mode: this process is
  the driver, the executors fetch the connector jars from it);
* ``spark-submit --master spark://host:7077 --jars "$(policy-audit jars)"
  broker_shim/cli/audit.py --output DIR``: the master and jars spark-submit set win,
  nothing here overrides them.

The executors run Spark SQL expressions and the JVM's Avro decoder only, no Python
functions, so they need no Python packages of ours.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from pyspark import SparkConf
from pyspark.sql import SparkSession

from sync._errors import ConfigurationError

from ._errors import SparkSetupError
from ._jars import resolve_spark_jars

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_MASTER", "SparkConfig", "spark_session", "validate_master"]

DEFAULT_MASTER = "local[*]"
_JIT_HUGE_METHODS = "-XX:-DontCompileHugeMethods"
_LOCAL = re.compile(r"local(\[(\*|[1-9]\d*)(,\s*[1-9]\d*)?\])?")
_REMOTE_PREFIXES = ("spark://", "k8s://", "mesos://")


def validate_master(master: str) -> str:
    """Return ``master`` if Spark would accept its form, else raise ConfigurationError."""
    master = master.strip()
    if _LOCAL.fullmatch(master) or master == "yarn":
        return master
    if master.startswith(_REMOTE_PREFIXES) and len(master) > master.index("://") + 3:
        return master
    raise ConfigurationError(
        f"--master {master!r} is not a Spark master URL: use local, local[N], local[*], "
        "spark://HOST:PORT, yarn or k8s://https://HOST:PORT"
    )


def _local_cores(master: str) -> int | None:
    match = _LOCAL.fullmatch(master)
    if match is None:
        return None
    threads = match.group(2)
    if threads is None:
        return 1
    if threads == "*":
        return os.cpu_count() or 1
    return int(threads)


@dataclass(frozen=True, slots=True)
class SparkConfig:
    """How to start Spark. ``conf`` entries override every default set here."""

    master: str | None = None
    app_name: str = "policy-audit"
    conf: Mapping[str, str] = field(default_factory=dict)
    log_level: str = "WARN"
    #: Add the Kafka/Avro connector jars (fetched once by Maven) to ``spark.jars``.
    connector_jars: bool = True

    def __post_init__(self) -> None:
        if self.master is not None:
            object.__setattr__(self, "master", validate_master(self.master))
        object.__setattr__(self, "conf", MappingProxyType(dict(self.conf)))


def spark_session(config: SparkConfig | None = None) -> SparkSession:
    """A SparkSession able to read Kafka and decode Avro (``getOrCreate`` semantics)."""
    config = config or SparkConfig()
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise SparkSetupError(
            "Java is not installed (no java on PATH, no $JAVA_HOME); Spark needs Java 17+"
        )
    submitted = SparkConf()  # holds spark-submit's settings when run under it
    master = config.master or submitted.get("spark.master", None) or DEFAULT_MASTER
    settings: dict[str, str] = {
        "spark.sql.session.timeZone": "UTC",
        # The CLI draws its own progress bar from the status tracker.
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.sources.partitionOverwriteMode": "static",
        # The decoded event struct has ~40 fields; do not warn about printing plans.
        "spark.sql.debug.maxToStringFields": "1000",
        # Python workers run this interpreter: reconcile judges records with the cache's
        # own rule (sync.table.judge), which needs this package and fastavro.
        "spark.pyspark.python": sys.executable,
    }
    cores = _local_cores(master)
    if cores is not None:
        # Before the JVM starts: embedded Spark binds to loopback (and stops warning that
        # the hostname resolves to it).
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        # Embedded Spark listens on loopback only, and needs few shuffle partitions.
        settings["spark.driver.host"] = "127.0.0.1"
        settings["spark.driver.bindAddress"] = "127.0.0.1"
        settings["spark.sql.shuffle.partitions"] = str(max(4, 2 * cores))
        # Driver and executors share this one JVM; Spark's 1g default leaves the window
        # and the Parquet writers little room on a large log.
        settings["spark.driver.memory"] = "2g"
    if config.connector_jars:
        jars = [str(p) for p in resolve_spark_jars()]
        existing = [j for j in (submitted.get("spark.jars", "") or "").split(",") if j]
        settings["spark.jars"] = ",".join(existing + [j for j in jars if j not in existing])
    java_options = ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions")
    for key in java_options:
        # The decode/diff stage compiles to methods longer than HotSpot's 8,000-bytecode
        # JIT limit; left interpreted they made the audit 2-3x slower (measured). Added to,
        # never replacing, what the caller or spark-submit set.
        given = config.conf.get(key, submitted.get(key, None) or "")
        if _JIT_HUGE_METHODS not in given:
            given = f"{given} {_JIT_HUGE_METHODS}".strip()
        settings[key] = given
    settings.update({k: v for k, v in config.conf.items() if k not in java_options})
    # Python workers started by this driver run this interpreter too (the setting above
    # is only read by spark-submit).
    os.environ.setdefault("PYSPARK_PYTHON", settings["spark.pyspark.python"])
    builder = SparkSession.builder.master(master).appName(config.app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except Exception as exc:  # py4j and pyspark raise many types when the JVM fails
        raise SparkSetupError(f"Spark did not start (master {master}): {exc}") from exc
    spark.sparkContext.setLogLevel(config.log_level)
    logger.info("Spark %s session on %s", spark.version, master)
    return spark
