"""One request's statements, in the transaction `staging` opened: lock its traces, place every
span in its attempt, lock the jobs touched, stage the new spans and records, replace the rows
of those jobs' attempts that are not settled by one derivation (`derive`), and note what the
request left (span counts, job states, attempts) in one last statement."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from psycopg.types.json import Jsonb

from .._core.facts import SpanFacts
from .._core.limits import step_key_text
from .._telemetry.metrics import Committed
from ..attributes import JOB_DOMAIN, JOB_ID, JOB_STEP_KEY
from .counting import attempt_columns, complete, counted, inserted_rows, written_whole
from .decode import decode_span
from .derive import (
    Derivation,
    JobSpan,
    derive_jobs,
    resumable,
    resume_jobs,
    settled_start,
)
from .ids import ID_MASK, signed
from .place import JOB, Attempt, Skeleton, Staged, place, skeleton
from .receipt import Receipt, Transaction
from .records import RequestLogs
from .rows import LogRow, SpanRow
from .session import Session
from .state import JobState, dump, load
from .units import recognised_units, unit_ended

__all__ = ["receive"]

Key = tuple[str, int, int]  # trace, signed span id, phase
Job = tuple[str, str]  # domain, job id
Moved = dict[Key, tuple[Attempt | None, Attempt | None]]  # staged spans placed anew: old, new


@dataclass(slots=True)
class _Jobs:
    """The locked jobs' attempts as collect derived them before."""

    settled: set[Attempt] = field(default_factory=set)
    attempts: set[Attempt] = field(default_factory=set)  # not settled
    new: set[Job] = field(default_factory=set)  # jobs new in this request
    fresh: set[Job] = field(default_factory=set)  # of those, the ones no row was derived of
    started: list[SpanFacts] = field(default_factory=list)  # settled attempts' job span starts
    states: dict[Job, bytes] = field(default_factory=dict)  # what their last derivation left
    placed_anew: set[Job] = field(default_factory=set)  # staged spans of theirs placed now
    complete: set[Attempt] = field(default_factory=set)  # not pending: the metrics counted them


def receive(
    session: Session, rows: list[SpanRow], logs: list[LogRow], transaction: Transaction
) -> tuple[Receipt, Committed]:
    """Stage and derive (noted in ``transaction``); what it closed and finished that no
    earlier derivation had (the metrics count each step and attempt once)."""
    traces = sorted({row.trace for row in rows} | {log.trace for log in logs})
    locked = session.execute(
        "lock_traces", {"schema": session.settings.schema, "trace_id": traces}
    ).fetchall()
    counts: dict[str, int] = {trace: count for trace, count, _, _ in locked}
    waiting = [trace for trace, _, logs_wait, _ in locked if logs_wait]
    transaction.txid = locked[0][3] if locked else None
    found = None if logs else _placed(session, traces, rows, counts, partial=True)
    if found is None:  # records need their spans' whole context; or a staged span moves
        found = _placed(session, traces, rows, counts, partial=False)
    assert found is not None
    staged, fresh, duplicates, late, over, moved, places = found
    records = RequestLogs(session, waiting, logs, places)
    derived = {(p[0], p[1]) for span in staged.values() if span.new and (p := span.place)}
    derived |= {(p[0], p[1]) for key in moved for p in moved[key] if p is not None}
    records.choose_direct(derived)
    jobs = sorted(derived | records.jobs())
    known = _lock_jobs(session, jobs)
    known.placed_anew = {(p[0], p[1]) for key in moved for p in moved[key] if p is not None}
    dropped = _stage(session, staged, moved, known.settled)
    log_receipt = records.stage(known.settled)
    late += dropped
    if late:
        session.stats.problem("late_spans", f"{late} spans of settled attempts dropped")
    fallback, line_states = records.write_direct(staged, known.states)
    jobs = sorted({job for job in jobs if job not in records.direct} | fallback)
    committed, derivations, finals = _derive(session, jobs, staged, known, records)
    records.write_settled(staged)
    _note_request(session, traces, staged, derivations, line_states, known.states, finals)
    transaction.committed = committed  # its statements ran: only the COMMIT is left
    if logs:
        return log_receipt, committed
    return Receipt(len(fresh) - dropped, duplicates, late, over), committed


_Placed = tuple[
    dict[Key, Staged], list[SpanRow], int, int, int, Moved, dict[str, dict[int, Attempt | None]]
]


