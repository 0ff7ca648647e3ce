"""Files for operators shipped with the package (Prometheus alert rules, a Grafana dashboard),
printed by ``otel-jobsteps ops``."""

from __future__ import annotations

from importlib import resources

__all__ = ["OPS_FILES", "read_ops_file"]

# The ``otel-jobsteps ops`` verb -> the file it prints.
OPS_FILES = {"alerts": "alerts.yml", "dashboard": "dashboard.json"}


def read_ops_file(name: str) -> str:
    """The text of a file of this package, e.g. ``alerts.yml``."""
    return resources.files(__package__).joinpath(name).read_text("utf-8")
