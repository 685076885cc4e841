"""Reproducer: which of policy-sync's Kafka client kinds spins (CPU, context switches)
while one broker of the 3-broker cluster is dead (issue 11, "CPU storm after kill -9").

Usage (needs the 3-broker cluster; it is started, one broker SIGKILLed and restarted)::

    flock /tmp/ps-cluster.lock nice -n 15 .venv/bin/python -m tests.repro.broker_kill_storm \
        [--kinds producer,txn,consumer,group,admin] [--down-s 60] [--broker 1] \
        [--fetch-wait-ms 10] [--set key=value ...] [--rate 200]

Every kind runs in its OWN process, built with policy-sync's transport
(``sync.transport.KafkaTransport``) exactly as the sidecar builds it, with traffic:

* ``producer``  idempotent producer, ``linger_ms=5`` (the messaging engine's), ``--rate`` msg/s
                spread over all partitions, delivery reports served by ``poll``;
* ``txn``       transactional producer (the fenced writer's shape): begin, 5 records, commit;
* ``consumer``  manually assigned read_committed consumer with a ``group_id`` (the messaging
                reader's shape), default ``fetch_wait_max_ms`` unless ``--fetch-wait-ms``;
                commits its position every 0.2 s;
* ``group``     a cooperative group member (the ownership member's shape), session 2 s;
* ``admin``     AdminClient: describe_topic + list_offsets every 0.2 s; ``admin-describe``,
                ``admin-configs``, ``admin-offsets``, ``admin-topics``, ``admin-idle``: one
                call kind alone through our transport (describe_topics+describe_configs,
                describe_configs, list_offsets, metadata, nothing); ``admin-dtopics``,
                ``admin-dconfigs``: confluent-kafka's describe_topics / describe_configs
                called directly (without the transport's controller guard);
                ``admin-groups``: ``list_groups`` (ListConsumerGroups, a fan-out to every
                broker) through the transport's guard, ``admin-dgroups`` the same call on
                confluent-kafka directly (the storm of chaos run 5).

The parent samples ``/proc/<pid>/stat`` (utime+stime) and every thread's
``/proc/<pid>/task/<tid>/status`` (voluntary + nonvoluntary context switches, ``comm``) once a
second: a baseline, then ``--down-s`` seconds with the broker SIGKILLed, then after its restart.
It prints, per kind and phase, CPU % and context switches/s, and the busiest threads.
``--set key=value`` goes to every client as a librdkafka property (``KafkaConfig.extra``), to
try config changes; ``KIND+key=value+...`` in ``--kinds`` sets properties for that process only
(several variants of one kind side by side in one run). See docs/librdkafka-abort.md ("CPU storm").
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KAFKACTL = ROOT / "docker" / "kafka" / "kafkactl.py"
CLUSTER_STATE = ROOT / "docker" / "kafka" / ".state" / "cluster"
BOOTSTRAP = "127.0.0.1:19092,127.0.0.1:29092,127.0.0.1:31092"
TOPIC = "repro.storm"
PARTITIONS = 6
KINDS = ("producer", "txn", "consumer", "group", "admin")
CLK_TCK = os.sysconf("SC_CLK_TCK")


def _extra(pairs: list[str]) -> dict[str, str | int]:
    out: dict[str, str | int] = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        out[key] = int(value) if value.lstrip("-").isdigit() else value
    return out


def _child(kind: str, rate: float, fetch_wait_ms: int | None, extra: dict[str, str | int]) -> None:
    sys.path.insert(0, str(ROOT))
    from sync.transport import KafkaConfig, KafkaTransport

    config = KafkaConfig(BOOTSTRAP, client_id=f"repro-storm-{kind}", extra=extra)
    transport = KafkaTransport(config)
    sent = [0]
    errors = [0]

    def on_delivery(report: object) -> None:
        if getattr(report, "error", None):
            errors[0] += 1

    if kind == "producer":
        producer = transport.producer(linger_ms=5)
        gap = 1.0 / rate
        nxt = time.monotonic()
        while True:
            producer.produce(
                TOPIC,
                str(sent[0]).encode(),
                b"x" * 100,
                partition=sent[0] % PARTITIONS,
                on_delivery=on_delivery,
            )
            sent[0] += 1
            nxt += gap
            producer.poll(max(0.0, nxt - time.monotonic()))
    elif kind == "txn":
        txn = transport.producer(transactional_id="repro-storm-txn", transaction_timeout_ms=10000)
        txn.init_transactions(30)
        while True:
            try:
                txn.begin_transaction()
                for i in range(5):
                    txn.produce(TOPIC, b"t", b"y" * 50, partition=(sent[0] + i) % PARTITIONS)
                txn.commit_transaction(10)
                sent[0] += 5
            except Exception:  # noqa: BLE001 - expected while a broker is dead
                errors[0] += 1
                try:
                    txn.abort_transaction(10)
                except Exception:  # noqa: BLE001
                    txn = transport.producer(
                        transactional_id="repro-storm-txn", transaction_timeout_ms=10000
                    )
                    try:
                        txn.init_transactions(30)
                    except Exception:  # noqa: BLE001
                        time.sleep(0.5)
            time.sleep(0.05)
    elif kind == "consumer":
        consumer = transport.consumer(
            group_id="repro-storm-reader",
            fetch_wait_max_ms=10 if fetch_wait_ms is None else fetch_wait_ms,  # 10: the default
        )
        consumer.assign(TOPIC, {p: -1 for p in range(PARTITIONS)})  # OFFSET_END
        last_commit = time.monotonic()
        pos: dict[int, int] = {}
        while True:
            for msg in consumer.consume(500, 0.1):
                pos[msg.partition() or 0] = (msg.offset() or 0) + 1
            if time.monotonic() - last_commit > 0.2 and pos:
                try:
                    consumer.commit(TOPIC, {p: (o, "") for p, o in pos.items()}, timeout_s=5)
                except Exception:  # noqa: BLE001
                    errors[0] += 1
                last_commit = time.monotonic()
    elif kind == "group":

        class _Listener:
            def on_assign(self, partitions: object) -> None: ...
            def on_revoke(self, partitions: object) -> None: ...
            def on_lost(self, partitions: object) -> None: ...

        member = transport.group_consumer(
            "repro-storm-group",
            session_timeout_ms=2000,
            fetch_wait_max_ms=10 if fetch_wait_ms is None else fetch_wait_ms,  # 10: the default
        )
        member.subscribe(TOPIC, _Listener())
        while True:
            member.consume(500, 0.1)
    elif kind.startswith("admin"):
        admin = transport.admin()
        calls: dict[str, Callable[[], object]] = {
            "admin": lambda: (
                admin.describe_topic(TOPIC, 5),
                admin.list_offsets(TOPIC, list(range(PARTITIONS)), "latest", 5),
            ),
            "admin-describe": lambda: admin.describe_topic(TOPIC, 5),
            "admin-configs": lambda: admin.topic_overrides(TOPIC, 5),
            "admin-dtopics": lambda: _raw_describe_topics(admin),
            "admin-dconfigs": lambda: _raw_describe_configs(admin),
            "admin-offsets": lambda: admin.list_offsets(
                TOPIC, list(range(PARTITIONS)), "latest", 5
            ),
            "admin-topics": lambda: admin.list_topics("repro", 5),
            "admin-groups": lambda: admin.list_groups("repro-storm", 5),
            "admin-dgroups": lambda: _raw_list_groups(admin),
            "admin-idle": lambda: None,
        }
        call = calls[kind]
        while True:
            try:
                call()
            except Exception:  # noqa: BLE001
                errors[0] += 1
            time.sleep(0.2)


def _raw_describe_topics(admin: object) -> None:
    """confluent-kafka's AdminClient.describe_topics, bypassing our transport's guard."""
    from confluent_kafka import TopicCollection

    raw = admin._admin  # type: ignore[attr-defined]  # noqa: SLF001 - the repro's point
    raw.describe_topics(TopicCollection([TOPIC]), request_timeout=5)[TOPIC].result()


def _raw_list_groups(admin: object) -> None:
    """confluent-kafka's AdminClient.list_consumer_groups (a fan-out to every broker),
    bypassing our transport's guard: the call that stormed in chaos run 5."""
    raw = admin._admin  # type: ignore[attr-defined]  # noqa: SLF001 - the repro's point
    raw.list_consumer_groups(request_timeout=5).result()


