"""The writer process, one wing: the wire, the relay in the job's process, the child's main."""

from __future__ import annotations

from .relay import Relay

__all__ = ["Relay"]
