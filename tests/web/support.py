"""What the web tests share: hostile and odd ids, the browser, a live server, a timed story."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import uvicorn
from opentelemetry.trace import Span, Status, StatusCode, Tracer, set_span_in_context
from starlette.types import ASGIApp

from otel_jobsteps import (
    JOB_ATTEMPT,
    JOB_DOMAIN,
    JOB_EVENT_MESSAGE,
    JOB_EVENT_TYPE,
    JOB_ID,
    JOB_STEP_KEY,
    JOB_TYPE,
    job_attempt,
    progress,
    record_job_event,
    step,
)
from tests.helpers import TracingFactory, wait_until

HOSTILE = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'


HOSTILE_ID = "evil/" + HOSTILE


# Hostile but legal (domain, job id) pairs; ("a", "b/7") is what "/jobs/a/b/7" names.
ODD_JOBS = [
    ("a/b", "7"),
    ("a", "b/7"),
    ("render", "crlf\r\nid"),
    ("render", ".."),
    ("render", "."),
    ("..", "1"),
    (".", "1"),
    ("render", "%2E%2E"),
    ("render", "why?"),
    ("render", "frag#1"),
    ("render", "100%"),
    ("render", "with space"),
    ("render", "naïve ✓"),
]


TRACE_URL = "http://jaeger.example:16686/trace/{trace_id}?uiFind={span_id}&start={start_ms}"


def record_hostile(tracing: TracingFactory) -> str:
    """A job whose step key, progress detail, message and event carry HTML payloads."""
    tracer, processor = tracing()
    try:
        with job_attempt("evil", HOSTILE_ID, HOSTILE, 0, tracer=tracer):
            with step(HOSTILE, tracer=tracer):
                progress(note=HOSTILE)
                raise ValueError(HOSTILE)
    except ValueError:
        pass
    record_job_event("evil", HOSTILE_ID, HOSTILE, HOSTILE, tracer=tracer)
    assert processor.force_flush(10_000)
    return HOSTILE_ID


BROWSER_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


REQUIRE_BROWSER = os.environ.get("OTEL_JOBSTEPS_REQUIRE_BROWSER") == "1"


ARTIFACTS = Path(
    os.environ.get("OTEL_JOBSTEPS_TEST_ARTIFACTS")
    or Path(tempfile.gettempdir()) / "otel_jobsteps-test-artifacts"
)


DOCS = Path(__file__).resolve().parents[2] / "docs"


S = 1_000_000_000


@contextmanager
def live_server(app: ASGIApp, **options: Any) -> Iterator[str]:
    """Serve ``app`` with uvicorn on a free loopback port in a thread; yields its base URL.
    ``options``: more of uvicorn's (``serve``'s own are `UVICORN_OPTIONS`)."""
    config = uvicorn.Config(app, host="127.0.0.1", port=0, **{"log_level": "warning", **options})
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="web-test-server", daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, what="uvicorn to start")
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def chromium() -> str | None:
    configured = os.environ.get("OTEL_JOBSTEPS_CHROMIUM")
    if configured:
        return configured if os.access(configured, os.X_OK) else None
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def record_timed_story(tracer: Tracer, job_id: str = "7") -> None:
    """The seed story with real-looking durations (spans with explicit times, a minute ago):
    attempt 1 renders for 2.5 s, stalls once, fails to save after 1.5 s; attempt 2 renders for
    2.5 s and saves in 1 s."""
    base = time.time_ns() - 60 * S
    attributes = {JOB_DOMAIN: "render", JOB_ID: job_id, JOB_TYPE: "thumbnail"}

    def at(seconds: float) -> int:
        return base + int(seconds * S)

    def child(parent: Span, name: str, start: float, **attrs: Any) -> Span:
        return tracer.start_span(
            name, context=set_span_in_context(parent), attributes=attrs, start_time=at(start)
        )

    job = tracer.start_span("job", attributes={**attributes, JOB_ATTEMPT: 1}, start_time=at(0))
    render = child(job, "render", 0.1, **{JOB_STEP_KEY: "RENDER"})
    for when, pct in ((0.8, 25), (1.6, 50), (2.5, 100)):
        render.add_event("progress", {"pct": pct, "frames": pct * 3}, timestamp=at(when))
    stalled = child(job, "stalled", 1.5, **{JOB_EVENT_TYPE: "STALLED"})
    stalled.set_attribute(JOB_EVENT_MESSAGE, "worker lost its lock")
    stalled.end(end_time=at(1.5))
    render.end(end_time=at(2.6))
    save = child(job, "save", 2.7, **{JOB_STEP_KEY: "SAVE"})
    error = OSError("disk full")
    for span in (save, job):
        span.record_exception(error, timestamp=at(4.2))
        span.set_status(Status(StatusCode.ERROR, str(error)))
    save.end(end_time=at(4.2))
    retry = child(job, "retry", 4.25, **{JOB_EVENT_TYPE: "RETRY_SCHEDULED"})
    retry.set_attribute(JOB_EVENT_MESSAGE, "retry in 2s")
    retry.end(end_time=at(4.25))
    job.end(end_time=at(4.3))

    job = tracer.start_span("job", attributes={**attributes, JOB_ATTEMPT: 2}, start_time=at(6.3))
    render = child(job, "render", 6.4, **{JOB_STEP_KEY: "RENDER"})
    render.add_event("progress", {"pct": 100, "frames": 300}, timestamp=at(8.8))
    render.end(end_time=at(8.9))
    save = child(job, "save", 9.0, **{JOB_STEP_KEY: "SAVE"})
    save.end(end_time=at(10.0))
    job.end(end_time=at(10.1))


FORTY_FAILS_AT = {1: 13, 2: 27}
"""The 40-step job: the step each failing attempt fails at (attempt 3 runs all 40)."""


def step_key(number: int) -> str:
    return f"S{number:02d}"


def record_forty_steps(tracer: Tracer, job_id: str = "forty") -> None:
    """Three attempts of a 40-step job (spans with explicit times, ten minutes ago), 0.1 s a
    step: attempt 1 fails at S13 (``ValueError: boom 1``), attempt 2 at S27, attempt 3 ends."""
    base = time.time_ns() - 600 * S
    attributes = {JOB_DOMAIN: "batch", JOB_ID: job_id, JOB_TYPE: "import"}
    at = base
    for attempt in (1, 2, 3):
        job = tracer.start_span(
            "job", attributes={**attributes, JOB_ATTEMPT: attempt}, start_time=at
        )
        for number in range(1, 41):
            key = step_key(number)
            span = tracer.start_span(
                key, context=set_span_in_context(job), attributes={JOB_STEP_KEY: key}, start_time=at
            )
            at += S // 10
            if FORTY_FAILS_AT.get(attempt) == number:
                error = ValueError(f"boom {attempt}")
                for failed in (span, job):
                    failed.record_exception(error, timestamp=at)
                    failed.set_status(Status(StatusCode.ERROR, str(error)))
                span.end(end_time=at)
                break
            span.end(end_time=at)
        job.end(end_time=at)
        at += S


def tagged_job(tracer: Tracer, job_id: str, attempt: int, **tags: object) -> None:
    """One attempt of one step whose job span carries ``tags`` as job.tag.* attributes."""
    attributes = {JOB_DOMAIN: "shop", JOB_ID: job_id, JOB_TYPE: "invoice", JOB_ATTEMPT: attempt}
    attributes.update({f"job.tag.{name}": value for name, value in tags.items()})
    job = tracer.start_span("job", attributes=attributes)  # type: ignore[arg-type]
    tracer.start_span(
        "send", context=set_span_in_context(job), attributes={JOB_STEP_KEY: "SEND"}
    ).end()
    job.end()


ADD_LINE = """
INSERT INTO job_event (domain, job_id, job_type, attempt, type, step_key, message, detail,
                       trace_id, span_id, created_at)
