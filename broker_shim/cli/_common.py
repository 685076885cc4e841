"""What every command line shares: the bootstrap flag, logging, exit codes."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable
from typing import NoReturn

from sync import InvalidInputError, NotFoundError, PolicySyncError
from sync.constants import BOOTSTRAP_ENV_VAR, DEFAULT_BOOTSTRAP_SERVERS

__all__ = [
    "EXIT_FAILURE",
    "EXIT_INPUT",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "add_bootstrap_flag",
    "configure_logging",
    "run_main",
]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_INPUT = 2
EXIT_NOT_FOUND = 3


def add_bootstrap_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap-servers",
        default=os.environ.get(BOOTSTRAP_ENV_VAR, DEFAULT_BOOTSTRAP_SERVERS),
        help=(
            f"Kafka bootstrap servers "
            f"(default: ${BOOTSTRAP_ENV_VAR} or {DEFAULT_BOOTSTRAP_SERVERS})"
        ),
    )


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.WARNING),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def fail(code: int, message: str) -> NoReturn:
    print(f"{os.path.basename(sys.argv[0]) or 'policy-sync'}: error: {message}", file=sys.stderr)
    raise SystemExit(code)


def run_main(body: Callable[[], int]) -> NoReturn:
    """Run a command and map our exception tree onto the documented exit codes."""
    try:
        code = body()
    except InvalidInputError as exc:
        fail(EXIT_INPUT, str(exc))
    except NotFoundError as exc:
        fail(EXIT_NOT_FOUND, str(exc))
    except PolicySyncError as exc:
        fail(EXIT_FAILURE, str(exc))
    except KeyboardInterrupt:
        fail(EXIT_FAILURE, "interrupted")
    raise SystemExit(code)
