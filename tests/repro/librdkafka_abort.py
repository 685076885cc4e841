"""Reproducer: librdkafka aborts the process in a coordinator-routed Admin API call
(``DescribeConsumerGroups``) when the group coordinator broker dies.

    python: rdkafka_queue.h:NNNN: rd_kafka_enq_once_del_source_return:
            Assertion `eonce->refcnt > 0' failed.

Usage (needs the 3-broker cluster; it is started, faulted and restarted here)::

    flock /tmp/ps-cluster.lock .venv/bin/python -m tests.repro.librdkafka_abort \
        [--rounds 20] [--threads 4] [--mode inprocess|isolated]

``--mode inprocess`` calls ``AdminClient.describe_consumer_groups`` in a child process in a
tight loop (as policy-sync's ownership member did) while this script SIGKILLs the group
coordinator broker and restarts it, round after round. The child dying by SIGABRT is the
bug. ``--mode isolated`` runs the same load through ``IsolatedAdmin``
(``sync/transport/_kafka_isolated.py``, the fix: coordinator-routed calls in a
disposable worker process) and checks that the calling process survives.

Exit status: 0 when the run ends as expected for the mode (``inprocess``: an abort was
reproduced; ``isolated``: the caller never died), 1 otherwise. See docs/librdkafka-abort.md.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KAFKACTL = ROOT / "docker" / "kafka" / "kafkactl.py"
CLUSTER_STATE = ROOT / "docker" / "kafka" / ".state" / "cluster"
BOOTSTRAP = "127.0.0.1:19092,127.0.0.1:29092,127.0.0.1:31092"
GROUP = "repro.librdkafka.abort"
TOPIC = "repro.librdkafka.abort"


def _child(threads: int, mode: str) -> None:
    """The victim: describe the group as fast as the client answers, from N threads."""
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient

    # A live member keeps the group (and so a coordinator) busy, as in the sidecar.
    member = Consumer(
        {
            "bootstrap.servers": BOOTSTRAP,
            "group.id": GROUP,
            "session.timeout.ms": 6000,
            "enable.auto.commit": False,
        }
    )
    member.subscribe([TOPIC])
    calls = [0]
    errors = [0]

    if mode == "isolated":
        sys.path.insert(0, str(ROOT))
        from sync.transport import KafkaConfig
        from sync.transport._kafka_isolated import IsolatedAdmin

        isolated = IsolatedAdmin(KafkaConfig(BOOTSTRAP, client_id="repro-isolated"))

        def describe() -> None:
            isolated.describe_group(GROUP, 2.0)

        def deaths() -> int:
            return isolated.worker_deaths

    else:
        admin = AdminClient({"bootstrap.servers": BOOTSTRAP, "client.id": "repro-admin"})

        def describe() -> None:
            admin.describe_consumer_groups([GROUP], request_timeout=2)[GROUP].result()

        def deaths() -> int:
            return 0

    def loop() -> None:
        while True:
            try:
                describe()
            except Exception:  # noqa: BLE001 - errors are expected while brokers die
                errors[0] += 1
            calls[0] += 1

    for _ in range(threads):
        threading.Thread(target=loop, daemon=True).start()
    while True:
        member.poll(0.1)
        if int(time.time()) % 5 == 0:
            print(
                f"child: {calls[0]} describe calls, {errors[0]} errors, "
                f"{deaths()} admin workers lost",
                flush=True,
            )
            time.sleep(1)


def _kafkactl(*args: str) -> str:
    for attempt in range(3):  # a loaded machine can miss kafkactl's readiness deadline
        out = subprocess.run([sys.executable, str(KAFKACTL), *args], capture_output=True, text=True)
        if out.returncode == 0:
            return out.stdout.strip()
        print(f"kafkactl {' '.join(args)} failed (attempt {attempt + 1}): {out.stderr[-300:]}")
    raise SystemExit("kafkactl kept failing")


def _coordinator() -> int:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": BOOTSTRAP})
    for _ in range(30):
        try:
            desc = admin.describe_consumer_groups([GROUP], request_timeout=5)[GROUP].result()
            return int(desc.coordinator.id)
        except Exception:  # noqa: BLE001 - retry until the cluster answers
            time.sleep(1)
    raise SystemExit("no group coordinator found")


def _ensure_topic() -> None:
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    admin = AdminClient({"bootstrap.servers": BOOTSTRAP})
    fut = admin.create_topics([NewTopic(TOPIC, 3, 3)])[TOPIC]
    try:
        fut.result()
    except Exception as exc:  # noqa: BLE001 - exists already
        print(f"topic: {exc}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--down-s", type=float, default=4.0)
    parser.add_argument("--mode", choices=("inprocess", "isolated"), default="inprocess")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.threads, args.mode)
        return 0
    import confluent_kafka

    print(f"confluent-kafka {confluent_kafka.version()}, librdkafka {confluent_kafka.libversion()}")
    print("starting the 3-broker cluster ...", flush=True)
    _kafkactl("cluster-up")
    aborted = False
    child: subprocess.Popen[str] | None = None
    try:
        _ensure_topic()
        child = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.repro.librdkafka_abort",
                "--child",
                "--threads",
                str(args.threads),
                "--mode",
                args.mode,
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        lines: list[str] = []
        reader = threading.Thread(
            target=lambda: lines.extend(iter(child.stdout.readline, "")),  # type: ignore[union-attr]
            daemon=True,
        )
        reader.start()
        time.sleep(5)
        for rnd in range(1, args.rounds + 1):
            coord = _coordinator()
            pid = int((CLUSTER_STATE / f"node-{coord}" / "kafka.pid").read_text().strip())
            print(f"round {rnd}: SIGKILL coordinator broker {coord} (pid {pid})", flush=True)
            os.kill(pid, signal.SIGKILL)
            time.sleep(args.down_s)
            if child.poll() is not None:
                break
            _kafkactl("cluster-up")
            time.sleep(2)
            if child.poll() is not None:
                break
        code = child.poll()
        if code is None:
            time.sleep(6)
            status = [line for line in lines if line.startswith("child:")]
            print(f"child survived {args.rounds} rounds; last: {status[-1:]}")
            aborts = [line for line in lines if "Assertion" in line]
            print(f"assertion lines seen (from isolated workers): {len(aborts)}")
            for line in aborts[-2:]:
                print("  " + line.rstrip())
        else:
            reader.join(2)
            assertion = [line for line in lines if "Assertion" in line or "assert" in line]
            print(f"child died with {code} ({'SIGABRT' if code == -signal.SIGABRT else '?'})")
            for line in assertion[-3:]:
                print("  " + line.rstrip())
            aborted = code == -signal.SIGABRT
    finally:
        if child is not None and child.poll() is None:
            child.kill()
            child.wait()
        subprocess.run(
            [sys.executable, str(KAFKACTL), "cluster-down", "--purge"], capture_output=True
        )
    if args.mode == "inprocess":
        return 0 if aborted else 1
    return 1 if child is not None and child.returncode not in (None, -signal.SIGKILL) else 0


if __name__ == "__main__":
    raise SystemExit(main())
