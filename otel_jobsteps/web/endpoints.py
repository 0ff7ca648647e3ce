"""How ``serve``'s routes reach their endpoints: the job routes, matched on the undecoded path,
and the guard every endpoint sits behind, which answers a request's errors."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from urllib.parse import unquote_to_bytes

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match, Route
from starlette.types import Scope

from ..errors import ConfigurationError, DatabaseUnavailableError, SchemaNotMigratedError
from .pages import Pages
from .parsing import check_text
from .rendering import json_response
from .security import raw_path

__all__ = ["AsyncEndpoint", "Endpoint", "JobRoute", "guarded", "guarded_async"]

logger = logging.getLogger("otel_jobsteps.web")

Endpoint = Callable[[Request], Response]
AsyncEndpoint = Callable[[Request], Awaitable[Response]]
_ANSWERED = (ConfigurationError, DatabaseUnavailableError, SchemaNotMigratedError)


def guarded(pages: Pages, endpoint: Endpoint, *, api: bool) -> Endpoint:
    """Errors of a request as answers: 400 for bad input, 503 while the database is away (the
    error page keeps refreshing, so it recovers on its own)."""

    def handle(request: Request) -> Response:
        try:
            check_text(request)
            return endpoint(request)
        except _ANSWERED as error:
            return _answer(pages, error, api=api)

    return handle


def guarded_async(pages: Pages, endpoint: AsyncEndpoint, *, api: bool) -> AsyncEndpoint:
    """`guarded` for an endpoint that runs on the event loop (the operator's actions)."""

    async def handle(request: Request) -> Response:
        try:
            check_text(request)
            return await endpoint(request)
        except _ANSWERED as error:
            return _answer(pages, error, api=api)

    return handle


def _answer(pages: Pages, error: Exception, *, api: bool) -> Response:
    if isinstance(error, ConfigurationError):
        status = 400
    else:
        logger.warning("serve: %s", error)
        status = 503
    if api:
        return json_response({"error": str(error)}, status)
    return pages.render("error.html", status, status=status, message=str(error))


class JobRoute(Route):
    """``PREFIX/{domain}/{job_id}[SUFFIX]`` matched on the undecoded path: a ``%2F`` stays in
    its segment, and the job id is the rest of the path before SUFFIX (``/jobs/d/a/b`` names
    job ``a/b``; ``/jobs/d/a%2Fdiff`` job ``a/diff``, whose page ``/jobs/d/a/diff`` is not)."""

    def __init__(
        self, path: str, endpoint: Endpoint | AsyncEndpoint, *, methods: list[str]
    ) -> None:
        super().__init__(path, endpoint, methods=methods)
        prefix, sep, suffix = path.partition("{domain}/{job_id}")
        assert sep, "a JobRoute path has {domain}/{job_id}"
        self.prefix, self.suffix = prefix.encode("ascii"), suffix.encode("ascii")

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        raw = raw_path(scope) if scope["type"] == "http" else b""
        if not raw.startswith(self.prefix) or not raw.endswith(self.suffix):
            return Match.NONE, {}
        named = raw[len(self.prefix) : len(raw) - len(self.suffix)]
        domain, sep, job_id = named.partition(b"/")
        if not domain or not sep:
            return Match.NONE, {}
        params = {"domain": _unquote(domain), "job_id": _unquote(job_id)}
        child = {"endpoint": self.endpoint, "path_params": params}
        allowed = self.methods is None or scope["method"] in self.methods
        return (Match.FULL if allowed else Match.PARTIAL), child


def _unquote(raw: bytes) -> str:
    """A percent-encoded path part as text (invalid UTF-8 cannot name a job: replaced)."""
    return unquote_to_bytes(raw).decode("utf-8", "replace")
