"""A request's log records in its transaction: each placed in the attempt of the span its
context names (or waiting for it, bounded per trace), staged, and fed to their attempts'
derivation, or written as LOG rows at once (a settled attempt's, and those that are all a
job's news in this request)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._core.attempts import Attempt as Held
from .._core.commands import Scope
from .._core.facts import LogFacts
from .._core.translate import PROGRESS_EVENT, SpanTranslator, log_line
from .counting import attempt_columns
from .ids import ID_MASK
from .lines import Context, Late, Lines, ended_attempt, line_context
from .logs import decode_log_record
from .place import Attempt, Staged
from .receipt import Receipt
from .rows import LogRow
from .session import Session
from .state import JobState, load

__all__ = ["RequestLogs"]

Job = tuple[str, str]  # domain, job id
Places = dict[str, dict[int, Attempt | None]]  # per trace, per span id: its attempt
_StagedLog = tuple[LogFacts, tuple[int, bytes]]  # a record and its tie (place in request, key)
_Item = tuple[LogFacts, Attempt, tuple[int, bytes]]  # a record, its attempt, its tie


class RequestLogs:
    """The log records of one request and those of its traces still waiting."""

    def __init__(self, session: Session, waiting: list[str], logs: list[LogRow], places: Places):
        """``waiting``: the request's traces with records waiting for their span."""
        self._session = session
        self.placed: list[tuple[LogRow, Attempt]] = []  # new records with a place
        self.waiting: list[LogRow] = []  # new records whose span is not placed yet
        self.moved: list[tuple[str, int, bytes, int, bytes, Attempt]] = []  # waited, placed now
        self.rejected = 0
        self._new: dict[tuple[str, int, bytes], LogFacts] = {}  # staged now, decoded already
        self._settled: list[_Item] = []
        self._direct: list[_Item] = []  # written without a derivation
        self.direct: set[Job] = set()
        still: dict[str, int] = {}
        found = session.execute("waiting_logs", {"trace_id": waiting}).fetchall() if waiting else []
        for trace, span_id, key, seq, body in found:
            where = places.get(trace, {}).get(span_id & ID_MASK)
            if where is None:
                still[trace] = still.get(trace, 0) + 1
            else:
                self.moved.append((trace, span_id, key, seq, body, where))
        limit = session.settings.max_waiting_logs_per_trace
        for log in logs:
            where = places.get(log.trace, {}).get(log.span_id & ID_MASK)
            if where is not None:
                self.placed.append((log, where))
            elif still.get(log.trace, 0) < limit:
                still[log.trace] = still.get(log.trace, 0) + 1
                self.waiting.append(log)
            else:
                self.rejected += 1

    def jobs(self) -> set[Job]:
        return {p[:2] for _, p in self.placed} | {m[5][:2] for m in self.moved}

    def choose_direct(self, derived: set[Job]) -> None:
        """The jobs whose only news are this request's records: their rows are written without
        deriving the job where `lines` can (a LOG row needs only its step)."""
        waited = {m[5][:2] for m in self.moved}
        self.direct = {where[:2] for _, where in self.placed} - waited - derived

    def stage(self, settled: set[Attempt]) -> Receipt:
        """Keep the new records (those of a settled attempt without a body: their LOG rows are
        written now) and the places of waiting ones that found their span."""
        rows: list[tuple[LogRow, Attempt | None]] = [*self.placed]
        rows += [(log, None) for log in self.waiting]
        new = self._stage_rows(rows, settled)
        for log, where in self.placed:
            if log[:3] in new:
                item = (log.facts, where, (log.seq, log.key))
                if where in settled:
                    self._settled.append(item)
                else:
                    self._new[log[:3]] = log.facts
                    if where[:2] in self.direct:
                        self._direct.append(item)
        if self.moved:
            self._place_moved(settled)
        waiting = sum(1 for log in self.waiting if log[:3] in new)
        return Receipt(len(new), len(rows) - len(new), 0, self.rejected, waiting)

    def _stage_rows(
        self, rows: list[tuple[LogRow, Attempt | None]], settled: set[Attempt]
    ) -> set[tuple[str, int, bytes]]:
        """Insert the records; returns the keys new to the table."""
        if not rows:
            return set()
        places = [where or (None, None, None) for _, where in rows]
        found = self._session.execute(
            "stage_logs",
            {
                "trace_id": [log.trace for log, _ in rows],
                "span_id": [log.span_id for log, _ in rows],
                "key": [log.key for log, _ in rows],
                "seq": [log.seq for log, _ in rows],
                "body": [None if where in settled else log.wire for log, where in rows],
                "domain": [p[0] for p in places],
                "job_id": [p[1] for p in places],
                "attempt": [p[2] for p in places],
            },
        ).fetchall()
        return {(trace, span_id, bytes(key)) for trace, span_id, key in found}

    def _place_moved(self, settled: set[Attempt]) -> None:
        """Waiting records whose span found its attempt: placed (a settled one's, bodiless)."""
        moved = self.moved
        self._session.execute(
            "place_logs",
            {
                "trace_id": [m[0] for m in moved],
                "span_id": [m[1] for m in moved],
                "key": [m[2] for m in moved],
                "domain": [m[5][0] for m in moved],
                "job_id": [m[5][1] for m in moved],
                "attempt": [m[5][2] for m in moved],
                "settled": [m[5] in settled for m in moved],
            },
        )
        self._settled += [
            (decode_log_record(m[4]), m[5], (m[3], m[2])) for m in moved if m[5] in settled
        ]

    def job_logs(self, jobs: list[Job]) -> dict[Job, list[_StagedLog]]:
        """Every staged record of the jobs' attempts that are not settled, with its tie (the
        ones this request brought are not decoded again)."""
        found: dict[Job, list[_StagedLog]] = {}
        if not jobs:
            return found
        rows = self._session.execute(
            "job_logs", {"domain": [j[0] for j in jobs], "job_id": [j[1] for j in jobs]}
        ).fetchall()
        for trace, span_id, key, seq, domain, job_id, body in rows:
            key = bytes(key)
            facts = self._new.get((trace, span_id, key))
            if facts is None:
                facts = decode_log_record(body)
            found.setdefault((domain, job_id), []).append((facts, (seq, key)))
        return found

    def write_direct(
        self, staged: dict[Any, Staged], states: Mapping[Job, bytes]
    ) -> tuple[set[Job], dict[Job, JobState]]:
        """The direct jobs' LOG rows (`lines`), on their attempts as ``states`` (each job's
        stored state) hold them: returns the jobs to derive instead (a record's context or its
        attempt is not known so), and the states the written lines leave (their cap counts)."""
        return self._write_lines(staged, self._direct, states)

    def write_settled(self, staged: dict[Any, Staged]) -> None:
        """The LOG rows of records whose attempt is settled, under the per-step cap (the lines
        over it are counted), without deriving the attempt again."""
        self._write_lines(staged, self._settled, None)

    def _write_lines(
        self,
        staged: dict[Any, Staged],
        items: list[_Item],
        states: Mapping[Job, bytes] | None,
    ) -> tuple[set[Job], dict[Job, JobState]]:
        """Records -> LOG rows without a derivation (`lines`); ``states`` None: the attempts are
        settled (ended, whatever they hold)."""
        if not items:
            return set(), {}
        session = self._session
        nodes: dict[tuple[str, int], Staged] = {}
        for (trace, span_id, phase), span in staged.items():
            if phase or (trace, span_id) not in nodes:
                nodes[(trace, span_id)] = span
        fallback: set[Job] = set()
        found: list[tuple[LogFacts, Attempt, Context]] = []
        for facts, where, _ in sorted(items, key=lambda item: (item[0].time_ns, item[2])):
            if states is None and facts.event_name == PROGRESS_EVENT:
                continue  # a settled attempt's step has closed: it changes nothing
            context = line_context(nodes, format(facts.trace_id, "032x"), facts.span_id)
            if context is not None:
                found.append((facts, where, context))
            elif states is not None:
                fallback.add(where[:2])
        held, loaded = self._held(found, states, fallback)
        for facts, where, _ in found:
            if facts.event_name != PROGRESS_EVENT or where not in held:
                continue
            state = loaded.get(where[:2])
            if held[where][1] or state is None or not _live(state, facts):
                fallback.add(where[:2])  # progress of a step this state no longer holds open
        lines = Lines(session.settings.logs_max_per_step)
        translators = {
            job: lines.resume(state, self._translator)
            for job, state in loaded.items()
            if job not in fallback
        }
        for attempt, ended in held.values():
            if ended:
                lines.adopt_ended(attempt)
        min_severity = session.settings.logs_min_severity
        for facts, where, (_, key) in found:
            if where[:2] in fallback:
                continue
            attempt, ended = held[where]
            state = loaded.get(where[:2])
            if not ended and state is not None and _live(state, facts):
                # Its span is open in the job's state: the live door's translation, as is.
                lines.record(attempt, translators[where[:2]][facts.trace_id].log(facts))
                continue
            command = log_line(attempt.scope, key, facts, min_severity)
            if command is not None:
                lines.line(attempt, command)
        batch = lines.recorder.take_batch()
        if batch is not None:
            session.write(batch)
        if lines.late:
            session.stats.add("logs_over_cap", len(lines.late))
            self._count_late(lines.late)
        kept = {job: state for job, state in loaded.items() if job not in fallback}
        for facts, where, _ in found:
            state = kept.get(where[:2])
            if state is not None:  # a later span before these lines is derived in full
                state.frontier = max(state.frontier, facts.time_ns)
                state.last_log = max(state.last_log, facts.time_ns)
        return fallback, kept

    def _translator(self) -> SpanTranslator:
        settings = self._session.settings
        return SpanTranslator(
            problem=self._session.stats.problem, logs_min_severity=settings.logs_min_severity
        )

    def _held(
        self,
        found: list[tuple[LogFacts, Attempt, Context]],
        states: Mapping[Job, bytes] | None,
        fallback: set[Job],
    ) -> tuple[dict[Attempt, tuple[Held, bool]], dict[Job, JobState]]:
        """Each attempt of the lines as the recorder holds it, and whether it ended: running in
        its job's state, else ended (its final row written; a settled one always); one neither
        puts its job in ``fallback``. Also the states loaded."""
        loaded: dict[Job, JobState] = {}
        held: dict[Attempt, tuple[Held, bool]] = {}
        job_spans = {where: (facts.trace_id, context[0]) for facts, where, context in found}
        if states is not None:
            for job in {where[:2] for where in job_spans}:
                state = load(states.get(job))
                if state is not None:
                    loaded[job] = state
        running = {key: attempt for state in loaded.values() for key, attempt in state.attempts}
        ended: list[Attempt] = []
        for where, span in job_spans.items():
            attempt = running.get(span)
            if attempt is not None:
                held[where] = (attempt, False)
            else:
                ended.append(where)
        if not ended:
            return held, loaded
        columns = attempt_columns(sorted(ended))
        names = {
            (d, j, a): (t, e, final)
            for d, j, a, t, e, final in self._session.execute("attempt_names", columns)
        }
        counts: dict[Attempt, dict[str | None, int]] = {}
        for d, j, a, k, n in self._session.execute("attempt_log_counts", columns):
            counts.setdefault((d, j, a), {})[k] = n
        for where in ended:
            job_type, execution, final = names.get(where, (None, None, False))
            if states is not None and (not final or execution is None):
                fallback.add(where[:2])  # not known here yet: derived
                continue
            trace_id, job_span = job_spans[where]
            scope = Scope(*where[:2], job_type, where[2], execution, trace_id, job_span, None)
            held[where] = (ended_attempt(scope, execution, counts.get(where, {})), True)
        return held, loaded

    def _count_late(self, late: list[Late]) -> None:
        """Lines the cap dropped after their step closed: each added to the dropped-count row
        of the step run it lay in (between steps: the attempt's final row), or one made so."""
        cap = self._session.settings.logs_max_per_step
        self._session.execute(
            "count_dropped_lines",
            {
                "domain": [held.scope.domain for held, _, _ in late],
                "job_id": [held.scope.job_id for held, _, _ in late],
                "job_type": [held.scope.job_type for held, _, _ in late],
                "attempt": [held.scope.attempt for held, _, _ in late],
                "step_key": [key for _, key, _ in late],
                "at_us": [at for _, _, at in late],
                "trace_id": [held.trace_hex for held, _, _ in late],
                "span_id": [format(held.scope.span_id, "016x") for held, _, _ in late],
                "execution": [held.execution_id for held, _, _ in late],
                "cap": cap,
            },
        )


def _live(state: JobState, facts: LogFacts) -> bool:
    """Whether the record's span is open in ``state`` and the record comes after all it
    applied: the live door's translator takes it as it would have then."""
    return state.holds_open(facts.trace_id, facts.span_id) and facts.time_ns >= state.frontier
