"""The names ``otel_jobsteps.web.app`` offered before the web package was split (security,
routing, pages, server): kept importable from here."""

from __future__ import annotations

from .._loopback import is_loopback, loopback_hosts
from .rendering import job_url
from .routing import create_app
from .security import CSP, TOKEN_ENV, check_exposure
from .server import DEFAULT_LISTEN, serve

__all__ = [
    "CSP",
    "DEFAULT_LISTEN",
    "TOKEN_ENV",
    "check_exposure",
    "create_app",
    "is_loopback",
    "job_url",
    "loopback_hosts",
    "serve",
]
