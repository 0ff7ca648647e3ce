"""``GET /healthz`` (the process answers) and ``GET /readyz`` (the database answers and grants the
rights needed, else 503 and why) of ``serve`` and ``collect``: no token, no job data."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from ._db import connection_kwargs
from .errors import describe
from .schema import is_partitioned
from .sql import load_queries

__all__ = ["COLLECT_RIGHTS", "SERVE_RIGHTS", "HealthMiddleware", "Readiness", "is_health_request"]

HEALTH_PATHS = frozenset({"/healthz", "/readyz"})
CHECK_TIMEOUT_S = 2.0  # a probe's connect; a probe answers before its own timeout
SERVE_RIGHTS = (("job_event", "job_log"), ("SELECT",))
COLLECT_RIGHTS = (
    ("job_event", "job_log", "otlp_trace", "otlp_span"),
    ("SELECT", "INSERT", "UPDATE", "DELETE"),
)


class Readiness:
    """Whether the service can work now: None, or the reason it cannot (one printable line)."""

    def __init__(
        self, dsn: str, *, schema: str, rights: tuple[Sequence[str], Sequence[str]]
    ) -> None:
        self.dsn = dsn
        self.schema = schema
        self.tables, self.rights = rights

    def _connect(self) -> psycopg.Connection[Any]:
        options = connection_kwargs(
            connect_timeout_s=CHECK_TIMEOUT_S, tcp_user_timeout_s=CHECK_TIMEOUT_S
        )
        return psycopg.connect(self.dsn, autocommit=True, **options)

    def layout(self) -> str:
        """``plain`` or ``partitioned``, for the line a service prints at start."""
        try:
            with self._connect() as conn:
                return "partitioned" if is_partitioned(conn, schema=self.schema) else "plain"
        except psycopg.Error as error:
            return f"unknown until the database answers ({describe(error)})"

    def problem(self) -> str | None:
        try:
            with self._connect() as conn:
                params = {"tables": list(self.tables), "rights": list(self.rights)}
                missing = conn.execute(
                    load_queries("health.sql")["missing_rights"], {**params, "schema": self.schema}
                ).fetchall()
        except psycopg.Error as error:  # libpq's messages name host and port, never a password
            return f"database unreachable: {describe(error)}"
        if any(absent for _, _, absent in missing):
            tables = sorted({table for table, _, absent in missing if absent})
            return f"schema {self.schema!r} lacks {', '.join(tables)}: run `otel-jobsteps migrate`"
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
