"""The demo's last step (``broker_shim/_demo_audit.py``) on a real broker, sidecar and Spark.

``make demo`` itself needs three sidecars and minutes; this runs exactly the function its
step 8 calls, on a log with a known delete, and checks what it prints and returns.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from examples._demo_audit import audit_demo
from sync import CacheConfig, PolicyService, PolicyTarget, ServiceConfig, WriterConfig
from sync.transport import KafkaConfig, KafkaTransport
from tests.support.kafka import free_port
from tests.support.sidecars import Sidecar


def test_demo_audit_step_reports_deletes_with_author_and_sidecars_in_sync(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic = f"audit-demo-{uuid.uuid4().hex[:10]}"
    config = ServiceConfig(
        cache=CacheConfig(topic=topic, dead_letter=False),
        writer=WriterConfig(author="erin", origin="test_audit_demo"),
    )
    gone = PolicyTarget.parse("persistent://acme/demo/gone")
    with PolicyService(KafkaTransport(KafkaConfig(kafka_bootstrap)), config).start() as svc:
        for i in range(5):
            svc.set(PolicyTarget.parse(f"persistent://acme/demo/t{i}"), {"maxConsumerPerTopic": i})
        svc.set(gone, {"messageTTLInSeconds": 60})
        svc.delete(gone)
    shim = Sidecar(kafka_bootstrap, topic, free_port(), tmp_path / "shim")
    lines: list[str] = []
    try:
        shim.wait_ready()
        result = audit_demo(
            kafka_bootstrap, tmp_path / "audit", [shim.url], topic=topic, out=lines.append
        )
    finally:
        shim.stop()
    text = "\n".join(lines)

    assert result.report == tmp_path / "audit" / "report.html"
    assert result.report.is_file() and "policy-sync audit" in result.report.read_text()
    assert [(key, author) for key, author, _ in result.deletes] == [(gone.key, "erin")]
    assert result.sidecars_agree is True
    assert f"audited Kafka topic {topic}" in text  # the CLI's console summary
    assert "DELETE 1, INSERT 6" in text
    assert f"erin deleted the policies of {gone.key}" in text
    assert f"report: {result.report.as_uri()}" in text
    assert f"{shim.url}: in sync" in text
    assert "the 1 live sidecars agree with the log" in text
