"""Files for operating otel_jobsteps, shipped with the package (a Grafana dashboard)."""

from __future__ import annotations

from importlib import resources

__all__ = ["read"]


def read(name: str) -> str:
    """The text of the packaged file ``name`` (e.g. ``dashboard.json``)."""
    return resources.files(__package__).joinpath(name).read_text("utf-8")
