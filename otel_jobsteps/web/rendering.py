"""How pages and JSON answers are made: the Jinja2 environment (autoescaped), its filters, the
job permalink and JSON of read records."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote, urlencode

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup, escape
from starlette.responses import JSONResponse

from .._cli.formatting import (
    format_ago,
    format_difference,
    format_duration,
    format_time,
    format_utc,
    severity_word,
    shorten,
)
from .._pg.db import Record
from .layout import WINDOWS

__all__ = [
    "LONG_TOKEN",
    "breakable",
    "compact_json",
    "diff_url",
    "environment",
    "job_url",
    "json_response",
    "plural",
    "since_text",
]

LONG_TOKEN = 24
"""A run of this many non-blank characters or more may break anywhere on a page (a UUID, a
URL); a shorter one (an id, a type, a step key, a duration) never splits across lines."""
_LONG_TOKEN = re.compile(rf"\S{{{LONG_TOKEN},}}")

# Path segments a browser (or proxy) drops or resolves away, %2E spellings included.
_FRAGILE_SEGMENTS = {"", ".", ".."}


def job_url(
    domain: str, job_id: str, attempt: int | None = None, step: str | None = None, **more: str
) -> str:
    """The permalink of a job (``attempt``, ``step``, ``more`` in the query): an encoded segment
    a part, or ``/job?domain=&job_id=`` for parts a browser drops (``.``, ``..``, empty)."""
    query = {} if attempt is None else {"attempt": str(attempt)}
    if step is not None:
        query["step"] = step
    query.update(more)
    domain_part, id_part = quote(domain, safe=""), quote(job_id, safe="")
    if domain_part in _FRAGILE_SEGMENTS or id_part in _FRAGILE_SEGMENTS:
        return "/job?" + urlencode({"domain": domain, "job_id": job_id, **query})
    return f"/jobs/{domain_part}/{id_part}" + ("?" + urlencode(query) if query else "")


def diff_url(domain: str, job_id: str, a: int, b: int) -> str:
    """The attempt diff of a job's attempts ``a`` and ``b``: its permalink plus ``/diff``, or
    ``/diff?domain=&job_id=`` where the permalink is ``/job?...``."""
    numbers = {"a": str(a), "b": str(b)}
    permalink = job_url(domain, job_id)
    if permalink.startswith("/job?"):
        return "/diff?" + urlencode({"domain": domain, "job_id": job_id, **numbers})
    return f"{permalink}/diff?" + urlencode(numbers)


def compact_json(value: Any) -> str:
    """A detail object as one line of JSON (the template escapes it)."""
    return "" if value is None else json.dumps(value, ensure_ascii=False, default=str)


def breakable(value: object) -> Markup:
    """``value`` as escaped text whose long tokens (`LONG_TOKEN`) are marked ``class="long"``:
    the stylesheet lets only those break anywhere."""
    text = str(value)
    parts, done = [], 0
    for token in _LONG_TOKEN.finditer(text):
        parts += [escape(text[done : token.start()]), _LONG % token.group()]
        done = token.end()
    return Markup("").join([*parts, escape(text[done:])])


_LONG = Markup('<span class="long">%s</span>')


def plural(noun: str, count: int) -> str:
    """``noun`` for one, else its plural (every noun the pages count takes an s)."""
    return noun if count == 1 else noun + "s"


def since_text(at: datetime | None, as_of: datetime) -> str:
    """How long ago ``at`` was, at the time of the read."""
    return "-" if at is None else format_duration(max(as_of - at, timedelta(0)))


def environment() -> Environment:
    """The templates of the package, autoescaped, with the shared formatters as filters."""
    env = Environment(
        loader=PackageLoader("otel_jobsteps.web", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        duration=format_duration,
        difference=format_difference,
        time=format_time,
        json=compact_json,
        iso=lambda value: value.isoformat() if value else "",
        utc=format_utc,
        seconds=lambda value: format_duration(timedelta(seconds=value)),
        shorten=shorten,
        severity=lambda value: severity_word(value).lower(),
        plural=plural,
        breakable=breakable,
    )
    env.globals.update(
        job_url=job_url, diff_url=diff_url, since=since_text, ago=format_ago, windows=list(WINDOWS)
    )
    return env


def json_response(value: Any, status_code: int = 200) -> JSONResponse:
    """``value`` as JSON; read records (one or a list) by their ``to_dict``."""
    if isinstance(value, Record):
        value = value.to_dict()
    elif isinstance(value, list):
        value = [item.to_dict() if isinstance(item, Record) else item for item in value]
    return JSONResponse(value, status_code=status_code)