def _placed(
    session: Session,
    traces: list[str],
    rows: list[SpanRow],
    counts: dict[str, int],
    *,
    partial: bool,
) -> _Placed | None:
    """The request's spans among what is staged of their traces, placed: (staged, fresh rows,
    duplicates, late, over the limit, staged spans placed anew, places). ``partial`` reads only
    what placing them needs; None if a placed span would move (its subtree is not read)."""
    dialects = session.settings.job_dialects()
    if partial and unit_ended(rows, dialects):
        return None  # a unit is read whole: every staged span of its trace
    staged: dict[Key, Staged] = {}
    known = [trace for trace in traces if counts[trace]]  # a trace with no span staged is new
    if known and partial:
        staged = _skeletons(_request_skeletons(session, known, rows))
    elif known:
        staged = _skeletons(session.execute("trace_skeletons", {"trace_id": known}).fetchall())
    unique = {row[:3]: row for row in reversed(rows)}  # the first copy of a span wins
    fresh = [row for key, row in sorted(unique.items()) if key not in staged]
    copies = [key for key in unique if key in staged]
    late = sum(1 for key in copies if staged[key].gone)
    duplicates = len(rows) - len(unique) + len(copies) - late
    kept = _within_limit(session, fresh, counts)
    over, fresh = len(fresh) - len(kept), kept
    seeds = _seeds(staged, fresh) if partial else None
    if not partial:  # a partial read found no unit ended (`unit_ended`): nothing to recognise
        fresh = recognised_units(session, fresh, staged, dialects)
    for row in fresh:
        shape = skeleton(row.facts, dialects)
        staged[row[:3]] = Staged(shape, None, new=row, step_key=_key_of(row))
    moved, places = _place(staged, seeds)
    if partial and any(old is not None for old, _ in moved.values()):
        return None
    return staged, fresh, duplicates, late, over, moved, places


def _request_skeletons(
    session: Session, traces: list[str], rows: list[SpanRow]
) -> list[tuple[Any, ...]]:
    """The skeletons `request_skeletons` reads for the request's ``rows`` in ``traces``."""
    within = set(traces)
    rows = [row for row in rows if row.trace in within]
    ids = sorted({(r[0], r[1]) for r in rows} | {(r[0], signed(r[3].parent_span_id)) for r in rows})
    new = sorted({(r[0], r[1]) for r in rows})
    return session.execute(
        "request_skeletons",
        {
            "trace_id": [i[0] for i in ids],
            "span_id": [i[1] for i in ids],
            "new_trace_id": [i[0] for i in new],
            "new_span_id": [i[1] for i in new],
            "traces": traces,
        },
    ).fetchall()


def _seeds(staged: dict[Key, Staged], fresh: list[SpanRow]) -> dict[str, dict[int, Attempt | None]]:
    """The places read that stand: of staged spans placed, all but the request's spans' own
    copies and their children (placed again, to see whether they move)."""
    new = {(row.trace, row.span_id & ID_MASK) for row in fresh}
    seeds: dict[str, dict[int, Attempt | None]] = {}
    for (trace, span_id, _), span in staged.items():
        node = (trace, span_id & ID_MASK)
        if span.place is None or node in new or (trace, span.skeleton.parent) in new:
            continue
        seeds.setdefault(trace, {})[node[1]] = span.place
    return seeds


def _key_of(row: SpanRow) -> str | None:
    """A new span's ``job.step.key`` as the recorder writes it (staged beside its skeleton:
    clean text PostgreSQL takes, cut as the step rows' key)."""
    key = row.facts.attributes.get(JOB_STEP_KEY)
    return None if key is None else step_key_text(key)


def _skeletons(found: list[tuple[Any, ...]]) -> dict[Key, Staged]:
    staged = {}
    for row in found:
        trace, span_id, phase, parent, kind, own, domain, job_id, attempt, gone, key = row
        where = None if domain is None else (domain, job_id, attempt)
        shape = Skeleton(parent & ID_MASK, kind, None if own is None else tuple(own))
        staged[(trace, span_id, phase)] = Staged(shape, where, gone, step_key=key)
    return staged


def _within_limit(session: Session, rows: list[SpanRow], counts: dict[str, int]) -> list[SpanRow]:
    """The rows that fit under the per-trace span limit (a trace's skeleton is read with every
    request that touches it): the earliest spans are kept, as the processor saw them first."""
    limit = session.settings.max_spans_per_trace
    room = {trace: limit - count for trace, count in counts.items()}
    if len(rows) <= min(room.values(), default=0):
        return rows  # every trace has room for all of them
    kept = []
    for row in sorted(
        rows, key=lambda row: (row.trace, row.facts.start_ns, row.span_id, row.phase)
    ):
        if room[row.trace] > 0:
            room[row.trace] -= 1
            kept.append(row)
    kept.sort(key=lambda row: row[:3])
    if len(kept) < len(rows):
        session.stats.problem(
            "spans_over_trace_limit",
            f"{len(rows) - len(kept)} spans rejected: their trace has {limit} spans already",
        )
    return kept


