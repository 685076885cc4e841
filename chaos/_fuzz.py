"""Fuzz of the HTTP and WebSocket surface with malformed input; every 5xx is recorded.

Only sidecars the health poller last found healthy are fuzzed, so a 503 of a sidecar
that is restarting is not blamed on the input.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import random
import threading
from collections import Counter
from dataclasses import dataclass, field

import websockets
from websockets.exceptions import InvalidStatus

from ._world import LOOKUP_NAMESPACE, WRITE_NAMESPACE, World
from .procs import SidecarProc

# names Pulsar refuses (NamedEntity: letters, digits and -_=:. ; not "." or "..")
BAD_NAMES = (".", "..", "%00", "%FF", "%2F", "a%2Fb", "%C3%28", "%E2%82", "%0A", "%7F")
# valid names, asked with the bad ones: a 5xx to them is counted apart (availability).
# Pulsar 4.0.7 creates `a?b`, `a b` and `%` (PUT .../a%3Fb, a%20b, %25 answer 204).
# A name Pulsar takes, but no Kafka topic can hold (249 characters at most): refused with
# 412 before any I/O where it names a topic's tenant or namespace.
LONG_NAME = "x" * 3000
GOOD_NAMES = ("ok-topic", "a:b", LONG_NAME, "a%3Fb", "a%20b", "%25")
# Query strings Pulsar accepts although they look wrong (Boolean.parseBoolean: false).
VALID_QUERIES = ("?pullMode=maybe",)
# Parameters no endpoint has: Pulsar (JAX-RS) ignores them, so the request is valid input
# (a 503 to it while Kafka is unreachable is unavailability, not a bad-input failure).
IGNORED_QUERIES = ("?a=%00",)
BAD_CHARSETS = ("application/json; charset=bogus", "application/json; charset=utf-16",
                "application/json; charset=\u00e9", "text/plain; charset=utf-32",
                "application/json; charset=", "application/x-www-form-urlencoded")  # fmt: skip
POLICIES = ("maxConsumers", "messageTTL", "retention", "dispatchRate", "publishRate",
            "subscriptionTypesEnabled", "maxMessageSize", "persistence", "bogusPolicy")


def deep_json(rng: random.Random) -> bytes:
    depth = rng.choice((200, 1000, 5000, 50_000))
    if rng.random() < 0.5:
        return b"[" * depth + b"]" * depth
    return b'{"a":' * depth + b"1" + b"}" * depth


def bad_body(rng: random.Random) -> tuple[str, bytes, str]:
    """(label, body, content type)"""
    kind = rng.choice(("deep", "utf8", "random", "charset", "types", "huge_number", "empty"))
    ctype = "application/json"
    if kind == "deep":
        return kind, deep_json(rng), ctype
    if kind == "utf8":
        return kind, rng.choice((b'"\xff\xfe"', b"{\"a\": \"\xc3\x28\"}", b"\xed\xa0\x80",
                                 b"\x80" * 10, b'{"\xff": 1}')), ctype  # fmt: skip
    if kind == "random":
        return kind, rng.randbytes(rng.randrange(1, 2000)), ctype
    if kind == "charset":
        return kind, rng.choice((b"5", b'{"a": 1}', b"\xff\xfe5\x00")), rng.choice(BAD_CHARSETS)
    if kind == "types":
        body = rng.choice(('"x"', "null", "true", "[]", '{"x": []}', "-1", "1.5e400",
                           '{"retentionTimeInMinutes": "x"}', "NaN", "Infinity"))
        return kind, body.encode(), ctype
    if kind == "huge_number":
        return kind, rng.choice((b"9" * 400, b"1e999999", b"-" + b"9" * 40)), ctype
    return kind, b"", ctype


@dataclass
class FuzzStats:
    requests: int = 0
    by_status: Counter[int] = field(default_factory=Counter)
    server_errors: list[str] = field(default_factory=list)
    transport_errors: Counter[str] = field(default_factory=Counter)

    #: 5xx answers to requests whose input was valid, by status: a sidecar that cannot
    #: serve yet (a bundle in transit, Kafka unreachable) answers 503 + Retry-After; a
    #: 500 is a bug whatever the fault (issue #11)
    valid_five_xx: Counter[int] = field(default_factory=Counter)
    valid_five_xx_examples: list[str] = field(default_factory=list)

    def five_xx(self) -> int:
        """5xx answers to malformed input."""
        return sum(n for status, n in self.by_status.items() if status >= 500)

    def valid_not_503(self) -> int:
        """5xx answers to valid input other than 503 (unavailable)."""
        return sum(n for status, n in self.valid_five_xx.items() if status != 503)


class Fuzzer:
    def __init__(self, world: World, rate_per_s: float = 5.0) -> None:
        self.world = world
        self.rng = world.rng("fuzz")
        self.pause = 1.0 / rate_per_s
        self.stats = FuzzStats()
        self._thread = threading.Thread(target=self._run, name="fuzz", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self) -> None:
        self._thread.join(60)

    def _target(self) -> SidecarProc | None:
        good = [s for s in self.world.sidecars if s.url in self.world.healthy and s.serving()]
        return self.rng.choice(good) if good else None

    def _note(self, label: str, status: int, detail: str, malformed: bool = True) -> None:
        self.stats.requests += 1
        if not malformed:
            if status >= 500:
                self.stats.valid_five_xx[status] += 1
                if len(self.stats.valid_five_xx_examples) < 50:
                    self.stats.valid_five_xx_examples.append(
                        f"{self.world.now():.1f}s {status} {label} {detail}"
                    )
            return
        self.stats.by_status[status] += 1
        if status >= 500 and len(self.stats.server_errors) < 200:
            self.stats.server_errors.append(f"{self.world.now():.1f}s {status} {label} {detail}")

    def _http(self, s: SidecarProc) -> None:
        rng = self.rng
        name = rng.choice((*BAD_NAMES, *GOOD_NAMES))
        policy = rng.choice(POLICIES)
        choice = rng.randrange(7)
        body: bytes | None = None
        ctype = "application/json"
        query = ""
        domain = "persistent"
        if choice == 0:  # policy write with a bad body (good or bad name)
            label, body, ctype = bad_body(rng)
            method, path = "POST", f"/admin/v2/persistent/{WRITE_NAMESPACE}/{name}/{policy}"
        elif choice == 1:  # policy read with a bad name or query
            method = "GET"
            query = rng.choice(("", "?isGlobal=maybe", "?applied=2", "?isGlobal=%FF", "?a=%00"))
            path = f"/admin/v2/persistent/{WRITE_NAMESPACE}/{name}/{policy}{query}"
            label = "read"
        elif choice == 2:  # lookup of a bad name
            method, label = "GET", "lookup"
            path = f"/lookup/v2/topic/persistent/{LOOKUP_NAMESPACE}/{name}"
        elif choice == 3:  # partitions with a bad body
            label, body, ctype = bad_body(rng)
            method, path = "PUT", f"/admin/v2/persistent/chaos/fuzz/{name}/partitions"
        elif choice == 4:  # namespace creation with a bad body
            label, body, ctype = bad_body(rng)
            method, path = "PUT", f"/admin/v2/namespaces/chaos/{name}"
        elif choice == 5:  # bad domain / tenant / namespace segments
            method, label = "GET", "segments"
            domain = rng.choice(("persistent", "bogus", "%FF"))
            path = f"/admin/v2/{domain}/{name}/{name}/t/maxConsumers"
        else:  # delete with bad names
            method, label = "DELETE", "delete"
            query = f"?isGlobal={name}"
            path = f"/admin/v2/persistent/{WRITE_NAMESPACE}/{name}/{policy}{query}"
        conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=15)
        try:
            headers = {"Content-Type": ctype} if body is not None else {}
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            text = resp.read()[:200].decode(errors="replace")
            malformed = (
                name in BAD_NAMES or bool(query and query not in IGNORED_QUERIES)
                or (body is not None and not (choice == 4 and label == "empty"))
                or (choice == 5 and (domain != "persistent" or name == LONG_NAME))
                or (policy == "bogusPolicy" and choice in (0, 1, 6))
            )  # fmt: skip
            self._note(f"{method} {path[:120]} [{label}]", resp.status, text, malformed)
        except (OSError, http.client.HTTPException) as exc:
            self.stats.transport_errors[type(exc).__name__] += 1
        finally:
            conn.close()

    async def _ws(self, s: SidecarProc) -> None:
        rng = self.rng
        name = rng.choice((*BAD_NAMES, *GOOD_NAMES))
        if rng.random() < 0.5:
            query = rng.choice(("", "?subscriptionType=Bogus", "?receiverQueueSize=-1",
                                "?subscriptionType=%FF", "?pullMode=maybe"))  # fmt: skip
            url = f"{s.ws_url}/ws/v2/consumer/persistent/{LOOKUP_NAMESPACE}/{name}/sub{query}"
        else:
            query = rng.choice(("", "?messageRoutingMode=Bogus", "?maxPendingMessages=-5",
                                "?batchingMaxPublishDelay=x"))  # fmt: skip
            url = f"{s.ws_url}/ws/v2/producer/persistent/{LOOKUP_NAMESPACE}/{name}{query}"
        label = f"WS {url.split('/ws/v2/', 1)[1][:100]}"
        malformed = name in BAD_NAMES or bool(query and query not in VALID_QUERIES)
        try:
            async with websockets.connect(url, open_timeout=10, close_timeout=2) as ws:
                self._note(label, 101, "", malformed)
                for _ in range(rng.randint(1, 5)):
                    frame: str | bytes = rng.choice((
                        "not json", '{"payload": "%%%"}', json.dumps({"payload": 5}),
                        "[" * 5000 + "]" * 5000, rng.randbytes(50), '{"messageId": "AAAA"}',
                        '{"type": "permit", "permitMessages": -1}', "{}",
                    ))  # fmt: skip
                    await ws.send(frame)
                    try:
                        await asyncio.wait_for(ws.recv(), 1.0)
                    except TimeoutError:
                        pass
        except InvalidStatus as exc:
            status = exc.response.status_code
            body = exc.response.body or b""
            self._note(label, status, body[:200].decode(errors="replace"), malformed)
        except Exception as exc:  # noqa: BLE001 - closed connections are fine; 5xx are not
            self.stats.transport_errors[type(exc).__name__] += 1

    def _run(self) -> None:
        while not self.world.sleep(self.pause):
            s = self._target()
            if s is None:
                continue
            if self.rng.random() < 0.8:
                self._http(s)
            else:
                asyncio.run(self._ws(s))
