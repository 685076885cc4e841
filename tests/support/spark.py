"""The Spark settings every test's local Spark runs with (the session is the ``spark``
fixture of ``tests/integration/conftest.py``: one for the whole run)."""

from __future__ import annotations

#: Spark's JVMs here run a few seconds on tiny logs: HotSpot's C1 compiler alone starts
#: them and runs their first jobs about twice as fast (no C2 compiles of Spark's huge
#: generated methods, which only pay off on large logs); what they compute is the same.
SPARK_TEST_CONF = {
    "spark.ui.enabled": "false",
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1",
}


def spark_cli_flags() -> list[str]:
    """``policy-audit`` flags running Spark as the tests' session does."""
    flags = ["--master", "local[2]", "--no-progress"]
    for key, value in SPARK_TEST_CONF.items():
        flags += ["--conf", f"{key}={value}"]
    return flags
