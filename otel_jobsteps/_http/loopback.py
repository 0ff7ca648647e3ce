"""The loopback Host rule of ``serve`` and ``collect``: on loopback, a request naming another
Host gets 421, so a page elsewhere cannot reach them by DNS rebinding."""

from __future__ import annotations

import ipaddress

from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from .listen import url_host

__all__ = ["LoopbackHostMiddleware", "is_loopback", "loopback_hosts", "refused_host"]

_LOOPBACK_NAMES = {"localhost"}


def is_loopback(host: str) -> bool:
    """Whether ``host`` only reaches this machine."""
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def loopback_hosts(host: str) -> frozenset[str]:
    """Host names a browser uses for a server listening on loopback address ``host``."""
    return frozenset({"127.0.0.1", "localhost", "[::1]", url_host(host)})


def _host_name(header: str) -> str:
    """The name in a Host header, without its port: ``[::1]:8080`` gives ``[::1]``."""
    name = header[: header.find("]") + 1] if header.startswith("[") else header.split(":")[0]
    return name.lower()


def refused_host(host_header: str, hosts: frozenset[str] | None) -> Response | None:
    """The 421 for a request whose Host header names none of ``hosts``; None when it may pass
    (or when ``hosts`` is None: no rule)."""
    if hosts is None or _host_name(host_header) in hosts:
        return None
    return PlainTextResponse("unknown Host header", status_code=421)


class LoopbackHostMiddleware:
    """`refused_host` before every HTTP request of ``app`` (health, metrics and writes too)."""

    def __init__(self, app: ASGIApp, hosts: frozenset[str]) -> None:
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            host = next((v for k, v in scope["headers"] if k == b"host"), b"")
            refused = refused_host(host.decode("latin-1"), self.hosts)
            if refused is not None:
                await refused(scope, receive, send)
                return
        await self.app(scope, receive, send)
