"""The security layer of ``serve``: headers (a strict CSP), token and Host check, one middleware
each; `secure` composes them, so every answer, a refusal too, carries the headers. The token's
rules (length, comparison, slowing guesses) are in `auth`."""

from __future__ import annotations

import re
from collections.abc import MutableMapping
from typing import Any
from urllib.parse import quote, unquote, urlencode

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from .._http.health import is_health_request
from .._http.loopback import LoopbackHostMiddleware, is_loopback
from ..errors import ConfigurationError
from .auth import FailureLimiter, check_token, same_token

__all__ = [
    "CSP",
    "SECURITY_HEADERS",
    "TOKEN_COOKIE",
    "TOKEN_ENV",
    "SecurityHeadersMiddleware",
    "TokenMiddleware",
    "bearer_token",
    "check_exposure",
    "local_path",
    "raw_path",
    "secure",
]

TOKEN_ENV = "OTEL_JOBSTEPS_WEB_TOKEN"
TOKEN_COOKIE = "otel_jobsteps_token"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "cache-control": "no-store",
}
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_exposure(host: str, token: str | None, no_auth: bool) -> None:
    """Refuse a guessable token, and to listen beyond loopback without a token unless the
    operator said ``--no-auth``."""
    if token is not None:
        check_token(token, "the web token")
    if token and no_auth:
        raise ConfigurationError("--token and --no-auth exclude each other")
    if not is_loopback(host) and not token and not no_auth:
        raise ConfigurationError(
            f"listening on {host} exposes the jobs beyond this machine: pass --token "
            f"(or set {TOKEN_ENV}) or, deliberately, --no-auth"
        )


def secure(
    app: ASGIApp,
    token: str | None,
    hosts: frozenset[str] | None,
    failures: FailureLimiter | None = None,
    operator_token: str | None = None,
) -> ASGIApp:
    """``app`` behind the Host check (with ``hosts``), the token (with one; wrong ones slowed by
    ``failures``, else by a limiter of its own; the operator token reads too) and the headers."""
    if token or operator_token:
        app = TokenMiddleware(app, token, failures, operator_token)
    if hosts is not None:
        app = LoopbackHostMiddleware(app, hosts)
    return SecurityHeadersMiddleware(app)


class SecurityHeadersMiddleware:
    """Adds `SECURITY_HEADERS` to every HTTP response of ``app``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


class TokenMiddleware:
    """Every HTTP request but the health probes must carry ``token``: a bearer header, or the
    cookie a ``?token=`` visit sets. A client (its remote address: no X-Forwarded-For is
    trusted) that sent wrong ones is answered 429 for a while (``failures``). The
    ``operator_token`` is good wherever ``token`` is; with no ``token``, reading needs none, and
    only a token sent is checked (the operator's session starts with its ``?token=`` visit)."""

    def __init__(
        self,
        app: ASGIApp,
        token: str | None,
        failures: FailureLimiter | None = None,
        operator_token: str | None = None,
    ) -> None:
        self.app = app
        self.tokens = [good for good in (token, operator_token) if good]
        self.required = bool(token)
        self.failures = FailureLimiter() if failures is None else failures

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not is_health_request(scope):
            refused = self._authenticate(Request(scope))
            if refused is not None:
                await refused(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _authenticate(self, request: Request) -> Response | None:
        client = request.client.host if request.client else ""
        wait = self.failures.retry_after(client)
        if wait is not None:  # the token is not even compared: a guess gets no answer
            return _refusal(request, 429, f"Too many wrong tokens: retry in {wait} s.", wait)
        given = request.query_params.get("token")
        if given and self._good(given):
            self.failures.succeeded(client)
            return self._into_cookie(request, given)
        bearer = bearer_token(request)
        cookie = request.cookies.get(TOKEN_COOKIE)
        candidates = [c for c in (given, bearer, cookie) if c]
        if any(self._good(candidate) for candidate in candidates):
            self.failures.succeeded(client)
            return None
        if not candidates and not self.required:
            return None
        if candidates:  # a request that sent no token is no guess: not counted
            self.failures.failed(client)
        refused = _refusal(
            request,
            401,
            "Authentication required: open this page once with <code>?token=…</code> or send "
            "<code>Authorization: Bearer …</code>.",
        )
        if cookie:  # a stale cookie (the token changed) counts once, not on every refresh
            refused.delete_cookie(TOKEN_COOKIE, httponly=True, samesite="strict")
        return refused

    def _good(self, candidate: str) -> bool:
        return any([same_token(candidate, good) for good in self.tokens])  # each compared

    def _into_cookie(self, request: Request, token: str) -> Response:
        # The token leaves the URL (history, logs, Referer) for an HttpOnly cookie.
        rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
        target = local_path(raw_path(request.scope).decode("latin-1"))
        redirect = RedirectResponse(target + ("?" + urlencode(rest) if rest else ""), 303)
        redirect.set_cookie(
            TOKEN_COOKIE,
            token,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return redirect


def _refusal(request: Request, status: int, html: str, wait: int | None = None) -> Response:
    """401 or 429: JSON under ``/api/``, else a page saying ``html``; ``wait``: Retry-After."""
    headers = {"retry-after": str(wait)} if wait is not None else None
    if request.url.path.startswith("/api/"):
        error = "authentication required" if status == 401 else "too many wrong tokens"
        return JSONResponse({"error": error}, status_code=status, headers=headers)
    page = f"<!doctype html><title>{status}</title><p>{html}</p>"
    return HTMLResponse(page, status_code=status, headers=headers)


def bearer_token(request: Request) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, None without one."""
    header = request.headers.get("authorization", "")
    return header[7:] if header.lower().startswith("bearer ") else None


def raw_path(scope: Scope) -> bytes:
    """The request path as sent, still percent-encoded (``raw_path`` is optional in ASGI)."""
    raw: bytes | None = scope.get("raw_path")
    return raw if raw is not None else quote(scope["path"]).encode("ascii")


def local_path(raw: str) -> str:
    """``raw`` if a browser reads it as a path on this origin, as sent and at every decoding;
    else ``/`` (``//``, ``/\\`` and tabs, which browsers drop, lead off-site)."""
    text, previous = raw, None
    while text != previous:
        if not text.startswith("/") or text[1:2] in ("/", "\\") or _CONTROL.search(text):
            return "/"
        text, previous = unquote(text), text
    return raw
