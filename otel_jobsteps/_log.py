"""The package's one logger: every module logs as ``otel_jobsteps`` (children add a suffix)."""

from __future__ import annotations

import logging

__all__ = ["logger"]

logger = logging.getLogger("otel_jobsteps")
