"""Audit errors, under the library's one root::

    PolicySyncError                  (sync._errors)
    └── AuditError                   the audit could not run or could not finish
        ├── SparkSetupError          Java, Maven, the connector jars or Spark itself failed
        └── SidecarError             a sidecar did not answer reconciliation, or answered garbage

Bad arguments raise the library's ``ConfigurationError`` / ``InvalidInputError``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from py4j.protocol import Py4JError  # type: ignore[import-untyped]
from pyspark.errors import PySparkException

from .._errors import PolicySyncError

__all__ = ["AuditError", "SidecarError", "SparkSetupError", "spark_errors"]


class AuditError(PolicySyncError):
    """The audit could not run or could not finish."""


class SparkSetupError(AuditError):
    """Java, Maven, the Spark connector jars or the Spark session failed to come up."""


class SidecarError(AuditError):
    """A sidecar's reconciliation endpoints failed or returned something unexpected."""

    def __init__(self, url: str, reason: str) -> None:
        self.url = url
        self.reason = reason
        super().__init__(f"sidecar {url}: {reason}")


@contextlib.contextmanager
def spark_errors(what: str) -> Iterator[None]:
    """Turn a failed Spark job into an :class:`AuditError` saying what was being done."""
    try:
        yield
    except (PySparkException, Py4JError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise AuditError(f"{what} failed in Spark: {first}") from exc
