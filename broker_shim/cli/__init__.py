"""Command-line entry points: ``policyctl``, ``broker-shim``, ``policy-audit``."""

from __future__ import annotations

import importlib.util
import sys
from typing import NoReturn

__all__ = ["audit_main"]


def audit_main() -> NoReturn:
    """``policy-audit``: Spark is an install extra, so say how to get it when it is missing."""
    if importlib.util.find_spec("pyspark") is None:
        print(
            "policy-audit needs Spark, which is an install extra: "
            "pip install 'policy-sync[audit]'",
            file=sys.stderr,
        )
        raise SystemExit(1)
    from .audit import main

    main()
