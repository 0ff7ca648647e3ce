"""collect on loopback answers loopback Host names only, as serve does: a web page elsewhere
that rebinds its own name to 127.0.0.1 can neither read /metrics or /readyz nor write rows."""

from __future__ import annotations

import json

import httpx

from tests.helpers import wait_until
from tests.ingest.collector import CollectorFactory, table_rows

FOREIGN = "rebind.attacker.example"


def _job_span(job_id: str) -> bytes:
    """An OTLP/JSON request of one finished job span (no step): one job_log row."""
    attributes = {"job.domain": "hosts", "job.id": job_id, "job.type": "t"}
    values = [{"key": k, "value": {"stringValue": v}} for k, v in attributes.items()]
    values.append({"key": "job.attempt", "value": {"intValue": "1"}})
    span = {
        "traceId": job_id.encode().hex().ljust(32, "0")[:32],
        "spanId": "b7ad6b7169203331",
        "name": "job",
        "startTimeUnixNano": "1764000000000000000",
        "endTimeUnixNano": "1764000001000000000",
        "attributes": values,
    }
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}).encode()


def _jobs(dsn: str) -> list[str]:
    return [row[1] for row in table_rows(dsn)[1]]


def test_a_foreign_host_is_421_on_every_path(
    start_collect: CollectorFactory, second_dsn: str
) -> None:
    collector = start_collect(second_dsn)
    port = collector.url.rsplit(":", 1)[1]
    for host in (FOREIGN, f"{FOREIGN}:{port}", "127.0.0.1.nip.io", ""):
        for path in ("/metrics", "/readyz", "/healthz", "/v1/traces"):
            reply = httpx.get(collector.url + path, headers={"host": host})
            assert reply.status_code == 421, (host, path)
        planted = httpx.post(
            collector.traces_url,
            content=_job_span("planted"),
            headers={"host": host, "content-type": "application/json"},
        )
        assert planted.status_code == 421, host
    for name in ("127.0.0.1", "localhost", "LOCALHOST", "[::1]"):
        reply = httpx.get(collector.url + "/metrics", headers={"host": f"{name}:{port}"})
        assert reply.status_code == 200, name
    sent = httpx.post(
        collector.traces_url,
        content=_job_span("sent"),
        headers={"content-type": "application/json"},
    )
    assert sent.status_code == 200
    wait_until(lambda: "sent" in _jobs(second_dsn), what="the loopback request's row")
    assert _jobs(second_dsn) == ["sent"]  # the 421s wrote nothing