SELECT domain, job_id, job_type, attempt, 'LOG', %(step_key)s, %(message)s, %(detail)s,
       trace_id, span_id, {at}
FROM job_event
WHERE domain = %(domain)s AND job_id = %(job_id)s AND attempt = %(attempt)s AND type = 'STEP'
ORDER BY created_at LIMIT 1
"""


def add_line(
    conn: psycopg.Connection[Any],
    job_id: str,
    attempt: int,
    step_key: str | None,
    message: str,
    *,
    severity: str = "INFO",
    at: str = "created_at + interval '1 ms'",
    domain: str = "render",
    **detail: Any,
) -> None:
    """A LOG row of an attempt, at ``at`` (SQL over its first step's row)."""
    statement = ADD_LINE.replace("{at}", at)  # test-only SQL, fixed texts
    conn.execute(
        statement,  # type: ignore[arg-type]
        {
            "domain": domain,
            "job_id": job_id,
            "attempt": attempt,
            "step_key": step_key,
            "message": message,
            "detail": json.dumps({"severity": severity, "attributes": {}, **detail}),
        },
    )


RETRIED_JOB = (
    """
INSERT INTO job_event (domain, job_id, job_type, attempt, type, step_key, step_status, message,
                       created_at, ended_at)
SELECT 'mail', 'retried', 'newsletter', n, 'STEP', s.key,
       CASE WHEN n = %(last)s AND s.key = 'SEND' THEN 'RUNNING'
            WHEN n %% 1000 = 0 AND s.key = 'SEND' THEN 'FAILED' ELSE 'COMPLETED' END,
       CASE WHEN n %% 1000 = 0 AND s.key = 'SEND' THEN 'smtp down' END,
       now() - interval '8 days' + n * interval '1 minute' + s.at * interval '1 second',
       CASE WHEN n < %(last)s OR s.key = 'RENDER'
            THEN now() - interval '8 days' + n * interval '1 minute'
                 + (s.at + 1) * interval '1 second' END
FROM generate_series(1, %(last)s) AS n, (VALUES ('RENDER', 0), ('SEND', 2)) AS s (key, at)
""",
    """
INSERT INTO job_event (domain, job_id, job_type, attempt, type, message, created_at)
SELECT 'mail', 'retried', 'newsletter', n, 'RETRY_SCHEDULED', 'again in a minute',
       now() - interval '8 days' + n * interval '1 minute' + interval '5 seconds'
FROM generate_series(1, %(last)s - 1) AS n
""",
    """
INSERT INTO job_log (domain, job_id, job_type, attempt, status, reason, detail, created_at)
SELECT 'mail', 'retried', 'newsletter', n,
       CASE WHEN n %% 1000 = 0 THEN 'FAILED' ELSE 'COMPLETED' END,
       CASE WHEN n %% 1000 = 0 THEN 'error' END,
       CASE WHEN n %% 1000 = 0 THEN '{"error": "SMTPError: down", "step": "SEND"}'::jsonb END,
       now() - interval '8 days' + n * interval '1 minute' + interval '4 seconds'
FROM generate_series(1, %(last)s - 1) AS n
""",
)


def retried_job(conn: psycopg.Connection[Any], attempts: int) -> None:
    """Job mail / retried with ``attempts`` attempts a minute apart, each a RENDER and a SEND
    step and a RETRY_SCHEDULED event: every 1000th fails in SEND, the latest is still sending,
    the others completed (rows written by SQL: 10,000 attempts take a second)."""
    for statement in RETRIED_JOB:
        conn.execute(statement, {"last": attempts})  # type: ignore[call-overload]


LIST_JOBS = (
    (1, "job-12345", "newsletter"),
    (2, "0f8fad5b-d9cb-469f-a165-70867728950e", "thumbnail"),  # long: may break anywhere
    (3, "invoice-2026-00042", "invoice.render"),
    (4, "x", "newsletter"),
    (5, "newsletter-2026-12-07", "newsletter"),
)
LIST_ROWS = (
    """
INSERT INTO job_event (domain, job_id, job_type, attempt, type, step_key, step_status, message,
                       detail, created_at, ended_at)
SELECT 'mail', j.id, j.type, 1, 'STEP', k.key,
       CASE WHEN k.key = 'send.batch' AND j.n = 3 THEN 'FAILED' ELSE 'COMPLETED' END,
       CASE WHEN k.key = 'send.batch' AND j.n = 3
            THEN 'SMTPRecipientsRefused: all recipients were refused by the server' END,
       '{"sent": 1200, "total": 5000}'::jsonb,
       now() - interval '1 hour' + j.n * interval '1 minute' + k.at * interval '10 seconds',
       now() - interval '1 hour' + j.n * interval '1 minute' + (k.at + 1) * interval '10 seconds'
FROM unnest(%(numbers)s::int[], %(ids)s::text[], %(types)s::text[]) AS j (n, id, type),
     (VALUES ('load', 0), ('RENDER_THUMBNAIL', 1), ('send.batch', 2)) AS k (key, at)
""",
    """
INSERT INTO job_log (domain, job_id, job_type, attempt, status, reason, detail, created_at)
SELECT 'mail', j.id, j.type, 1, CASE WHEN j.n = 3 THEN 'FAILED' ELSE 'COMPLETED' END,
       CASE WHEN j.n = 3 THEN 'error' END,
       CASE WHEN j.n = 3 THEN '{"error": "SMTPRecipientsRefused: all recipients were refused",
                                "step": "send.batch"}'::jsonb END,
       now() - interval '30 minutes'
FROM unnest(%(numbers)s::int[], %(ids)s::text[], %(types)s::text[]) AS j (n, id, type)
""",
    """
INSERT INTO job_event (domain, job_id, job_type, attempt, type, step_key, step_status, detail,
                       execution_id, created_at, heartbeat_at)
VALUES ('mail', 'newsletter-2026-12-07', 'newsletter', 2, 'STEP', 'send.batch', 'RUNNING',
        '{"sent": 1200, "total": 5000, "note": "throttled by the provider"}', 'w',
        now() - interval '5 minutes', now() - interval '1 minute'),
       ('mail', '7c9e6679-7425-40de-944b-e07fc1f90ae7', 'thumbnail', 1, 'STEP',
        'RENDER_THUMBNAIL', 'RUNNING', NULL, 'w', now() - interval '2 minutes', NULL)
""",
)


def record_list_rows(conn: psycopg.Connection[Any]) -> None:
    """Jobs of the shapes lists show (short and UUID ids, dotted and upper-case keys, a failure
    with a long message, two open steps), written by SQL."""
    numbers, ids, types = (list(column) for column in zip(*LIST_JOBS, strict=True))
    for statement in LIST_ROWS:
        conn.execute(statement, {"numbers": numbers, "ids": ids, "types": types})  # type: ignore[call-overload]
