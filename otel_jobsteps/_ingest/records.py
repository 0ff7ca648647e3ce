"""A request's log records in its transaction: each placed in the attempt of the span its
context names (or waiting for it, bounded per trace), staged, and fed to their attempts'
derivation, or written as LOG rows at once (a settled attempt's, and those that are all a
job's news in this request)."""

from __future__ import annotations

from typing import Any

from .._commands import LogRecorded
from .._facts import LogFacts
from .._recorder import StepRecorder
from .ids import ID_MASK
from .lines import LineContexts, Names, StepCount, direct_lines, settled_lines
from .logs import decode_log_record
from .place import Attempt, Staged
from .receipt import Receipt
from .session import Session

__all__ = ["LogRow", "RequestLogs"]

Job = tuple[str, str]  # domain, job id
# A log record: its trace, signed span id, key, place in its request, facts, as received.
LogRow = tuple[str, int, bytes, int, LogFacts, bytes]
Places = dict[str, dict[int, Attempt | None]]  # per trace, per span id: its attempt
_StagedLog = tuple[LogFacts, tuple[int, bytes]]  # a record and its tie (place in request, key)


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
        self._settled: list[tuple[LogFacts, Attempt]] = []
        self._direct: list[tuple[LogFacts, Attempt]] = []  # written without a derivation
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
            where = places.get(log[0], {}).get(log[1] & ID_MASK)
            if where is not None:
                self.placed.append((log, where))
            elif still.get(log[0], 0) < limit:
                still[log[0]] = still.get(log[0], 0) + 1
                self.waiting.append(log)
            else:
                self.rejected += 1

    def jobs(self) -> set[Job]:
        return {p[:2] for _, p in self.placed} | {m[5][:2] for m in self.moved}

    def choose_direct(self, derived: set[Job]) -> None:
        """The jobs whose only news are this request's records, none a progress event: their
        LOG rows are written without deriving the job (a LOG row needs only its step)."""
        progress = {where[:2] for log, where in self.placed if log[4].event_name == "progress"}
        waited = {m[5][:2] for m in self.moved}
        self.direct = {where[:2] for _, where in self.placed} - progress - waited - derived

    def stage(self, settled: set[Attempt]) -> Receipt:
        """Keep the new records (those of a settled attempt without a body: their LOG rows are
        written now) and the places of waiting ones that found their span."""
        rows: list[tuple[LogRow, Attempt | None]] = [*self.placed]
        rows += [(log, None) for log in self.waiting]
        new = self._stage_rows(rows, settled)
        for log, where in self.placed:
            if log[:3] in new:
                if where in settled:
                    self._settled.append((log[4], where))
                else:
                    self._new[log[:3]] = log[4]
                    if where[:2] in self.direct:
                        self._direct.append((log[4], where))
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
                "trace_id": [log[0] for log, _ in rows],
                "span_id": [log[1] for log, _ in rows],
                "key": [log[2] for log, _ in rows],
                "seq": [log[3] for log, _ in rows],
                "body": [None if where in settled else log[5] for log, where in rows],
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
        self._settled += [(decode_log_record(m[4]), m[5]) for m in moved if m[5] in settled]

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

    def write_direct(self, staged: dict[Any, Staged]) -> set[Job]:
        """The direct jobs' LOG rows, unless a step would pass its cap or no row names the
        attempt's execution yet: returns those jobs, to derive instead."""
        return self._write_lines(staged, self._direct, settled=False)

    def write_settled(self, staged: dict[Any, Staged]) -> None:
        """The LOG rows of records whose attempt is settled, under the per-step cap (the lines
        over it are counted), without deriving the attempt again."""
        self._write_lines(staged, self._settled, settled=True)

    def _write_lines(
        self, staged: dict[Any, Staged], items: list[tuple[LogFacts, Attempt]], *, settled: bool
    ) -> set[Job]:
        """Records -> LOG rows without a derivation (`lines`)."""
        if not items:
            return set()
        session = self._session
        cap = session.settings.logs_max_per_step
        names, counts = self._attempt_state(sorted({where for _, where in items}))
        nodes: dict[tuple[str, int], Staged] = {}
        for (trace, span_id, phase), span in staged.items():
            if phase or (trace, span_id) not in nodes:
                nodes[(trace, span_id)] = span
        contexts = LineContexts(nodes, names, session.stats, session.settings.logs_min_severity)
        lines: list[tuple[Attempt, LogRecorded]] = []
        fallback: set[Job] = set()
        for facts, where in sorted(items, key=lambda item: item[0].time_ns):
            if not settled and names.get(where, (None, None))[1] is None:
                fallback.add(where[:2])  # no row names its execution yet: derive it
                continue
            found = contexts.lines(facts, where)
            if found is None:
                if not settled:
                    fallback.add(where[:2])
                continue
            lines += [(where, command) for command in found]
        recorder = StepRecorder(debounce_ms=0, logs_max_per_step=cap)
        if settled:
            over = settled_lines(lines, counts, cap, recorder)
            if over:
                session.stats.add("logs_over_cap", sum(n for n, _ in over.values()))
                self._count_dropped(over, names, cap)
        else:
            direct_lines(lines, counts, cap, recorder, fallback)
        batch = recorder.take_batch()
        if batch is not None:
            session.write(batch)
        return fallback

    def _attempt_state(self, attempts: list[Attempt]) -> tuple[Names, dict[StepCount, int]]:
        """Each attempt's type and execution, and its LOG rows per step key."""
        columns = {
            "domain": [a[0] for a in attempts],
            "job_id": [a[1] for a in attempts],
            "attempt": [a[2] for a in attempts],
        }
        rows = self._session.execute("attempt_names", columns).fetchall()
        names = {(d, j, a): (t, e) for d, j, a, t, e in rows}
        rows = self._session.execute("attempt_log_counts", columns).fetchall()
        return names, {(d, j, a, k): n for d, j, a, k, n in rows}

    def _count_dropped(self, over: dict[StepCount, list[int]], names: Names, cap: int) -> None:
        """Settled attempts' late lines past the cap: in their step's dropped-count row."""
        keys = sorted(over, key=lambda k: (k[0], k[1], k[2], k[3] or ""))
        self._session.execute(
            "count_dropped_lines",
            {
                "domain": [k[0] for k in keys],
                "job_id": [k[1] for k in keys],
                "attempt": [k[2] for k in keys],
                "step_key": [k[3] for k in keys],
                "dropped": [over[k][0] for k in keys],
                "at_us": [over[k][1] for k in keys],
                "execution": [names.get(k[:3], (None, None))[1] for k in keys],
                "cap": cap,
            },
        )