def _raw_describe_configs(admin: object) -> None:
    """confluent-kafka's AdminClient.describe_configs, bypassing our transport's guard."""
    from confluent_kafka.admin._config import ConfigResource
    from confluent_kafka.admin._resource import ResourceType

    raw = admin._admin  # type: ignore[attr-defined]  # noqa: SLF001 - the repro's point
    resource = ConfigResource(ResourceType.TOPIC, TOPIC)
    raw.describe_configs([resource], request_timeout=5)[resource].result()


def _kafkactl(*args: str) -> None:
    for attempt in range(3):
        out = subprocess.run([sys.executable, str(KAFKACTL), *args], capture_output=True, text=True)
        if out.returncode == 0:
            return
        print(f"kafkactl {' '.join(args)} failed (attempt {attempt + 1}): {out.stderr[-300:]}")
    raise SystemExit("kafkactl kept failing")


def _ensure_topic() -> None:
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    admin = AdminClient({"bootstrap.servers": BOOTSTRAP})
    try:
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])[TOPIC].result()
    except Exception as exc:  # noqa: BLE001 - exists already
        print(f"topic: {exc}")


def _sample(pid: int) -> tuple[float, int, dict[str, int]]:
    """(cpu seconds, context switches, per-thread-name context switches) of ``pid``."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / CLK_TCK
    total = 0
    threads: dict[str, int] = {}
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            status = Path(f"/proc/{pid}/task/{task}/status").read_text()
        except OSError:
            continue
        name = ""
        switches = 0
        for line in status.splitlines():
            if line.startswith("Name:"):
                name = line.split(None, 1)[1] if len(line.split(None, 1)) > 1 else ""
            elif line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                switches += int(line.split()[1])
        total += switches
        threads[f"{name}#{task}"] = threads.get(f"{name}#{task}", 0) + switches
    return cpu, total, threads


def _report(
    phase: str,
    seconds: float,
    before: dict[str, tuple[float, int, dict[str, int]]],
    after: dict[str, tuple[float, int, dict[str, int]]],
) -> None:
    print(f"--- {phase} ({seconds:.0f} s)")
    for kind, (cpu1, sw1, th1) in after.items():
        cpu0, sw0, th0 = before[kind]
        busiest = sorted(((n, v - th0.get(n, 0)) for n, v in th1.items()), key=lambda kv: -kv[1])[
            :3
        ]
        threads = ", ".join(f"{n.split('#')[0]} {d / seconds:,.0f}/s" for n, d in busiest)
        print(
            f"{kind:40s} cpu {100 * (cpu1 - cpu0) / seconds:6.1f}%  "
            f"ctx {(sw1 - sw0) / seconds:9,.0f}/s  [{threads}]",
            flush=True,
        )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--broker", type=int, default=1, help="node id to SIGKILL (1-3)")
    parser.add_argument("--base-s", type=float, default=15.0)
    parser.add_argument("--down-s", type=float, default=60.0)
    parser.add_argument("--after-s", type=float, default=20.0)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--fetch-wait-ms", type=int, default=None)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    extra = _extra(args.set)
    if args.child:
        _child(args.child, args.rate, args.fetch_wait_ms, extra)
        return 0
    import confluent_kafka

    print(f"confluent-kafka {confluent_kafka.version()}, librdkafka {confluent_kafka.libversion()}")
    print(f"kinds {args.kinds}; fetch_wait_ms {args.fetch_wait_ms}; extra {extra}", flush=True)
    _kafkactl("cluster-up")
    _ensure_topic()
    children: dict[str, subprocess.Popen[bytes]] = {}
    logs = Path(os.environ.get("TMPDIR", "/tmp")) / "repro-storm"
    logs.mkdir(exist_ok=True)
    try:
        for kind in args.kinds.split(","):
            base, *own = kind.split("+")  # e.g. admin-describe+reconnect.backoff.ms=500
            cmd = [
                sys.executable,
                "-m",
                "tests.repro.broker_kill_storm",
                "--child",
                base,
                "--rate",
                str(args.rate),
            ]
            if args.fetch_wait_ms is not None:
                cmd += ["--fetch-wait-ms", str(args.fetch_wait_ms)]
            for pair in [*args.set, *own]:
                cmd += ["--set", pair]
            with open(logs / f"{base}.{len(children)}.log", "wb") as log:
                label = kind if kind not in children else f"{kind}#{len(children)}"
                children[label] = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=log)
        time.sleep(8)  # connect, join, warm up

        def snap() -> dict[str, tuple[float, int, dict[str, int]]]:
            return {k: _sample(c.pid) for k, c in children.items() if c.poll() is None}

        s0 = snap()
        time.sleep(args.base_s)
        s1 = snap()
        _report("baseline, all brokers up", args.base_s, s0, s1)
        pid = int((CLUSTER_STATE / f"node-{args.broker}" / "kafka.pid").read_text().strip())
        print(f"SIGKILL broker {args.broker} (pid {pid})", flush=True)
        os.kill(pid, signal.SIGKILL)
        t0 = time.monotonic()
        step = 10.0
        prev = snap()
        while time.monotonic() - t0 < args.down_s:
            time.sleep(step)
            cur = snap()
            _report(f"broker {args.broker} dead, t={time.monotonic() - t0:.0f}s", step, prev, cur)
            prev = cur
        t1 = time.monotonic()
        _kafkactl("cluster-up")
        print(f"broker {args.broker} restarted in {time.monotonic() - t1:.1f} s", flush=True)
        s2 = snap()
        time.sleep(args.after_s)
        _report("after the restart", args.after_s, s2, snap())
        dead = {k: c.returncode for k, c in children.items() if c.poll() is not None}
        if dead:
            print(f"children that died: {dead}")
    finally:
        for child in children.values():
            if child.poll() is None:
                child.kill()
                child.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
