"""``policyctl`` checks a topic's ``replicationClusters`` (and a geo global write's
namespace) against the cluster registry as the REST API does -- the same functions, the same
reasons -- before anything is written; a refusal exits 2 (in-memory twin; the REST side:
``tests/unit/broker_shim/test_replication_http.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sync.cluster._cluster_record import ClusterRecord, cluster_key
from sync.cluster._metadata import Change, MetadataStore, MetadataWriter
from sync.cluster._ns_replication_record import ReplicationClusters, replication_key
from sync.cluster._records import TenantRecord, tenant_key
from sync.naming import NamespaceName
from tests.unit.broker_shim.cli.test_policyctl import Ctl

GLOBAL_REASON = (
    "Please do not use the global topic level policy when namespace-level replication is "
    "not enabled, because the global level policy relies on namespace-level replication"
)
NS = NamespaceName("geo", "ns")


def _registry(ctl: Ctl, records: dict[str, bytes]) -> None:
    """Write registry records as the sidecars' admin API would."""
    store = MetadataStore(ctl.transport).start()
    store.wait_ready(10)
    writer = MetadataWriter(ctl.transport, store)
    try:
        writer.update(lambda _store: Change(dict(records), None))
    finally:
        writer.close()
        store.close()


def _cluster(name: str) -> dict[str, bytes]:
    body = {"serviceUrl": f"http://{name}.example:8080"}
    return {cluster_key(name): ClusterRecord.of(name, body).to_json()}


def _tenant(*allowed: str) -> dict[str, bytes]:
    return {tenant_key("geo"): TenantRecord("geo", (), tuple(allowed)).to_json()}


def _replication(*clusters: str) -> dict[str, bytes]:
    return {replication_key(NS): ReplicationClusters(str(NS), tuple(clusters)).to_json()}


@pytest.fixture
def ctl(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Ctl:
    return Ctl(monkeypatch, capsys)


def _set(ctl: Ctl, clusters: list[str], *flags: str) -> tuple[int, object, str]:
    doc = json.dumps({"replicationClusters": clusters})
    return ctl("--cluster", "east", "set", "geo/ns/t", "--json", doc, *flags)


def _unset(ctl: Ctl, *flags: str) -> bool:
    code, _, _ = ctl("--cluster", "east", "get", "geo/ns/t", *flags)
    return code == 3


def test_replication_clusters_are_checked_like_the_rest_api_and_refusals_write_nothing(
    ctl: Ctl,
) -> None:
    refusals = [
        (["west"], "Can not remove local cluster from the local topic-level replication"),
        (["east", "west"], "Invalid cluster id: west"),
    ]
    for clusters, reason in refusals:
        code, out, err = _set(ctl, clusters)
        assert (code, out) == (2, None) and reason in err, err
        assert _unset(ctl)
    _registry(ctl, {**_cluster("west"), **_tenant("east")})
    code, _, err = _set(ctl, ["east", "west"])
    assert code == 2, err
    assert "Cluster [west] is not in the list of allowed clusters list for tenant [geo]" in err
    code, _, err = _set(ctl, ["east", "west"], "--global")
    assert code == 2 and GLOBAL_REASON in err, err
    assert _unset(ctl) and _unset(ctl, "--global")

    _registry(ctl, {**_tenant("east", "west")})
    code, out, err = _set(ctl, ["east", "west"])
    assert (code, out) == (0, {"replicationClusters": ["east", "west"]}), err
    code, _, err = _set(ctl, ["east", "west"], "--global")
    assert code == 2 and GLOBAL_REASON in err, err  # the namespace replicates to east only
    _registry(ctl, _replication("east", "west"))
    code, out, err = _set(ctl, ["west", "east"], "--global")
    assert code == 0, err


def test_an_import_line_is_refused_by_the_same_check_and_nothing_is_written(
    ctl: Ctl, tmp_path: Path
) -> None:
    lines = [
        {"target": "geo/ns/a", "policies": {"maxConsumerPerTopic": 1}},
        {"target": "geo/ns/b", "policies": {"replicationClusters": ["east", "nowhere"]}},
    ]
    path = tmp_path / "import.ndjson"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    code, out, err = ctl("--cluster", "east", "import", str(path))
    assert (code, out) == (2, None)
    assert "persistent://geo/ns/b: Invalid cluster id: nowhere" in err
    assert ctl("--cluster", "east", "get", "geo/ns/a")[0] == 3


def test_a_geo_global_write_outside_the_namespace_replication_is_refused(ctl: Ctl) -> None:
    _registry(ctl, {**_cluster("west"), **_tenant("east", "west"), **_replication("west")})
    doc = json.dumps({"maxConsumerPerTopic": 3})
    argv = ("--cluster", "east", "--geo-peers", "west", "set", "geo/ns/t", "--global")
    code, out, err = ctl(*argv, "--json", doc)
    assert (code, out) == (2, None)
    reason = (
        "Namespace missing local cluster name in clusters list: "
        "local_cluster=east ns=geo/ns clusters=[west]"
    )
    assert reason in err, err
    assert _unset(ctl, "--global")
