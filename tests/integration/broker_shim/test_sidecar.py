"""The sidecar process: health, Pulsar topic-policy REST, metrics, clean SIGTERM."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.http import create_topic, http
from tests.support.kafka import free_port
from tests.support.sidecars import Sidecar, run_cli

BASE = "/admin/v2/persistent/acme/ops/orders"


@pytest.fixture
def sidecar(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> Iterator[Sidecar]:
    shim = Sidecar(kafka_bootstrap, unique_name("ce"), free_port(), tmp_path)
    shim.wait_ready()
    create_topic(shim.url, "persistent://acme/ops/orders")
    yield shim
    shim.stop()


@pytest.fixture(scope="module")
def shared_sidecar(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Sidecar]:
    """One sidecar for the requests that must write nothing (each checks that itself)."""
    topic = f"ce-{uuid.uuid4().hex[:10]}"
    shim = Sidecar(kafka_bootstrap, topic, free_port(), tmp_path_factory.mktemp("shared"))
    shim.wait_ready()
    create_topic(shim.url, "persistent://acme/ops/orders")
    yield shim
    shim.stop()


def test_topic_policy_rest_like_pulsar(sidecar: Sidecar) -> None:
    url = sidecar.url + BASE
    unset = http("GET", url + "/maxConsumers")
    assert (unset.status, unset.body) == (200, "")  # Pulsar: unset is 200 with no body
    assert http("POST", url + "/maxConsumers", "5").status == 204
    assert http("GET", url + "/maxConsumers").json() == 5
    assert http("POST", url + "/messageTTL?messageTTL=60").status == 204
    assert http("GET", url + "/messageTTL").json() == 60
    retention = {"retentionTimeInMinutes": 10, "retentionSizeInMB": -1}
    assert http("POST", url + "/retention", json.dumps(retention)).status == 204
    assert http("GET", url + "/retention").json() == retention
    rate = {"dispatchThrottlingRateInMsg": 100}
    assert http("POST", url + "/dispatchRate", json.dumps(rate)).status == 204
    assert http("GET", url + "/dispatchRate").json() == {
        "dispatchThrottlingRateInMsg": 100,
        "dispatchThrottlingRateInByte": 0,
        "relativeToPublishRate": False,
        "ratePeriodInSecond": 0,  # what Pulsar 4.0.7 stores for an omitted field
    }
    types = '["Shared", "Key_Shared"]'
    assert http("POST", url + "/subscriptionTypesEnabled", types).status == 204
    assert http("GET", url + "/subscriptionTypesEnabled").json() == ["Shared", "Key_Shared"]
    assert http("POST", url + "/deduplicationEnabled", "true").status == 204
    assert http("GET", url + "/deduplicationEnabled").json() is True
    # global and applied
    assert http("POST", url + "/maxProducers?isGlobal=true", "3").status == 204
    assert http("GET", url + "/maxProducers").body == ""
    assert http("GET", url + "/maxProducers?isGlobal=true").json() == 3
    # policy-sync's applied view includes global values (Pulsar's REST read does not).
    assert http("GET", url + "/maxProducers?applied=true").json() == 3
    # Pulsar: no topic policy on a partition, and 404 for topics never created.
    assert http("GET", url + "-partition-2/maxProducers").status == 412
    assert http("GET", sidecar.url + BASE + "-nope/maxProducers").status == 404
    assert http("DELETE", url + "/maxConsumers").status == 204
    assert http("GET", url + "/maxConsumers").body == ""


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "reason"),
    [
        ("POST", BASE + "/maxConsumers", "-1", 412, "maxConsumers must be 0 or more"),
        ("POST", BASE + "/maxConsumers", '"x"', 400, "expected an integer"),
        ("POST", BASE + "/maxConsumers", "{", 400, "malformed JSON"),
        ("POST", BASE + "/maxConsumers", "", 400, "has no value"),
        ("POST", BASE + "/dispatchRate", '{"bogus": 1}', 400, "unknown field"),
        ("GET", BASE + "/noSuchPolicy", None, 404, "unknown topic policy"),
        ("GET", "/admin/v2/bogus/acme/ops/orders/maxConsumers", None, 412, "Invalid topic domain"),
        ("GET", BASE + "/maxConsumers?applied=maybe", None, 412, "true or false"),
    ],
)
def test_bad_requests_get_pulsar_style_errors_and_write_nothing(
    shared_sidecar: Sidecar, method: str, path: str, body: str | None, status: int, reason: str
) -> None:
    before = shared_sidecar.digest()
    result = http(method, shared_sidecar.url + path, body)
    assert result.status == status, result.body
    assert reason in result.json()["reason"]
    assert shared_sidecar.digest() == before


def test_health_and_metrics(sidecar: Sidecar) -> None:
    assert http("GET", sidecar.url + "/health").json()["state"] == "READY"
    digest_topic = sidecar.digest()
    assert digest_topic["size"] == 0
    metrics = http("GET", sidecar.url + "/metrics").body
    for name in (
        'policy_sync_cache_state{state="READY"} 1.0',
        "policy_sync_cache_size 0.0",
        "policy_sync_cache_lag_records",
        "policy_sync_cache_bootstrap_seconds",
        'policy_sync_poison_records_total{reason="bad_magic"} 0.0',
        "policy_sync_apply_latency_seconds_bucket",
    ):
        assert name in metrics


def test_sigterm_shuts_down_cleanly_and_snapshot_speeds_restart(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    topic = unique_name("ce")
    lines = "\n".join(
        json.dumps({"target": f"acme/ops/t{i}", "policies": {"maxConsumerPerTopic": i}})
        for i in range(50)
    )
    assert (
        run_cli(
            "policyctl", "--topic", topic, "import", "-", bootstrap=kafka_bootstrap, stdin=lines
        )
    ).returncode == 0
    port = free_port()
    shim = Sidecar(kafka_bootstrap, topic, port, tmp_path)
    try:
        shim.wait_ready()
        first = shim.digest()
        assert first["size"] == 50
    finally:
        stopped = shim.stop()  # never left running by a failure (it would outlive the run)
    assert stopped == 0
    assert (tmp_path / "state-1" / f"{topic}.snapshot").exists()
    again = Sidecar(kafka_bootstrap, topic, port, tmp_path)
    try:
        again.wait_ready()
        assert again.digest()["digest"] == first["digest"]
        assert "resumed from snapshot with 50 policies" in again.log_text()
    finally:
        stopped = again.stop()
    assert stopped == 0
