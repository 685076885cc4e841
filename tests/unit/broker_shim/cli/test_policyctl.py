"""``policyctl`` on the in-memory twin (the same commands on real Kafka:
``tests/integration/broker_shim/cli/test_policyctl.py``)."""

from __future__ import annotations

import argparse
import json
from typing import Any

import pytest

from broker_shim.cli import policyctl
from sync import PolicyService
from sync.transport import MemoryTransport, Transport


class Ctl:
    """``policyctl`` whose every run reads and writes one in-memory change-events log."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
        self.transport = MemoryTransport()
        self.capsys = capsys

        def transport(_args: argparse.Namespace) -> MemoryTransport:
            return self.transport

        def service(_args: argparse.Namespace, transport: Transport) -> PolicyService:
            return PolicyService(transport).start(timeout_s=10)

        monkeypatch.setattr(policyctl, "_transport", transport)
        monkeypatch.setattr(policyctl, "_service", service)

    def __call__(self, *argv: str) -> tuple[int, Any, str]:
        """(exit code, printed JSON or None, standard error)."""
        with pytest.raises(SystemExit) as exited:
            policyctl.main(list(argv))
        out, err = self.capsys.readouterr()
        code = exited.value.code
        return code if isinstance(code, int) else 1, json.loads(out) if out else None, err


@pytest.fixture
def ctl(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Ctl:
    return Ctl(monkeypatch, capsys)


def test_minus_one_rates_are_set_and_applied(ctl: Ctl) -> None:
    """-1 (any negative rate) is unlimited, as Pulsar's clients send it."""
    publish = {"publishThrottlingRateInMsg": 20, "publishThrottlingRateInByte": -1}
    code, out, err = ctl("set", "acme/ops/orders", "--json", json.dumps({"publishRate": publish}))
    assert (code, out) == (0, {"publishRate": publish}), err
    dispatch = {
        "dispatchThrottlingRateInMsg": -1,
        "dispatchThrottlingRateInByte": -2,
        "relativeToPublishRate": False,
        "ratePeriodInSecond": 1,
    }
    subscribe = {"subscribeThrottlingRatePerConsumer": -1, "ratePeriodInSecond": 30}
    namespace = {
        "dispatchRate": dispatch,
        "subscriptionDispatchRate": dispatch,
        "replicatorDispatchRate": dispatch,
        "subscribeRate": subscribe,
    }
    code, out, err = ctl("set", "acme/ops", "--json", json.dumps(namespace))
    assert (code, out) == (0, namespace), err
    code, out, err = ctl("get", "persistent://acme/ops/orders", "--applied")
    assert (code, out) == (0, {"publishRate": publish, **namespace}), err


def test_a_rate_beyond_its_type_is_still_refused(ctl: Ctl) -> None:
    doc = json.dumps({"publishRate": {"publishThrottlingRateInMsg": -(2**31) - 1}})
    code, out, err = ctl("set", "acme/ops/orders", "--json", doc)
    assert (code, out) == (2, None)
    assert "publishRate.publishThrottlingRateInMsg: must be between -2147483648" in err
