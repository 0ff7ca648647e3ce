"""The parameters of a page or API request, checked: a bad one raises `ConfigurationError` (400)."""

from __future__ import annotations

import re
from datetime import timedelta

from starlette.requests import Request

from .._core.vocabulary import MAX_ATTEMPT
from ..errors import ConfigurationError
from ..query import STATUSES, parse_tag
from .layout import WINDOWS

__all__ = [
    "MAX_PAGE_SIZE",
    "MAX_ROW",
    "PAGE_SIZE",
    "attempt_param",
    "before_attempt_param",
    "check_text",
    "integer_param",
    "job_key",
    "limit_param",
    "status_param",
    "tag_param",
    "text_param",
    "window_param",
]

PAGE_SIZE = 50
MAX_PAGE_SIZE = 500
MAX_ROW = 10**9  # ``from``, the first row of an attempt to draw
_STATUS_WORDS = {s.lower(): s for s in STATUSES}
_INTEGER = re.compile(r"[0-9]{1,10}")  # ASCII digits only; a length int() takes at once


def window_param(request: Request, name: str, default: str) -> tuple[str, timedelta | None]:
    """A time window by its URL value (`WINDOWS`) and its length, None for ``all``."""
    text = request.query_params.get(name) or default
    if text not in WINDOWS:
        raise ConfigurationError(f"{name} must be one of {', '.join(WINDOWS)}, got {text!r}")
    return text, WINDOWS[text]


def status_param(request: Request) -> str | None:
    """``?status=`` in any case as the status it names, None when absent or empty."""
    text = (request.query_params.get("status") or "").lower()
    if text and text not in _STATUS_WORDS:
        raise ConfigurationError(f"status must be one of {', '.join(_STATUS_WORDS)}")
    return _STATUS_WORDS.get(text)


def integer_param(request: Request, name: str, high: int) -> int | None:
    """Query parameter ``name`` as an integer from 1 to ``high``, None when absent or empty."""
    text = request.query_params.get(name)
    if not text:
        return None
    if not _INTEGER.fullmatch(text) or not 1 <= int(text) <= high:
        raise ConfigurationError(f"{name} must be an integer from 1 to {high}")
    return int(text)


def limit_param(request: Request) -> int:
    return integer_param(request, "limit", MAX_PAGE_SIZE) or PAGE_SIZE


def attempt_param(request: Request) -> int | None:
    return integer_param(request, "attempt", MAX_ATTEMPT)


def before_attempt_param(request: Request) -> int | None:
    """``?before_attempt=N``: list the newest attempts numbered below N (`job_detail`)."""
    return integer_param(request, "before_attempt", MAX_ATTEMPT)


def text_param(request: Request, name: str) -> str | None:
    return request.query_params.get(name) or None


def tag_param(request: Request) -> tuple[str, str] | None:
    """``?tag=NAME=VALUE`` (or ``NAME:VALUE``) as (name, value), None when absent or empty."""
    text = text_param(request, "tag")
    return None if text is None else parse_tag(text)


def check_text(request: Request) -> None:
    """No parameter or path part may hold a NUL: PostgreSQL text cannot store one."""
    named = [*request.query_params.multi_items(), *request.path_params.items()]
    for name, value in named:
        if "\x00" in name or "\x00" in value:
            raise ConfigurationError(f"{name!r} must not contain a NUL character")


def job_key(request: Request) -> tuple[str, str]:
    """The domain and job id a request names: path parameters, or the query of ``/job``."""
    named = request.path_params or request.query_params
    domain, job_id = named.get("domain"), named.get("job_id")
    if domain is None or job_id is None:
        raise ConfigurationError("domain and job_id are required")
    return domain, job_id
