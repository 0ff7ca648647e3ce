"""Dialects: jobs and steps recognised in other instrumentations' spans (docs/dialects.md).

Selected the same way in both doors (``JobStepsProcessor(dialects=...)``,
``OTEL_JOBSTEPS_DIALECTS``, ``otel-jobsteps collect --dialects``): a comma list of names, ``all``
or ``none``. One module per dialect, each exporting ``DIALECT``; the user's ``--mapping`` rules
become dialects too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...attributes import JOB_ID
from ...errors import ConfigurationError
from ..facts import SpanFacts
from . import (
    bullmq,
    celery,
    cicd,
    dbos,
    genai,
    hatchet,
    messaging,
    oban,
    sidekiq,
    temporal,
    trigger,
)
from .base import KIND_CONSUMER, Dialect
from .mapping import JobMapping, mapping_dialect

__all__ = [
    "DEFAULT_DIALECTS",
    "DIALECT_NAMES",
    "NO_DIALECTS",
    "Dialect",
    "Dialects",
    "select_dialects",
]

# In the order tried: a span two dialects could claim goes to the more specific one (a Celery
# run, a Sidekiq job and an Oban job are CONSUMER spans with messaging.* attributes too).
DIALECT_NAMES = (
    "bullmq",
    "celery",
    "temporal",
    "hatchet",
    "trigger",
    "oban",
    "sidekiq",
    "dbos",
    "genai",
    "cicd",
    "messaging",
)

# On unless chosen otherwise: every dialect whose job spans carry names only its own library
# emits, so it can claim no one else's span. `messaging` is off: it makes every message any
# consumer processes a job, which is a choice of the user's (volume, and rows written only when
# the message's span ends), not a default.
DEFAULT_DIALECTS = tuple(name for name in DIALECT_NAMES if name != "messaging")

_DIALECTS = {
    module.DIALECT.name: module.DIALECT
    for module in (bullmq, celery, cicd, dbos, genai, hatchet, messaging, oban, sidekiq, temporal,
                   trigger)
}  # fmt: skip


class Dialects:
    """The selected dialects, in the order they are tried."""

    __slots__ = ("_any_kind", "_by_kind", "_late_by_kind", "dialects", "late_kinds", "names")

    def __init__(self, dialects: Sequence[Dialect]) -> None:
        self.dialects = tuple(dialects)
        self.names: tuple[str, ...] = tuple(dialect.name for dialect in self.dialects)
        # Per span kind, only the dialects that may claim it, and their gates as one.
        self._any_kind = _Asked(self.dialects)
        self._by_kind = {
            kind: _Asked([d for d in self.dialects if _may_claim(d, kind)])
            for kind in range(KIND_CONSUMER + 1)
        }
        self._late_by_kind = {
            kind: tuple(pair for pair in asked.dialects if pair[1].claims_late)
            for kind, asked in self._by_kind.items()
        }
        # The kinds a dialect claiming late may claim: a parent of another kind is never asked.
        self.late_kinds = frozenset(kind for kind, late in self._late_by_kind.items() if late)

    def __repr__(self) -> str:
        return f"Dialects({', '.join(self.names) or 'none'})"

    def __bool__(self) -> bool:
        return bool(self.dialects)

    def may_start_job(self, name: str, kind: int, attributes: Mapping[str, Any]) -> Dialect | None:
        """The first selected dialect that may make this span (at its start) a job, or None."""
        asked = self._by_kind.get(kind, self._any_kind)
        if (
            asked.gated
            and asked.attributes.isdisjoint(attributes)
            and not name.startswith(asked.prefixes)
        ):
            return None  # most spans of an application: one set test for every dialect
        for may_start_job, dialect in asked.dialects:
            if may_start_job(name, kind, attributes):
                return dialect
        return None

    def may_claim_late(self, name: str, kind: int, attributes: Mapping[str, Any]) -> Dialect | None:
        """The first selected dialect claiming late (`Dialect.claims_late`) that may make this
        span, started earlier, a job now; None if no such dialect does."""
        for may_start_job, dialect in self._late_by_kind.get(kind, ()):
            if may_start_job(name, kind, attributes):
                return dialect
        return None

    def recognise(self, unit: Sequence[SpanFacts]) -> list[SpanFacts]:
        """``unit`` (a claimed span, then its descendants, all ended, in start order) with the
        model's meaning given by the dialect that claims its root; unchanged if none does.

        A unit in which the code names a job itself (a span with ``job.id``: our own queue
        integration inside another instrumentation's span) is left as it is: a dialect never
        makes a second job around the code's own."""
        if not unit or any(JOB_ID in span.attributes for span in unit[1:]):
            return list(unit)
        root = unit[0]
        dialect = self.may_start_job(root.name, root.kind, root.attributes)
        return list(unit) if dialect is None else dialect.recognise(unit)

    def with_mappings(self, mappings: Sequence[JobMapping]) -> Dialects:
        """These dialects with the user's ``--mapping`` rules tried first (they are explicit)."""
        return Dialects([*map(mapping_dialect, mappings), *self.dialects])


class _Asked:
    """The dialects asked about spans of one kind, in order, and (when every one has a gate)
    what a span needs for any of them to be asked."""

    __slots__ = ("attributes", "dialects", "gated", "prefixes")

    def __init__(self, dialects: Sequence[Dialect]) -> None:
        self.dialects = tuple((d.may_start_job, d) for d in dialects)
        gates = [d.gate for d in dialects]
        self.gated = all(gate is not None for gate in gates)
        self.attributes = frozenset().union(*(g.attributes for g in gates if g is not None))
        self.prefixes = tuple(p for g in gates if g is not None for p in g.prefixes)


def _may_claim(dialect: Dialect, kind: int) -> bool:
    return dialect.kinds is None or kind in dialect.kinds


NO_DIALECTS = Dialects(())
"""None selected: every span is read by its own ``job.*`` attributes only."""


def select_dialects(text: str | Sequence[str] | None) -> Dialects:
    """The dialects named: ``"all"``, ``"none"``, a comma list (or a sequence) of names; None
    or blank text (an empty environment variable): the default set. An unknown name is a
    `ConfigurationError` naming the known ones."""
    if text is None or (isinstance(text, str) and not text.strip()):
        names: Sequence[str] = DEFAULT_DIALECTS
    else:
        parts = text.split(",") if isinstance(text, str) else text
        wanted = {part.strip() for part in parts} - {""}
        if wanted == {"all"}:
            wanted = set(DIALECT_NAMES)
        elif wanted == {"none"}:
            wanted = set()
        unknown = sorted(wanted - set(DIALECT_NAMES))
        if unknown:
            raise ConfigurationError(
                f"unknown dialect {', '.join(map(repr, unknown))}: use all, none or a comma "
                f"list of {', '.join(DIALECT_NAMES)}"
            )
        names = [name for name in DIALECT_NAMES if name in wanted]
    return Dialects([_DIALECTS[name] for name in names])
