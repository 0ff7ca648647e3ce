"""``otel-jobsteps serve``: the recorded jobs as web pages (read side only: imports query, never
the writer). Needs the ``web`` extra: ``pip install 'otel_jobsteps[web]'``."""

from __future__ import annotations

from .app import create_app, serve

__all__ = ["create_app", "serve"]
