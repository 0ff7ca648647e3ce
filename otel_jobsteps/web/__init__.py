"""``otel-jobsteps serve``: the recorded jobs as web pages (read side only: imports query, never
the writer). Needs the ``web`` extra (``pip install '.[web]'`` in a checkout)."""

from __future__ import annotations

from .routing import create_app
from .server import serve

__all__ = ["create_app", "serve"]