def _place(
    staged: dict[Key, Staged], seeds: dict[str, dict[int, Attempt | None]] | None = None
) -> tuple[Moved, dict[str, dict[int, Attempt | None]]]:
    """Place every span of the locked traces; returns the staged ones whose place changed
    (old, new), and every span's place. The ended copy of a span speaks for it (a marker may
    not name its job), unless the marker named one: a job is read at its start (`derive`)."""
    by_trace: dict[str, dict[int, Skeleton]] = {}
    for (trace, span_id, phase), span in sorted(staged.items()):
        nodes = by_trace.setdefault(trace, {})
        unsigned = span_id & ID_MASK
        if unsigned not in nodes or (phase and nodes[unsigned].kind != JOB):
            nodes[unsigned] = span.skeleton
    known = seeds or {}
    places = {trace: place(nodes, known.get(trace)) for trace, nodes in by_trace.items()}
    moved = {}
    for key, span in staged.items():
        where = places[key[0]][key[1] & ID_MASK]
        if where != span.place:
            if span.new is None:
                moved[key] = (span.place, where)
            span.place = where
    return moved, places


def _lock_jobs(session: Session, jobs: list[Job]) -> _Jobs:
    """Lock the jobs (sorted) and read their attempts."""
    known = _Jobs()
    if not jobs:
        return known
    columns = {"domain": [j[0] for j in jobs], "job_id": [j[1] for j in jobs]}
    for domain, job_id, new, state, fresh in session.execute("lock_jobs", columns).fetchall():
        if new:
            known.new.add((domain, job_id))
            if fresh:
                known.fresh.add((domain, job_id))
        elif state is not None:
            known.states[(domain, job_id)] = bytes(state)
    old = [job for job in jobs if job not in known.new]  # a new job has no attempt yet
    if not old:
        return known
    columns = {"domain": [j[0] for j in old], "job_id": [j[1] for j in old]}
    for domain, job_id, attempt, is_settled, trace, span_id, start_ns, whole in session.execute(
        "job_attempts", columns
    ):
        where = (domain, job_id, attempt)
        if whole:
            known.complete.add(where)
        (known.settled if is_settled else known.attempts).add(where)
        if is_settled and start_ns is not None:
            known.started.append(settled_start(where, trace, span_id, start_ns))
    return known


def _stage(session: Session, staged: dict[Key, Staged], moved: Moved, settled: set[Attempt]) -> int:
    """Keep the new spans and the new places of staged ones; a span placed in a settled
    attempt is a late one: a new one is dropped, a staged one loses its body. Returns the new
    spans dropped."""
    new = []
    for span in staged.values():
        if span.new is not None:
            span.gone = span.place in settled
            if not span.gone:
                new.append(span)
    if new:
        _insert_spans(session, new)
    if moved:
        keys = sorted(moved)
        places = [moved[key][1] or (None, None, None) for key in keys]
        for key in keys:
            staged[key].gone = staged[key].gone or staged[key].place in settled
        session.execute(
            "place_spans",
            {
                "trace_id": [key[0] for key in keys],
                "span_id": [key[1] for key in keys],
                "domain": [p[0] for p in places],
                "job_id": [p[1] for p in places],
                "attempt": [p[2] for p in places],
                "late": [staged[key].gone for key in keys],
            },
        )
    return sum(1 for span in staged.values() if span.new is not None) - len(new)


# stage_spans' columns, as COPY's binary format names them.
_SPAN_TYPES = ("text", "int8", "int2", "bytea", "int8", "int2", "jsonb",
               "text", "text", "int4", "text")  # fmt: skip


def _insert_spans(session: Session, new: list[Staged]) -> None:
    with session.cur.copy(session.queries["stage_spans"]) as copy:
        copy.set_types(_SPAN_TYPES)
        for span in new:
            row, shape = span.new, span.skeleton
            assert row is not None
            own = None if shape.own is None else Jsonb(list(shape.own))
            domain, job_id, attempt = span.place or (None, None, None)
            copy.write_row(
                (row.trace, row.span_id, row.phase, row.wire, signed(shape.parent), shape.kind, own,
                 domain, job_id, attempt, span.step_key)
            )  # fmt: skip


