"""collect's access lines name what a request staged: spans for traces, log records for logs."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

pytest.importorskip("starlette", reason="needs the web extra")

from starlette.types import Receive, Scope, Send

from otel_jobsteps._http.requestlog import STAGED_KEY, Answered, RequestLog

GRPC_LOGS = "/opentelemetry.proto.collector.logs.v1.LogsService/Export"


async def _staging_app(scope: Scope, receive: Receive, send: Send) -> None:
    """What collect's handlers do: note how many items the request staged, answer 200."""
    scope["state"][STAGED_KEY] = 2
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b""})


def _post(log: RequestLog, path: str) -> None:
    scope = {"type": "http", "method": "POST", "path": path, "query_string": b""}

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        pass

    asyncio.run(log(scope, receive, send))


def test_log_requests_say_records_staged_and_trace_requests_spans_staged() -> None:
    lines: list[str] = []
    log = RequestLog(_staging_app, name="collect", access_log=True, write=lines.append)

    _post(log, "/v1/traces")
    _post(log, "/v1/logs")
    log.answered_elsewhere(Answered("grpc", GRPC_LOGS, 200, "OK", 0.001, 5))

    staged = [
        {k: v for k, v in json.loads(line).items() if k.endswith("_staged")} for line in lines
    ]
    assert staged == [{"spans_staged": 2}, {"records_staged": 2}, {"records_staged": 5}]
    assert log.stopped_line().endswith(
        "(3 answered since start, 2 spans staged, 7 log records staged)"
    )
