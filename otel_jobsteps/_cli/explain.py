"""``otel-jobsteps explain``: what each span of an OTLP/JSON file becomes, and why.

Reads the Collector's file exporter format (one ``ExportTraceServiceRequest`` per line) and
plays each trace as collect does: each dialect's unit given its meaning (`_ingest.mapping`),
then the spans in the order rule's order through the translation (whose own rules say what a
valid job is). Each span gets one line: the dialect that claimed it, the job, attempt and step
it lands in, or why it is in no job.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from .._core.commands import EventRecorded, JobStarted, Scope, StepSkipped, StepStarted
from .._core.dialects import Dialects, select_dialects
from .._core.facts import SpanFacts
from .._core.order import in_span_order, latest_copies
from .._core.translate import SpanTranslator
from .._ingest.decode import BadRequest, attribute_values, decode_span, parse_json
from .._ingest.mapping import units
from ..attributes import JOB_EVENT_TYPE, JOB_ID, JOB_STEP_KEY
from ..errors import ConfigurationError, printable

__all__ = ["explain", "read_spans"]

_ALL = select_dialects("all")
_SPANS = frozenset({"resourceSpans", "resource_spans"})
# A file exporter may write every signal to one file: their lines hold no span, and are skipped.
_OTHER_SIGNALS = frozenset({"resourceLogs", "resource_logs", "resourceMetrics", "resource_metrics"})


def read_spans(lines: Iterable[bytes], source: str) -> list[SpanFacts]:
    """The spans of ``lines`` (one OTLP/JSON export request per line; blank lines and other
    signals' requests skipped), with their kind and resource; a line that is not one is a
    `ConfigurationError` naming it."""
    spans: list[SpanFacts] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        request = ExportTraceServiceRequest()
        try:
            document = json.loads(line)
            if not isinstance(document, dict):
                raise BadRequest("not an object")
            if not _SPANS.isdisjoint(document):
                parse_json(line, request)
            elif _OTHER_SIGNALS.isdisjoint(document):
                raise BadRequest("no resourceSpans: not an OTLP export request")
        except (ValueError, RecursionError) as error:
            reason = printable(str(error))[:200]
            raise ConfigurationError(f"{source}:{number}: not OTLP/JSON: {reason}") from None
        for resource_spans in request.resource_spans:
            resource = attribute_values(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    try:
                        facts = decode_span(span.SerializeToString())
                    except ValueError:
                        raise ConfigurationError(
                            f"{source}:{number}: a span with invalid ids or times "
                            f"({printable(span.name)[:100]!r})"
                        ) from None
                    spans.append(replace(facts, kind=span.kind, resource=resource))
    return spans


@dataclass(slots=True)
class _Trace:
    """One trace told to the translation as collect tells it, remembering each span's fate."""

    claimed: dict[int, str]  # span id -> the dialect of the unit it is in
    problems: list[str] = field(default_factory=list)
    scopes: dict[int, Scope] = field(default_factory=dict)  # span id -> the job it lies in
    said: dict[int, str] = field(default_factory=dict)  # span id -> what it became
    translator: SpanTranslator = field(init=False)

    def __post_init__(self) -> None:
        self.translator = SpanTranslator(problem=self._problem)

    def _problem(self, kind: str, detail: object) -> None:
        self.problems.append(f"{kind}: {detail}")

    def play(self, order: list[tuple[bool, SpanFacts]]) -> None:
        for is_start, span in order:
            if is_start:
                self._started(span)
                continue
            for command in self.translator.ended(span):
                if isinstance(command, StepSkipped):  # a skipped step is known at its end
                    step = f"step {printable(command.key)} of {_job(command.scope)}"
                    self.said[span.span_id] = f"{step}, skipped"

    def _started(self, span: SpanFacts) -> None:
        span_id = span.span_id
        before = len(self.problems)
        commands = self.translator.started(span)
        for command in commands:
            if isinstance(command, JobStarted):
                self.scopes[span_id] = command.scope
                self.said[span_id] = f"job {_job(command.scope)}"
            elif isinstance(command, StepStarted):
                self.scopes[span_id] = command.scope
                self.said[span_id] = f"step {printable(command.key)} of {_job(command.scope)}"
            elif isinstance(command, EventRecorded):
                self.said[span_id] = f"event {printable(command.type)} of {_job(command.scope)}"
        if span_id in self.said:
            return
        parent = self.scopes.get(span.parent_span_id)
        if parent is not None and JOB_ID not in span.attributes:
            self.scopes[span_id] = parent
            self.said[span_id] = f"in {_job(parent)}, not a step (no {JOB_STEP_KEY})"
        elif len(self.problems) > before:
            self.said[span_id] = f"in no job: {printable(self.problems[-1])}"
        else:
            self.said[span_id] = self._outside(span)

    def _outside(self, span: SpanFacts) -> str:
        names = span.attributes
        if span.span_id in self.claimed:
            return f"in no job: the {self.claimed[span.span_id]} dialect found no job in it"
        if JOB_STEP_KEY in names:
            return f"in no job: it has {JOB_STEP_KEY} but no job span above it"
        if JOB_EVENT_TYPE in names:
            return "in no job: an event naming no job and in none"
        other = _ALL.may_start_job(span.name, span.kind, names)
        if other is not None:
            return (
                f"in no job: no job.* attributes; the {other.name} dialect would claim it, "
                "but it is not selected (--dialects)"
            )
        return "in no job: no job.* attributes, and no selected dialect claims it"


def _job(scope: Scope) -> str:
    kind = "" if scope.job_type is None else f" ({printable(scope.job_type)})"
    return f"{printable(scope.domain)} / {printable(scope.job_id)} #{scope.attempt}{kind}"


def explain(spans: Iterable[SpanFacts], dialects: Dialects) -> Iterator[str]:
    """One line per span, by trace, in the order rule's order, indented by depth."""
    by_trace: dict[int, list[SpanFacts]] = {}
    for span in spans:
        by_trace.setdefault(span.trace_id, []).append(span)
    for trace_id, group in by_trace.items():
        latest = list(latest_copies(group).values())
        meant: dict[int, SpanFacts] = {}
        claimed: dict[int, str] = {}
        for unit in units(latest, dialects):
            root = unit[0]
            dialect = dialects.may_start_job(root.name, root.kind, root.attributes)
            for each in dialects.recognise(unit):
                meant[each.span_id] = each
                claimed[each.span_id] = "?" if dialect is None else dialect.name
        order = in_span_order({(trace_id, s.span_id): meant.get(s.span_id, s) for s in latest})
        trace = _Trace(claimed)
        trace.play(order)
        yield f"trace {trace_id:032x}"
        depth: dict[int, int] = {}
        for is_start, span in order:
            if not is_start:
                continue
            level = depth[span.span_id] = depth.get(span.parent_span_id, 0) + 1
            by = f" [{claimed[span.span_id]}]" if span.span_id in claimed else ""
            said = trace.said.get(span.span_id, "in no job")
            yield f"{'  ' * level}{printable(span.name)}{by}: {said}"
