"""``make demo``: policy-sync end to end on a local Kafka it starts itself.

Starts one Kafka broker (from Maven Central jars, no Docker), three sidecars, writes
policies with ``policyctl``, shows every sidecar converge, kills one sidecar with
SIGKILL, writes while it is gone, restarts it and shows it catch up, then messaging and
lookup failover, and ends with ``policy-audit`` (Spark) over everything the demo wrote and
a reconciliation of the live sidecars against the log.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from ._demo_audit import audit_demo
from ._demo_binary import binary_demo
from ._demo_messaging import messaging_demo
from ._demo_registry import lookup_failover_demo

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
KAFKACTL = ROOT / "docker" / "kafka" / "kafkactl.py"
TOPIC = "__change_events"


def say(text: str) -> None:
    print(f"\n\033[1m== {text}\033[0m", flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 - loopback only
            body = resp.read().decode()
            return resp.status, json.loads(body) if body else None
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def put(url: str, body: str) -> int:
    req = urllib.request.Request(url, data=body.encode(), method="PUT")  # noqa: S310
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:  # noqa: S310
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return err.code


def policyctl(bootstrap: str, *args: str, stdin: str | None = None) -> str:
    cmd = [str(BIN / "policyctl"), "--bootstrap-servers", bootstrap, *args]
    print("$ policyctl " + " ".join(shlex.quote(a) for a in args), flush=True)
    out = subprocess.run(cmd, input=stdin, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        print(out.stderr.strip(), f"(exit {out.returncode})")
    elif out.stdout.strip():
        print(out.stdout.strip())
    return out.stdout


class Shim:
    def __init__(self, broker_id: int, bootstrap: str, workdir: Path) -> None:
        self.id = broker_id
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        #: Pulsar's binary protocol (pulsar://), advertised in lookups.
        self.broker_port = free_port()
        self.broker_url = f"pulsar://127.0.0.1:{self.broker_port}"
        self.bootstrap = bootstrap
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = open(self.workdir / f"shim-{self.id}.log", "ab")  # noqa: SIM115 - child keeps it
        self.proc = subprocess.Popen(
            [
                str(BIN / "broker-shim"),
                "run",
                "--broker-id",
                str(self.id),
                "--http-port",
                str(self.port),
                "--broker-port",
                str(self.broker_port),
                "--bootstrap-servers",
                self.bootstrap,
                "--state-dir",
                str(self.workdir / f"state-{self.id}"),
                # liveness: a silent sidecar leaves the ownership group after 2 s
                "--session-timeout-ms",
                "2000",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def wait_ready(self, timeout: float = 120) -> float:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            try:
                if get(self.url + "/health")[0] == 200:
                    return time.monotonic() - t0
            except OSError:
                pass
            time.sleep(0.05)
        raise SystemExit(f"sidecar {self.id} did not become ready; see {self.workdir}")

    def digest(self) -> str:
        return str(get(self.url + "/policy-sync/v1/digest")[1]["digest"])

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(30)


def main() -> None:
    port = int(os.environ.get("KAFKA_PORT", "9092"))
    workdir = Path(tempfile.mkdtemp(prefix="policy-sync-demo-"))
    with socket.socket() as probe:
        ours = probe.connect_ex(("127.0.0.1", port)) != 0  # else: a broker from `make kafka-up`
    say(f"1. A real Apache Kafka on 127.0.0.1:{port} (jars from Maven Central, no Docker)")
    up = subprocess.run(
        [sys.executable, str(KAFKACTL), "up", "--port", str(port)], text=True, capture_output=True
    )
    if up.returncode != 0:
        raise SystemExit(up.stdout + up.stderr)
    bootstrap = up.stdout.strip().splitlines()[-1]
    print(f"broker ready at {bootstrap}")
    shims = [Shim(i, bootstrap, workdir) for i in (1, 2, 3)]
    try:
        say("2. Three sidecars, each with its own policy cache")
        for shim in shims:
            shim.start()
        for shim in shims:
            print(f"sidecar {shim.id}: READY in {shim.wait_ready():.2f}s at {shim.url}")
        # Pulsar's admin model: a tenant, then its namespace, then the topic its policies
        # are about (topic policies of a topic never created are a 404, as in Pulsar).
        admin = shims[0].url + "/admin/v2"
        for path, body in (
            ("/tenants/acme", '{"allowedClusters": ["standalone"]}'),
            ("/namespaces/acme/ops", '{"bundles": {"numBundles": 4}}'),
            ("/persistent/acme/ops/orders", ""),
        ):
            print(f"PUT /admin/v2{path} -> {put(admin + path, body)}")

        say("3. Admins write policies (topic, global and namespace level)")
        policyctl(bootstrap, "set", "persistent://acme/ops/orders", "--json",
                  '{"maxConsumerPerTopic": 5, "subscriptionTypesEnabled": ["Shared"]}')  # fmt: skip
        policyctl(bootstrap, "set", "acme/ops/orders", "--global", "--json",
                  '{"messageTTLInSeconds": 600, "maxConsumerPerTopic": 50}')  # fmt: skip
        ns = {"maxProducerPerTopic": 3, "retentionPolicies": {"retentionTimeInMinutes": 60}}
        policyctl(bootstrap, "set", "acme/ops", "--json", json.dumps(ns))
        policyctl(bootstrap, "set", "orders", "--json", '{"maxConsumerPerTopic": -1}')
        lines = "\n".join(
            json.dumps({"target": f"acme/bulk/t{i}", "policies": {"maxConsumerPerTopic": i}})
            for i in range(2000)
        )
        policyctl(bootstrap, "import", "-", stdin=lines)

        say("4. Every sidecar converged (same answers, same digest)")
        path = "/admin/v2/persistent/acme/ops/orders"
        started = time.monotonic()
        while len({shim.digest() for shim in shims}) > 1 and time.monotonic() - started < 30:
            time.sleep(0.05)  # the sidecars tail the log on their own: wait until they agree
        took = time.monotonic() - started
        agreed = len({shim.digest() for shim in shims}) == 1
        print(f"digests of all {len(shims)} sidecars equal: {agreed} (after {took:.2f}s)")
        for shim in shims:
            local = get(shim.url + path + "/maxConsumers")[1]
            applied_ttl = get(shim.url + path + "/messageTTL?applied=true")[1]
            producers = get(shim.url + path + "/maxProducers?applied=true")[1]
            print(
                f"sidecar {shim.id}: maxConsumers={local} messageTTL(applied)={applied_ttl} "
                f"maxProducers(applied, from namespace)={producers} digest={shim.digest()[:16]}"
            )
        policyctl(bootstrap, "get", "acme/ops/orders-partition-2", "--applied")

        say("5. kill -9 sidecar 3, keep writing, restart it: it catches up")
        shims[2].stop(signal.SIGKILL)
        print("sidecar 3 killed with SIGKILL")
        policyctl(bootstrap, "set", "acme/ops/orders", "--json", '{"maxConsumerPerTopic": 7}')
        policyctl(bootstrap, "delete", "acme/bulk/t1")
        shims[2].start()
        took = shims[2].wait_ready()
        deadline = time.monotonic() + 30
        while shims[2].digest() != shims[0].digest() and time.monotonic() < deadline:
            time.sleep(0.05)
        same = shims[2].digest() == shims[0].digest()
        print(f"sidecar 3 READY again in {took:.2f}s; digest equal to sidecar 1: {same}")
        print(f"sidecar 3 maxConsumers={get(shims[2].url + path + '/maxConsumers')[1]}")
        metrics = urllib.request.urlopen(shims[0].url + "/metrics", timeout=5).read().decode()  # noqa: S310
        wanted = ("policy_sync_cache_size", "policy_sync_cache_bootstrap_seconds")
        print("\n".join(m for m in metrics.splitlines() if m.startswith(wanted)))

        say("6. Pulsar WebSocket messaging on a partitioned topic, governed by live policies")
        messaging_demo(shims[0].url)
        say("6b. The official Pulsar client over pulsar:// (the binary protocol), same engine")
        binary_demo(shims[0].broker_url, [s.url for s in shims])

        say("7. Topic lookup from every sidecar; kill -9 an owner; time re-ownership")
        topics = [f"persistent://acme/ops/lookup-{i}" for i in range(6)]
        took = lookup_failover_demo([(s.url, s.kill) for s in shims], topics)
        print(f"re-ownership took {took:.2f}s (liveness timeout 2.0s)")

        say("8. Audit what the demo did: policy-audit (Spark, local) reads __change_events")
        live = [s.url for s in shims if s.proc is not None and s.proc.poll() is None]
        audit = audit_demo(bootstrap, workdir / "audit", live)
        if audit.sidecars_agree is False:
            raise SystemExit("the live sidecars diverged from the log; see the lines above")
        say(f"Done. Audit report: {audit.report}; sidecar logs are in {workdir}")
    finally:
        for shim in shims:
            shim.stop()
        if ours:
            down = [sys.executable, str(KAFKACTL), "down", "--port", str(port)]
            subprocess.run(down, check=False)


if __name__ == "__main__":
    main()
