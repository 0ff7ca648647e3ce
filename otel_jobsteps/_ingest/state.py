"""A job's derivation state kept between requests (``otlp_job.state``), so that a request whose
spans all come after what was applied resumes it instead of deriving the job from all its
spans: the translators' open spans, the recorder's open attempts, and the attempts' notes.

Stored pickled, read back by an unpickler that builds only this package's dataclasses and
named tuples and plain containers; a state that does not load is no state (derived in full).
"""

from __future__ import annotations

import dataclasses
import io
import pickle
from dataclasses import dataclass, field
from typing import Any

from .._recorder import StepRecorder
from .._translate import SpanTranslator
from .place import Attempt

__all__ = ["JobState", "capture", "dump", "held_by_job", "load", "restore"]

_VERSION = 1
_PACKAGE = "otel_jobsteps."
_CONTAINERS = {("collections", "OrderedDict"), ("builtins", "set"), ("builtins", "frozenset")}

Node = tuple[str, int]  # trace, signed span id


@dataclass(slots=True)
class JobState:
    """What a derivation of one job leaves to the next: the latest time it applied, per trace
    the translator's open spans, the recorder's open attempts of the job, start markers whose
    ended copy is not staged, attempts whose job span ended, and each attempt's first start."""

    frontier: int
    last_start: int = 0  # the latest start applied (a span starting then may tie with it)
    last_log: int = 0  # the latest record applied
    translators: dict[int, Any] = field(default_factory=dict)
    attempts: list[tuple[tuple[int, int], Any]] = field(default_factory=list)
    markers: dict[Attempt, set[Node]] = field(default_factory=dict)
    ended: set[Attempt] = field(default_factory=set)
    firsts: dict[Attempt, tuple[str, int, int]] = field(default_factory=dict)

    def holds_open(self, trace_id: int, span_id: int) -> bool:
        """Whether the span started and did not end in what was applied."""
        open_spans = self.translators.get(trace_id)
        return open_spans is not None and span_id in open_spans

    def open_rows(self) -> list[tuple[str, str, int, str | None, str | None]]:
        """(domain, job, attempt, step key, execution) of every step row it holds open, and
        (domain, job, attempt, None, None) of every attempt it holds open."""
        found: list[tuple[str, str, int, str | None, str | None]] = []
        for _, attempt in self.attempts:
            scope = attempt.scope
            found.append((scope.domain, scope.job_id, scope.attempt, None, None))
            if attempt.open is not None:
                key = attempt.open.key
                found.append((scope.domain, scope.job_id, scope.attempt, key, attempt.execution_id))
        return found


def held_by_job(recorder: StepRecorder) -> dict[tuple[str, str], list[tuple[Any, Any]]] | None:
    """The recorder's open attempts grouped by job; None when it forgot attempts (a state
    would be partial)."""
    held = recorder.held_attempts()
    if held is None:
        return None
    found: dict[tuple[str, str], list[tuple[Any, Any]]] = {}
    for key, attempt in held:
        found.setdefault((attempt.scope.domain, attempt.scope.job_id), []).append((key, attempt))
    return found


def capture(
    translators: dict[int, SpanTranslator],
    attempts: list[tuple[Any, Any]] | None,
    state: JobState,
) -> JobState | None:
    """``state`` completed with the open spans of ``translators`` and the job's open
    ``attempts`` (`held_by_job`); None without them."""
    if attempts is None:
        return None
    state.translators = {trace: t.held_spans() for trace, t in translators.items()}
    state.attempts = attempts
    return state


def restore(state: JobState, recorder: StepRecorder, translator: Any) -> dict[int, SpanTranslator]:
    """Put the state's attempts into ``recorder`` and return its translators (``translator()``
    makes an empty one); the restored rows are written already and no progress is waiting."""
    for key, attempt in state.attempts:
        if attempt.open is not None:
            attempt.open.row.segment = -1  # not in the batch being built: later writes update
            attempt.open.last_write = attempt.open.pending = attempt.open.due = None
        recorder.adopt_attempt(key, attempt)
    translators: dict[int, SpanTranslator] = {}
    for trace, open_spans in state.translators.items():
        translators[trace] = found = translator()
        found.adopt_spans(open_spans)
    return translators


def dump(state: JobState) -> bytes | None:
    """The state as stored; None if it cannot be (then the job is derived in full next time)."""
    try:
        return pickle.dumps((_VERSION, state), protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError):
        return None


def load(blob: bytes | None) -> JobState | None:
    """The stored state, or None (none kept, another version, or not this package's)."""
    if blob is None:
        return None
    try:
        version, state = _Loader(io.BytesIO(blob)).load()
    except Exception:  # noqa: BLE001 - an unreadable state only costs a full derivation
        return None
    return state if version == _VERSION and isinstance(state, JobState) else None


class _Loader(pickle.Unpickler):
    """Builds nothing but this package's dataclasses and named tuples and plain containers."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _CONTAINERS:
            return super().find_class(module, name)
        if module.startswith(_PACKAGE):  # checked before anything is imported
            found = super().find_class(module, name)
            if isinstance(found, type) and (
                dataclasses.is_dataclass(found) or issubclass(found, tuple)
            ):
                return found
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a derivation state")
