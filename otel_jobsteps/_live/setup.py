"""What to tell a user whose job steps are not recorded: the piece of setup that is missing.

Under ``opentelemetry-instrument`` a span exporter named by ``OTEL_TRACES_EXPORTER`` that is
not installed makes the SDK's configurator fail (its tracebacks come first): no tracer provider
is set at all, and the fix is installing the exporter, not running under the command again.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Collection, Mapping
from importlib.metadata import entry_points

__all__ = ["exporter_entry_points", "setup_hint", "setup_hint_here"]

# The module opentelemetry-instrument's sitecustomize imports before the program runs.
_AUTO_INSTRUMENTATION = "opentelemetry.instrumentation.auto_instrumentation"
_EXPORTER_GROUP = "opentelemetry_traces_exporter"
# How the SDK's configurator resolves OTEL_TRACES_EXPORTER=otlp by protocol (grpc unset).
_OTLP_BY_PROTOCOL = {"grpc": "otlp_proto_grpc", "http/protobuf": "otlp_proto_http"}

SETUP = (
    "add JobStepsProcessor() to the TracerProvider, or set OTEL_JOBSTEPS_DSN and run the worker "
    "under opentelemetry-instrument (README: Queue integrations)"
)
_UNDER_INSTRUMENT = (
    "set OTEL_JOBSTEPS_DSN (opentelemetry-instrument then adds a JobStepsProcessor), or export "
    "spans by OTLP to otel-jobsteps collect (README: Queue integrations)"
)
_NO_OTLP = (
    "no OTLP exporter installed ({names} in {group}, for OTEL_TRACES_EXPORTER): pip install "
    "'otel_jobsteps[instrument]' (or set OTEL_TRACES_EXPORTER=none and OTEL_JOBSTEPS_DSN)"
)
_NO_EXPORTER = (
    "the span exporter {names} that OTEL_TRACES_EXPORTER names is not installed: install it, "
    "or set OTEL_TRACES_EXPORTER=none"
)


def exporter_entry_points(environ: Mapping[str, str]) -> list[str]:
    """The exporter entry points ``OTEL_TRACES_EXPORTER`` asks for, ``otlp`` resolved by
    protocol as the SDK's configurator does."""
    names = environ.get("OTEL_TRACES_EXPORTER", "").strip()
    if not names or names.lower() == "none":
        return []
    protocol = (
        environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "grpc"
    ).strip()
    found = []
    for name in (part.strip() for part in names.split(",")):
        found.append(_OTLP_BY_PROTOCOL.get(protocol, name) if name == "otlp" else name)
    return found


def setup_hint(
    environ: Mapping[str, str], *, instrumented: bool, installed: Collection[str]
) -> str:
    """What to do, given the environment, whether ``opentelemetry-instrument`` runs this
    process, and the names of the installed span exporter entry points."""
    if not instrumented:
        return SETUP
    missing = [name for name in exporter_entry_points(environ) if name not in installed]
    if not missing:
        return _UNDER_INSTRUMENT
    names = ", ".join(repr(name) for name in missing)
    if any(name.startswith("otlp") for name in missing):
        return _NO_OTLP.format(names=names, group=_EXPORTER_GROUP)
    return _NO_EXPORTER.format(names=names)


def setup_hint_here() -> str:
    """`setup_hint` for this process."""
    if _AUTO_INSTRUMENTATION not in sys.modules:
        return SETUP
    installed = {point.name for point in entry_points(group=_EXPORTER_GROUP)}
    return setup_hint(os.environ, instrumented=True, installed=installed)
