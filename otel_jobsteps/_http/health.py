"""``GET /healthz`` (the process answers) and ``GET /readyz`` (the database answers, takes the
service's work and grants the rights it needs, else 503 and why) of ``serve`` and ``collect``:
no token, no job data."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from .._pg.db import connection_kwargs
from ..errors import describe
from ..schema import check_schema_version, is_partitioned
from ..sql import load_queries

__all__ = [
    "COLLECT_RIGHTS",
    "SERVE_RIGHTS",
    "HealthMiddleware",
    "Needs",
    "Readiness",
    "is_health_request",
]

HEALTH_PATHS = frozenset({"/healthz", "/readyz"})
CHECK_TIMEOUT_S = 2.0  # a probe's connect; a probe answers before its own timeout


@dataclass(frozen=True)
class Needs:
    """What a service needs of the database: these rights on each of these tables (or views),
    and, if it ``writes``, a session that may write (no standby, no read-only default)."""

    service: str
    tables: tuple[str, ...]
    rights: tuple[str, ...]
    writes: bool


# job_failed_step and job_retried_success: the retry tax's summaries (migrations 0019 and 0022),
# read by /steps.
SERVE_RIGHTS = Needs(
    "serve",
    (
        "job_event",
        "job_log",
        "job_attempt",
        "job_step_duration",
        "job_failed_step",
        "job_retried_success",
    ),
    ("SELECT",),
    False,
)
# Every table a request or the settling pass reads or writes; it deletes what it re-derives.
COLLECT_RIGHTS = Needs(
    "collect",
    ("job_event", "job_log", "otlp_trace", "otlp_span", "otlp_job", "otlp_attempt", "otlp_log"),
    ("SELECT", "INSERT", "UPDATE", "DELETE"),
    True,
)


class Readiness:
    """Whether the service can work now: None, or the reason it cannot (one printable line).

    An answer is reused for ``cache_s`` (by ``clock``): a load balancer's probes and a
    kubelet's cost one short connection and one statement a second, not one each.
    """

    cache_s = 1.0

    def __init__(
        self,
        dsn: str,
        *,
        schema: str,
        rights: Needs,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.dsn = dsn
        self.schema = schema
        self.needs = rights
        self._clock = clock
        self._lock = threading.Lock()  # concurrent probes wait for one check and share it
        self._answer: tuple[float, str | None] | None = None

    def _connect(self) -> psycopg.Connection[Any]:
        options = connection_kwargs(
            connect_timeout_s=CHECK_TIMEOUT_S, tcp_user_timeout_s=CHECK_TIMEOUT_S
        )
        return psycopg.connect(self.dsn, autocommit=True, **options)

    def layout(self) -> str:
        """``plain`` or ``partitioned``, for the line a service prints at start: where the
        database answers, a schema newer than this otel_jobsteps is refused first
        (`ConfigurationError`, as `migrate` and the writer refuse it)."""
        try:
            with self._connect() as conn:
                check_schema_version(conn, schema=self.schema)
                return "partitioned" if is_partitioned(conn, schema=self.schema) else "plain"
        except psycopg.Error as error:
            return f"unknown until the database answers ({describe(error)})"

    def problem(self) -> str | None:
        """None when ready, else why not: the last answer while it is younger than ``cache_s``."""
        with self._lock:
            now = self._clock()
            if self._answer is not None and now - self._answer[0] < self.cache_s:
                return self._answer[1]
            problem = self._check()
            self._answer = (now, problem)
            return problem

    def _check(self) -> str | None:
        needs = self.needs
        params = {"tables": list(needs.tables), "rights": list(needs.rights), "schema": self.schema}
        try:
            with self._connect() as conn:
                found = conn.execute(load_queries("health.sql")["readiness"], params).fetchall()
        except psycopg.Error as error:  # libpq's messages name host and port, never a password
            return f"database unreachable: {describe(error)}"
        read_only, in_recovery = found[0][:2]
        missing = [(table, right, absent) for _, _, table, right, absent in found if table]
        if needs.writes and in_recovery:
            return (
                f"the database is a standby in recovery: {needs.service} writes to a primary"
                " (with several hosts in the DSN, add target_session_attrs=read-write)"
            )
        if needs.writes and read_only:
            return (
                f"the database is read-only (default_transaction_read_only is on):"
                f" {needs.service} cannot write"
            )
        absent = {table for table, _, gone in missing if gone}
        if absent:
            tables = ", ".join(table for table in needs.tables if table in absent)
            return f"schema {self.schema!r} lacks {tables}: run `otel-jobsteps migrate`"
        if missing:
            lacks = ", ".join(f"{right} on {table}" for table, right, _ in missing)
            return f"this role lacks {lacks}"
        return None


def is_health_request(scope: Scope) -> bool:
    """A GET of ``/healthz`` or ``/readyz``: answered without a token."""
    return scope["type"] == "http" and scope["method"] == "GET" and scope["path"] in HEALTH_PATHS


class HealthMiddleware:
    """Answers the two health paths itself, before the app's routes."""

    def __init__(self, app: ASGIApp, readiness: Readiness) -> None:
        self.app = app
        self.readiness = readiness

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not is_health_request(scope):
            await self.app(scope, receive, send)
            return
        response: Response
        if scope["path"] == "/healthz":
            response = PlainTextResponse("ok\n")
        else:
            problem = await run_in_threadpool(self.readiness.problem)
            body: dict[str, Any] = {"ready": problem is None}
            if problem is not None:
                body["reason"] = problem
            response = JSONResponse(body, 200 if problem is None else 503)
        await response(scope, receive, send)
