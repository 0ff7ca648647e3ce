"""collect's app in the test's process (its staging at hand for the counters), and the story
of one job whose ids, keys and texts the test chooses."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.trace import Tracer
from starlette.testclient import TestClient

from otel_jobsteps._ingest.app import create_app
from otel_jobsteps._ingest.settings import CollectSettings
from otel_jobsteps._ingest.staging import Staging
from tests.ingest.requests import PROTOBUF, request_of


@dataclass
class Receiver:
    client: TestClient
    staging: Staging

    def post(self, spans: Sequence[Span]) -> Any:  # an httpx Response
        body = request_of(spans).SerializeToString()
        return self.client.post("/v1/traces", content=body, headers=PROTOBUF)

    def count(self, name: str) -> int:
        return self.staging.stats.get(name)


@contextmanager
def receiving(dsn: str, **app: Any) -> Iterator[Receiver]:
    """collect writing ``dsn`` (two connections), served in this process."""
    staging = Staging(CollectSettings(dsn, connections=2, connect_timeout_s=2))
    with TestClient(create_app(staging, **app)) as client:
        yield Receiver(client, staging)


def one_job(
    tracer: Tracer,
    *,
    domain: object,
    job_id: object,
    key: object = "STEP",
    kind: object = "type",
    message: object = "message",
) -> None:
    """A job span holding a step span and an event span, with these values."""
    job = {"job.domain": domain, "job.id": job_id, "job.attempt": 1, "job.type": kind}
    with tracer.start_as_current_span("job", attributes=job):  # type: ignore[arg-type]
        with tracer.start_as_current_span("step", attributes={"job.step.key": key}):  # type: ignore[dict-item]
            pass
        event = {"job.event.type": kind, "job.event.message": message}
        with tracer.start_as_current_span("event", attributes=event):  # type: ignore[arg-type]
            pass