def _derive(
    session: Session, jobs: list[Job], staged: dict[Key, Staged], known: _Jobs, records: RequestLogs
) -> tuple[Committed, list[Derivation], set[Attempt]]:
    """Replace the rows of the jobs' attempts that are not settled: resumed from a job's state
    where its new spans allow (`derive.resumable`), else by a derivation from all their staged
    spans. Returns what it closed and finished that no earlier derivation had, the
    derivations (their notes are written with the request's), and the attempts whose final
    row it inserted."""
    derivations: list[Derivation] = []
    finals: set[Attempt] = set()
    if not jobs:
        return Committed(), derivations, finals
    settings = session.settings
    placed = [
        JobSpan(key[0], key[1], bool(key[2]), span.new.facts, span.skeleton.kind, span.place)
        for key, span in staged.items()
        if span.new is not None and span.place and not span.gone
    ]
    states = _resumable(session, jobs, known, records, placed)
    full = [job for job in jobs if job not in states]
    session.stats.add("jobs_resumed", len(states))  # the common live case
    session.stats.add("jobs_derived_in_full", len(full))
    committed = Committed()
    if states:
        found = resume_jobs(
            states,
            [span for span in placed if span.attempt[:2] in states],
            attempts={a for a in known.attempts if a[:2] in states},
            problem=session.stats.problem,
            logs_min_severity=settings.logs_min_severity,
            logs_max_per_step=settings.logs_max_per_step,
        )
        inserted, written = _write_derived(session, found, forget=set())
        committed = _counted(session, found, inserted, written, known)
        finals.update((r.domain, r.job_id, r.attempt) for r in inserted.log_rows)
        derivations.append(found)
    if full:
        chosen = set(full)
        found = derive_jobs(
            full,
            list(_job_spans(session, full, staged, known.new, placed)),
            attempts={a for a in known.attempts if a[:2] in chosen},
            started=[s for s in known.started if _job_of(s) in chosen],
            logs=records.job_logs(_with_records(full, known.new, records)),
            problem=session.stats.problem,
            dialects=settings.job_dialects(),
            logs_min_severity=settings.logs_min_severity,
            logs_max_per_step=settings.logs_max_per_step,
        )
        # Rows to replace: of the jobs collect knew before (a new one has none).
        inserted, written = _write_derived(session, found, forget=chosen - known.new)
        committed.extend(_counted(session, found, inserted, written, known))
        finals.update((r.domain, r.job_id, r.attempt) for r in inserted.log_rows)
        derivations.append(found)
    return committed, derivations, finals


def _counted(
    session: Session, found: Derivation, inserted: Committed, written: Committed, known: _Jobs
) -> Committed:
    """What the metrics count of a derivation, from its complete attempts' rows (`counting`):
    those the request ``inserted`` them all of taken from it, the others' read."""
    whole = written_whole(found, inserted, known.fresh)
    read = [a for a in complete(found) if a not in whole]
    if not read and not whole:
        return Committed()
    rows = session.execute("counted_rows", attempt_columns(read)).fetchall() if read else []
    return counted(rows + inserted_rows(inserted, whole), written=written, before=known.complete)


def _with_records(jobs: list[Job], new: set[Job], records: RequestLogs) -> list[Job]:
    """The jobs that may have records staged: a job new in this request has only those it
    places now."""
    placed = records.jobs()
    return [job for job in jobs if job not in new or job in placed]


def _job_of(span: SpanFacts) -> Job:
    return (span.attributes[JOB_DOMAIN], span.attributes[JOB_ID])


def _resumable(
    session: Session, jobs: list[Job], known: _Jobs, records: RequestLogs, placed: list[JobSpan]
) -> dict[Job, JobState]:
    """The jobs whose state this request's spans can be applied on: only new spans of theirs
    (none placed anew, no log record), all after what was applied, and nothing of what the
    state holds open closed since by another writer."""
    touched = known.placed_anew | records.jobs()
    by_job: dict[Job, list[JobSpan]] = {}
    for span in placed:
        by_job.setdefault(span.attempt[:2], []).append(span)
    states: dict[Job, JobState] = {}
    for job in jobs:
        blob = known.states.get(job)
        if blob is None or job in touched:
            continue
        state = load(blob)
        dialects = session.settings.job_dialects()
        if state is not None and resumable(state, by_job.get(job, ()), dialects):
            states[job] = state
    rows = [row for state in states.values() for row in state.open_rows()]
    if rows:
        closed = session.execute(
            "closed_under_state",
            {
                "domain": [r[0] for r in rows],
                "job_id": [r[1] for r in rows],
                "attempt": [r[2] for r in rows],
                "step_key": [r[3] for r in rows],
                "execution": [r[4] for r in rows],
            },
        ).fetchall()
        for domain, job_id in closed:
            del states[(domain, job_id)]
    return states


