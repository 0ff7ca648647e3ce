"""Make user-supplied values safe for PostgreSQL: text without NUL, bounded JSON objects."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

__all__ = ["DEFAULT_MAX_DETAIL_BYTES", "clean_text", "encode_detail", "parse_detail"]

DEFAULT_MAX_DETAIL_BYTES = 64 * 1024
TRUNCATED_KEY = "_truncated"
# Built once: json.dumps with options builds a new encoder on every call.
_STRICT = json.JSONEncoder(allow_nan=False, separators=(",", ":"))
NUL_REPLACEMENT = "\ufffd"


def clean_text(value: object, max_chars: int | None = None) -> str:
    """A str PostgreSQL accepts: NUL replaced (text columns reject it), optionally cut."""
    text = value if isinstance(value, str) else str(value)
    if "\x00" in text:
        text = text.replace("\x00", NUL_REPLACEMENT)
    if max_chars is not None and len(text) > max_chars:
        text = text[:max_chars]
    return text


def _clean_value(value: Any) -> Any:
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return value
    if isinstance(value, float):
        # JSON has no NaN or Infinity; jsonb rejects them.
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {clean_text(k): _clean_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean_value(v) for v in value]
    return clean_text(repr(value))


def encode_detail(
    detail: Mapping[str, Any] | None, max_bytes: int = DEFAULT_MAX_DETAIL_BYTES
) -> str | None:
    """JSON text of a detail object, cleaned; over ``max_bytes`` it becomes a truncation marker."""
    if detail is None:
        return None
    try:  # the common case, all in C: plain JSON values, no NaN, no NUL
        text = _STRICT.encode(detail)
        if "\\u0000" in text:
            raise ValueError("NUL")
    except (TypeError, ValueError):
        text = json.dumps(_clean_value(detail), separators=(",", ":"))
    if len(text) > max_bytes:  # ASCII-only JSON: characters are bytes
        marker = {TRUNCATED_KEY: True, "original_bytes": len(text), "keys": []}
        kept: list[str] = []
        budget = max_bytes // 2
        for key in detail:
            budget -= len(key) + 4
            if budget < 0:
                break
            kept.append(clean_text(key))
        marker["keys"] = kept
        text = json.dumps(marker, separators=(",", ":"))
    return text


def _reject_constant(_name: str) -> None:
    return None


def parse_detail(text: object) -> dict[str, Any] | None:
    """An explicit end detail (``job.step.detail``): its JSON object, else ``{"value": ...}``."""
    if not isinstance(text, str):
        return None if text is None else {"value": _clean_value(text)}
    try:
        parsed = json.loads(text, parse_constant=_reject_constant)
    except ValueError:
        return {"value": clean_text(text)}
    return parsed if isinstance(parsed, dict) else {"value": parsed}
