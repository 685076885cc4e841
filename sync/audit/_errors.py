"""Spark failures as audit errors.

The audit's exceptions live in the library's one tree (``sync._errors``)::

    PolicySyncError
    └── AuditError               the audit could not run or could not finish
        ├── SparkSetupError      Java, Maven, the connector jars or Spark itself failed
        └── SidecarError         a sidecar did not answer reconciliation, or answered garbage

Bad arguments raise the library's ``ConfigurationError`` / ``InvalidInputError``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from py4j.protocol import Py4JError  # type: ignore[import-untyped]
from pyspark.errors import PySparkException

from sync._errors import AuditError, SidecarError, SparkSetupError

__all__ = ["AuditError", "SidecarError", "SparkSetupError", "spark_errors"]


@contextlib.contextmanager
def spark_errors(what: str) -> Iterator[None]:
    """Turn a failed Spark job into an :class:`AuditError` saying what was being done."""
    try:
        yield
    except (PySparkException, Py4JError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise AuditError(f"{what} failed in Spark: {first}") from exc