def _note_request(
    session: Session,
    traces: list[str],
    staged: dict[Key, Staged],
    derivations: list[Derivation],
    line_states: dict[Job, JobState],
    stored: dict[Job, bytes],
    finals: set[Attempt],
) -> None:
    """At the request's end, in one statement: the spans each trace staged now, the state each
    job's next request may resume (``line_states``: of jobs whose lines went around a
    derivation; one equal to the ``stored`` one is not written again), and each attempt
    derived (with a final row: of ``finals``, inserted now, else as the table says)."""
    added = dict.fromkeys(traces, 0)
    for span in staged.values():
        if span.new and not span.gone:
            added[span.new.trace] += 1
    grown = [trace for trace in traces if added[trace]]
    states = {job: dump(state) for job, state in line_states.items()}
    derived: list[Attempt] = []
    pending: list[bool] = []
    firsts: list[tuple[str | None, int | None, int | None]] = []
    for found in derivations:
        states.update((job, None if s is None else dump(s)) for job, s in found.states.items())
        derived += found.derived
        pending += (a in found.pending for a in found.derived)
        firsts += (found.firsts.get(a, (None, None, None)) for a in found.derived)
    jobs = sorted(job for job, state in states.items() if state != stored.get(job))
    session.execute(
        "note_request",
        {
            "trace_id": grown,
            "added": [added[trace] for trace in grown],
            "job_domain": [j[0] for j in jobs],
            "job_job_id": [j[1] for j in jobs],
            "state": [states[j] for j in jobs],
            **attempt_columns(derived),
            "final": [True if a in finals else None for a in derived],
            "pending": pending,
            "first_trace_id": [f[0] for f in firsts],
            "first_span_id": [f[1] for f in firsts],
            "start_ns": [f[2] for f in firsts],
        },
    )


def _write_derived(
    session: Session, found: Derivation, *, forget: set[Job]
) -> tuple[Committed, Committed]:
    """The derivation's rows (in place of the earlier ones of the jobs to ``forget``, else on
    them); what the writes changed, and that less what the metrics counted before."""
    counted: list[tuple[Any, ...]] = []  # closed steps and final rows written before
    replaced = [a for a in found.derived if a[:2] in forget]
    if replaced:
        counted = session.execute("forget_derived_rows", attempt_columns(replaced)).fetchall()
    committed = Committed() if found.batch is None else session.write(found.batch)
    if found.starts:
        starts = found.starts
        session.execute(
            "abandon_settled_attempts",
            {
                "domain": [s[0] for s in starts],
                "job_id": [s[1] for s in starts],
                "attempt": [s[2] for s in starts],
                "at_us": [s[3] // 1000 for s in starts],
            },
        )
    return committed, committed.without(
        [(trace, span, key) for trace, span, key, *_, n in counted if n is None],
        [(domain, job, n) for *_, domain, job, n in counted if n is not None],
    )


def _job_spans(
    session: Session,
    jobs: list[Job],
    staged: dict[Key, Staged],
    new_jobs: set[Job],
    placed: list[JobSpan],
) -> Iterator[JobSpan]:
    """Every staged span of the jobs' attempts not settled. A new job's are this request's
    spans (``placed``), at hand; the others' are read (and decoded, the ones this request did
    not bring)."""
    new_jobs = set(new_jobs)
    for span in staged.values():
        if span.new is None and span.place and not span.gone:  # placed now, staged before
            new_jobs.discard(span.place[:2])  # its job is read
    yield from (span for span in placed if span.attempt[:2] in new_jobs)
    read = [job for job in jobs if job not in new_jobs]
    if not read:
        return
    rows = session.execute(
        "job_spans", {"domain": [j[0] for j in read], "job_id": [j[1] for j in read]}
    ).fetchall()
    for trace, span_id, phase, kind, domain, job_id, attempt, body in rows:
        known = staged.get((trace, span_id, phase))
        facts = decode_span(body) if known is None or known.new is None else known.new.facts
        yield JobSpan(trace, span_id, bool(phase), facts, kind, (domain, job_id, attempt))
