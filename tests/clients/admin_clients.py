"""Build the two official admin clients' check programs (issue 13, item 6), cached.

* Java: ``java/AdminCheck.java`` against ``org.apache.pulsar:pulsar-client-admin`` (the
  version pinned in ``java/pom.xml``, jars resolved by Maven from Maven Central);
* Go: ``go/main.go`` against ``github.com/apache/pulsar-client-go/pulsaradmin`` (pinned in
  ``go/go.mod`` and ``go.sum``, from the Go module proxy).

Outputs live in ``tests/clients/.cache/`` (git-ignored), keyed by the sha256 of their
inputs, built once under a file lock (parallel test runs share them).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
CACHE = HERE / ".cache"
BUILD_TIMEOUT_S = 1500


@contextlib.contextmanager
def cache_lock(name: str) -> Iterator[None]:
    """One builder at a time (``make integration`` runs worker processes), as Maven's and
    Go's caches are filled."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / f"{name}.lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _digest(*paths: Path) -> str:
    h = hashlib.sha256()
    for path in paths:
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
    result = subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"{' '.join(cmd)} failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}"
        )


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise RuntimeError(f"{name} is not on PATH; the admin client tests need it")
    return path


def java_command() -> list[str]:
    """``java -cp … AdminCheck`` (append the sidecar URL and a tenant name)."""
    src = HERE / "java"
    key = _digest(src / "pom.xml", src / "AdminCheck.java")
    out = CACHE / f"java-{key}"
    with cache_lock("java"):
        if not (out / ".complete").is_file():
            shutil.rmtree(out, ignore_errors=True)
            _run(
                [
                    _tool("mvn"), "-q", "-B", "-Dstyle.color=never", "-f", str(src / "pom.xml"),
                    "dependency:copy-dependencies", "-DincludeScope=runtime",
                    f"-DoutputDirectory={out / 'libs'}",
                ],
                src,
            )  # fmt: skip
            _run(
                [_tool("javac"), "-d", str(out / "classes"), "-cp", f"{out / 'libs'}/*",
                 str(src / "AdminCheck.java")],
                src,
            )  # fmt: skip
            (out / ".complete").write_text(key + "\n")
    return [_tool("java"), "-cp", f"{out / 'libs'}/*:{out / 'classes'}", "AdminCheck"]


def go_command() -> list[str]:
    """The built ``admincheck`` binary (append the sidecar URL and a tenant name)."""
    src = HERE / "go"
    key = _digest(src / "go.mod", src / "go.sum", src / "main.go")
    binary = CACHE / f"go-admincheck-{key}"
    with cache_lock("go"):
        if not binary.is_file():
            env = dict(os.environ, GOFLAGS="-mod=mod", CGO_ENABLED="0")
            _run([_tool("go"), "build", "-o", str(binary) + ".partial", "."], src, env)
            os.replace(str(binary) + ".partial", binary)
    return [str(binary)]
