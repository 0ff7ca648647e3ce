"""User-supplied values made safe for PostgreSQL: text without NUL, bounded JSON objects.

Nothing here raises on hostile input: an unreadable detail becomes a documented marker."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

__all__ = [
    "DEFAULT_MAX_DETAIL_BYTES",
    "MAX_DETAIL_DEPTH",
    "clean_text",
    "encode_detail",
    "parse_detail",
]

DEFAULT_MAX_DETAIL_BYTES = 64 * 1024
# Nesting kept in a detail: far below Python's recursion limit (json and our cleaning recurse)
# and PostgreSQL's stack depth; deeper JSON text is kept as text, deeper values as TOO_DEEP.
MAX_DETAIL_DEPTH = 64
TOO_DEEP = "<nested too deep>"
# JSON text longer than this is not parsed (the store would only keep a truncation marker).
MAX_PARSED_CHARS = 16 * 1024 * 1024
TRUNCATED_KEY = "_truncated"
# A JSON string (its brackets do not count) or a bracket: enough to measure nesting in C.
_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')
# Built once: json.dumps with options builds a new encoder on every call.
_STRICT = json.JSONEncoder(allow_nan=False, separators=(",", ":"))
NUL_REPLACEMENT = "\ufffd"
_SURROGATE = re.compile("[\ud800-\udfff]")
# Well inside sys.get_int_max_str_digits() (4300 digits by default, about 14,280 bits).
_MAX_INT_BITS = 13_000


def clean_text(value: object, max_chars: int | None = None) -> str:
    """A str PostgreSQL accepts: NUL and surrogates (UTF-8 has no lone half of a pair; text and
    jsonb reject both) replaced, optionally cut."""
    text = value if isinstance(value, str) else _as_text(value)
    if "\x00" in text:
        text = text.replace("\x00", NUL_REPLACEMENT)
    if not text.isascii():
        text = _SURROGATE.sub(NUL_REPLACEMENT, text)
    if max_chars is not None and len(text) > max_chars:
        text = text[:max_chars]
    return text


def _as_text(value: object) -> str:
    """str(value), or a marker where even that fails (an int past Python's digit limit)."""
    try:
        return str(value)
    except ValueError:
        return f"<{type(value).__name__} too large to show>"


def _clean_value(value: Any, depth: int = 0) -> Any:
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):  # JSON text of an int past Python's digit limit cannot be made
        return value if value.bit_length() <= _MAX_INT_BITS else _as_text(value)
    if isinstance(value, float):
        # JSON has no NaN or Infinity; jsonb rejects them.
        return value if math.isfinite(value) else None
    if isinstance(value, (Mapping, list, tuple)) and depth >= MAX_DETAIL_DEPTH:
        return TOO_DEEP
    if isinstance(value, Mapping):
        return {clean_text(k): _clean_value(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean_value(v, depth + 1) for v in value]
    return clean_text(repr(value), 1024)


def encode_detail(
    detail: Mapping[str, Any] | None, max_bytes: int = DEFAULT_MAX_DETAIL_BYTES
) -> str | None:
    """JSON text of a detail object, cleaned; over ``max_bytes`` it becomes a truncation marker."""
    if detail is None:
        return None
    try:  # the common case, all in C: plain JSON values, no NaN, no NUL
        text = _STRICT.encode(detail)
        if "\\u0000" in text or "\\ud" in text:  # NUL, or a surrogate (maybe a lone one)
            raise ValueError("NUL or surrogate")
    except (TypeError, ValueError, RecursionError):
        text = json.dumps(_clean_value(detail), separators=(",", ":"))
    if len(text) > max_bytes:  # ASCII-only JSON: characters are bytes
        marker = {TRUNCATED_KEY: True, "original_bytes": len(text), "keys": []}
        kept: list[str] = []
        budget = max_bytes // 2
        for key in detail:
            name = clean_text(key, budget)
            budget -= len(name) + 4
            if budget < 0:
                break
            kept.append(name)
        marker["keys"] = kept
        text = json.dumps(marker, separators=(",", ":"))
    return text


def _reject_constant(_name: str) -> None:
    return None


def _nesting_over(text: str, limit: int) -> bool:
    """Whether JSON text nests deeper than ``limit``, measured without recursion."""
    if text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    for token in _JSON_TOKEN.finditer(text):
        bracket = token.group()
        if bracket in "[{":
            depth += 1
            if depth > limit:
                return True
        elif bracket in "]}":
            depth -= 1
    return False


def parse_detail(text: object) -> dict[str, Any] | None:
    """An explicit detail's JSON object, else ``{"value": text}`` (not JSON, or nested past
    MAX_DETAIL_DEPTH). Never raises."""
    if text is None:
        return None
    if not isinstance(text, str):
        return {"value": _clean_value(text)}
    if len(text) > MAX_PARSED_CHARS or _nesting_over(text, MAX_DETAIL_DEPTH):
        return {"value": clean_text(text, MAX_PARSED_CHARS)}
    try:
        parsed = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        return {"value": clean_text(text)}
    return parsed if isinstance(parsed, dict) else {"value": parsed}
