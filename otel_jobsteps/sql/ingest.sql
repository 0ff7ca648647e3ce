-- Statements of the OTLP receiver (otel_jobsteps.ingest.staging). Same conventions as
-- queries.sql: {relation} names are schema-qualified identifiers, values %(name)s parameters.
-- Lock order: a request's traces (otlp_trace, sorted), then its jobs (otlp_job, sorted); the
-- settle pass takes only job locks, and skips locked ones.

-- name: lock_traces --
-- First beside prune's mover (partitioned layout: its lock key): it moves finished attempts'
-- rows while no request derives rows, a request derives while no mover runs (its delete then
-- sees the moved rows); requests do not wait for each other. Then register the request's traces
-- and lock their rows, in the (sorted) order given: two receivers placing spans of the same
-- traces wait for each other. span_count 0: nothing of it is staged (a trace's row goes only
-- once no span of it is left); waiting: records of it wait for their span. Each row carries
-- the transaction's id: should its COMMIT go unanswered, txid_status tells whether it landed
-- (the metrics count it then).
WITH mover AS (  -- a volatile function: run once, before the first row is registered
    SELECT pg_advisory_xact_lock_shared(hashtextextended('otel_jobsteps:move:' || %(schema)s, 0))
)
INSERT INTO {otlp_trace} AS o (trace_id)
SELECT unnest(%(trace_id)b::text[]) FROM mover
ON CONFLICT (trace_id) DO UPDATE SET touched_at = now()
RETURNING o.trace_id, o.span_count,
          EXISTS (SELECT 1 FROM {otlp_log} AS g WHERE g.trace_id = o.trace_id AND g.domain IS NULL),
          txid_current();

-- name: trace_skeletons --
-- What is staged of these traces, without bodies: enough to place every span in its job.
SELECT trace_id, span_id, phase, parent, kind, own, domain, job_id, attempt, body IS NULL,
       step_key
FROM {otlp_span} WHERE trace_id = ANY(%(trace_id)b::text[]);

-- name: request_skeletons --
-- What placing a request's spans needs of their traces: the staged copies of its spans and of
-- their parents, the staged children of its spans, and the spans still waiting for a place.
WITH wanted AS (
    SELECT s.trace_id, s.span_id, s.phase FROM {otlp_span} AS s
    JOIN unnest(%(trace_id)b::text[], %(span_id)b::bigint[]) AS t (trace_id, span_id)
      ON s.trace_id = t.trace_id AND s.span_id = t.span_id
    UNION
    SELECT s.trace_id, s.span_id, s.phase FROM {otlp_span} AS s
    JOIN unnest(%(new_trace_id)b::text[], %(new_span_id)b::bigint[]) AS t (trace_id, parent)
      ON s.trace_id = t.trace_id AND s.parent = t.parent
    UNION
    SELECT trace_id, span_id, phase FROM {otlp_span}
    WHERE trace_id = ANY(%(traces)b::text[]) AND domain IS NULL
)
SELECT s.trace_id, s.span_id, s.phase, s.parent, s.kind, s.own, s.domain, s.job_id, s.attempt,
       s.body IS NULL, s.step_key
FROM {otlp_span} AS s JOIN wanted USING (trace_id, span_id, phase);

-- name: waiting_bodies --
-- The ended copies in these traces still waiting for a place, with their bodies: the spans of
-- a dialect's unit whose span has just ended (`units`).
SELECT trace_id, span_id, body FROM {otlp_span}
WHERE trace_id = ANY(%(trace_id)b::text[]) AND phase = 1 AND domain IS NULL
  AND body IS NOT NULL;

-- name: reshape_spans --
-- Staged ended copies given their meaning by a dialect: their bodies, skeletons and step keys.
UPDATE {otlp_span} AS s
SET body = t.body, kind = t.kind, own = t.own, step_key = t.step_key
FROM unnest(%(trace_id)b::text[], %(span_id)b::bigint[], %(body)b::bytea[], %(kind)b::int2[],
            %(own)b::jsonb[], %(step_key)b::text[])
     AS t (trace_id, span_id, body, kind, own, step_key)
WHERE s.trace_id = t.trace_id AND s.span_id = t.span_id AND s.phase = 1;

-- name: lock_jobs --
-- Register the jobs a request touches and lock them, in the (sorted) order given: one job is
-- derived by one request at a time, and never while it is being settled. Says which are new,
-- the state the last derivation of each left, and of the new ones which have no row collect
-- derived before (one forgotten by prune may): their rows are all the request's own.
INSERT INTO {otlp_job} AS j (domain, job_id)
SELECT * FROM unnest(%(domain)b::text[], %(job_id)b::text[])
ON CONFLICT (domain, job_id) DO UPDATE SET touched_at = now()
RETURNING j.domain, j.job_id, j.xmax = 0, j.state,  -- new: nothing of it was staged before
          CASE WHEN j.xmax = 0  -- probes of the jobs' indexes (OFFSET 0: not a hashed scan)
               THEN NOT EXISTS (SELECT 1 FROM {job_log} AS l
                                WHERE l.domain = j.domain AND l.job_id = j.job_id AND l.derived
                                OFFSET 0)
                    AND NOT EXISTS (SELECT 1 FROM {job_event} AS e
                                    WHERE e.domain = j.domain AND e.job_id = j.job_id
                                      AND e.derived OFFSET 0)
               ELSE false
          END;

-- name: job_attempts --
-- The attempts collect derived of these jobs (read under the jobs' locks), with the start of
-- each one's job span and whether it was complete (not pending: its metrics were counted).
SELECT a.domain, a.job_id, a.attempt, a.settled, a.trace_id, a.span_id, a.start_ns,
       NOT a.pending
FROM {otlp_attempt} AS a
JOIN unnest(%(domain)b::text[], %(job_id)b::text[]) AS t (domain, job_id)
  ON a.domain = t.domain AND a.job_id = t.job_id;

-- name: stage_spans --
-- Keep the request's new spans with their place, by COPY: a copy of a span staged before was
-- filtered out already, under the trace's lock, so none can conflict.
COPY {otlp_span} (trace_id, span_id, phase, body, parent, kind, own, domain, job_id, attempt,
                  step_key)
FROM STDIN (FORMAT BINARY);

-- name: place_spans --
-- Staged spans whose place changed (a parent arrived); one of a settled attempt loses its body.
UPDATE {otlp_span} AS s
SET domain = t.domain, job_id = t.job_id, attempt = t.attempt,
    body = CASE WHEN t.late THEN NULL ELSE s.body END
FROM unnest(%(trace_id)b::text[], %(span_id)b::bigint[], %(domain)b::text[],
            %(job_id)b::text[], %(attempt)b::int[], %(late)b::bool[])
     AS t (trace_id, span_id, domain, job_id, attempt, late)
WHERE s.trace_id = t.trace_id AND s.span_id = t.span_id;

-- name: job_spans --
-- Every staged span of these jobs' attempts that are not settled (to derive their rows).
SELECT s.trace_id, s.span_id, s.phase, s.kind, s.domain, s.job_id, s.attempt, s.body
FROM {otlp_span} AS s
JOIN unnest(%(domain)b::text[], %(job_id)b::text[]) AS t (domain, job_id)
  ON s.domain = t.domain AND s.job_id = t.job_id
WHERE s.body IS NOT NULL;

-- name: staging_columns --
-- At startup: the staging tables exist with the newest columns (no row is read).
SELECT s.step_key, a.final, j.state, g.seq, e.derived, l.derived
FROM {otlp_span} AS s, {otlp_attempt} AS a, {otlp_job} AS j, {otlp_log} AS g,
     {job_event} AS e, {job_log} AS l
LIMIT 0;

-- name: missing_rights --
-- At startup: the rights collect needs that this role lacks (it deletes what an earlier
-- derivation wrote, and settled spans). has_table_privilege with several rights asks for any.
SELECT t.name, r.name
FROM unnest(ARRAY['job_event', 'job_log', 'otlp_trace', 'otlp_span', 'otlp_job',
                  'otlp_attempt', 'otlp_log']) AS t (name),
     unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE']) AS r (name)
WHERE NOT has_table_privilege(format('%%I.%%I', %(schema)s::text, t.name), r.name)
ORDER BY 1, 2;

-- name: forget_derived_rows --
-- Remove what earlier derivations wrote of these attempts (not settled), before writing anew:
-- its own rows only (derived), every other writer's stay as they are. Returns what of it the
-- metrics counted then: its closed steps (with their key), then its final rows.
WITH target AS (
    SELECT * FROM unnest(%(domain)b::text[], %(job_id)b::text[], %(attempt)b::int[])
             AS t (domain, job_id, attempt)
), events AS (
    DELETE FROM {job_event} AS e USING target AS t
    WHERE e.domain = t.domain AND e.job_id = t.job_id AND e.attempt = t.attempt AND e.derived
    RETURNING e.trace_id, e.span_id, e.type, e.ended_at, e.step_key
), logs AS (
    DELETE FROM {job_log} AS l USING target AS t
    WHERE l.domain = t.domain AND l.job_id = t.job_id AND l.attempt = t.attempt AND l.derived
    RETURNING l.domain, l.job_id, l.attempt
)
SELECT trace_id, span_id, step_key, NULL AS domain, NULL AS job_id, NULL::int AS attempt
FROM events WHERE type = 'STEP' AND ended_at IS NOT NULL
UNION ALL
SELECT NULL, NULL, NULL, domain, job_id, attempt FROM logs;

-- name: counted_rows --
-- What the metrics count of these attempts, as their rows say now: their closed steps, then
-- their final rows (seconds NULL); collect's own rows only (another writer counts its own).
WITH target AS (
    SELECT * FROM unnest(%(domain)b::text[], %(job_id)b::text[], %(attempt)b::int[])
             AS t (domain, job_id, attempt)
)
SELECT e.trace_id, e.span_id, e.domain, e.job_id, e.attempt, e.job_type, e.step_key,
       e.step_status AS status, NULL AS reason,
       extract(epoch FROM {job_duration}(e.created_at, e.ended_at))::float8 AS seconds
FROM {job_event} AS e JOIN target AS t
  ON e.domain = t.domain AND e.job_id = t.job_id AND e.attempt = t.attempt
WHERE e.type = 'STEP' AND e.ended_at IS NOT NULL AND e.derived
UNION ALL
SELECT NULL, NULL, l.domain, l.job_id, l.attempt, l.job_type, NULL, l.status, l.reason, NULL
FROM {job_log} AS l JOIN target AS t
  ON l.domain = t.domain AND l.job_id = t.job_id AND l.attempt = t.attempt AND l.derived;

-- name: closed_under_state --
-- Of the attempts and steps jobs' states hold open (step_key NULL: the attempt), the jobs with
-- one closed since by another writer (sweep): their state is stale, they are derived in full.
SELECT DISTINCT t.domain, t.job_id
FROM unnest(%(domain)b::text[], %(job_id)b::text[], %(attempt)b::int[], %(step_key)b::text[],
            %(execution)b::text[]) AS t (domain, job_id, attempt, step_key, execution)
WHERE CASE WHEN t.step_key IS NULL
           THEN EXISTS (SELECT 1 FROM {job_log} AS l
                        WHERE l.domain = t.domain AND l.job_id = t.job_id
                          AND l.attempt = t.attempt)
           ELSE NOT EXISTS (SELECT 1 FROM {job_event} AS e
                            WHERE e.domain = t.domain AND e.job_id = t.job_id
                              AND e.attempt = t.attempt AND e.type = 'STEP'
                              AND e.step_key = t.step_key AND e.execution_id = t.execution
                              AND e.ended_at IS NULL)
      END;

-- name: note_request --
-- At a request's end: how many spans each trace has staged now (its limit); the state each
-- job's next request may resume (NULL: derive it in full); and each attempt derived, whether it
-- has its final row now (final NULL: the table says; true: the request inserted it) and
-- whether it is pending (a span of it still open, or its job span's
-- end not received: a final row another attempt's start wrote does not settle it); its settle
-- time starts again.
WITH traces AS (
    UPDATE {otlp_trace} AS o
    SET span_count = o.span_count + t.added
    FROM unnest(%(trace_id)b::text[], %(added)b::int[]) AS t (trace_id, added)
    WHERE o.trace_id = t.trace_id
), states AS (
    UPDATE {otlp_job} AS j SET state = s.state
    FROM unnest(%(job_domain)b::text[], %(job_job_id)b::text[], %(state)b::bytea[])
         AS s (domain, job_id, state)
    WHERE j.domain = s.domain AND j.job_id = s.job_id
)
INSERT INTO {otlp_attempt} AS a (domain, job_id, attempt, final, pending, trace_id, span_id,
                                  start_ns)
SELECT t.domain, t.job_id, t.attempt,
       coalesce(t.final,
                EXISTS (SELECT 1 FROM {job_log} AS l
                        WHERE l.domain = t.domain AND l.job_id = t.job_id
                          AND l.attempt = t.attempt)),
       t.pending, t.trace_id, t.span_id, t.start_ns
FROM unnest(%(domain)b::text[], %(job_id)b::text[], %(attempt)b::int[], %(final)b::bool[],
            %(pending)b::bool[], %(first_trace_id)b::text[], %(first_span_id)b::bigint[],
            %(start_ns)b::bigint[])
     AS t (domain, job_id, attempt, final, pending, trace_id, span_id, start_ns)
ON CONFLICT (domain, job_id, attempt) DO UPDATE
SET final = excluded.final, pending = excluded.pending, touched_at = now(),
    trace_id = excluded.trace_id, span_id = excluded.span_id, start_ns = excluded.start_ns;

-- name: settle_attempts --
-- Attempts that have their final row, nothing pending, and no span of their job for the settle
-- time (or none for the open settle time, whatever they wait for): their spans lose their
-- bodies, so a late copy is recognised and dropped. Jobs a request holds are skipped, and the
-- conditions are checked again on the locked rows. Returns the attempts settled, their spans,
-- and those settled while pending (never counted by the metrics: counted now).
WITH due AS (
    SELECT domain, job_id, attempt FROM {otlp_attempt}
    WHERE NOT settled AND touched_at < now() - %(after_s)s * interval '1 second'
      AND ((final AND NOT pending)
           OR touched_at < now() - %(open_after_s)s * interval '1 second')
    ORDER BY touched_at
    LIMIT %(limit)s
), locked AS (
    SELECT j.domain, j.job_id FROM {otlp_job} AS j
    WHERE (j.domain, j.job_id) IN (SELECT domain, job_id FROM due)
    ORDER BY j.domain, j.job_id
    FOR UPDATE SKIP LOCKED
), settled AS (
    UPDATE {otlp_attempt} AS a SET settled = true, touched_at = now()
    FROM due JOIN locked USING (domain, job_id)
    WHERE a.domain = due.domain AND a.job_id = due.job_id AND a.attempt = due.attempt
      AND NOT a.settled AND a.touched_at < now() - %(after_s)s * interval '1 second'
      AND ((a.final AND NOT a.pending)
           OR a.touched_at < now() - %(open_after_s)s * interval '1 second')
    RETURNING a.domain, a.job_id, a.attempt, a.pending
), emptied AS (
    UPDATE {otlp_span} AS s SET body = NULL
    FROM settled AS a
    WHERE s.domain = a.domain AND s.job_id = a.job_id AND s.attempt = a.attempt
      AND s.body IS NOT NULL
    RETURNING 1
), emptied_logs AS (
    UPDATE {otlp_log} AS g SET body = NULL
    FROM settled AS a
    WHERE g.domain = a.domain AND g.job_id = a.job_id AND g.attempt = a.attempt
      AND g.body IS NOT NULL
)
SELECT (SELECT count(*) FROM settled), (SELECT count(*) FROM emptied),
       (SELECT array_agg(domain) FROM settled WHERE pending),
       (SELECT array_agg(job_id) FROM settled WHERE pending),
       (SELECT array_agg(attempt) FROM settled WHERE pending);

-- name: drop_orphans --
-- Spans that found no job within the open settle time (no job span of theirs arrived): gone,
-- with their trace's row once nothing of it is left. Locked traces are skipped.
WITH old AS (
    SELECT o.trace_id FROM {otlp_trace} AS o
    WHERE o.touched_at < now() - %(open_after_s)s * interval '1 second'
      AND EXISTS (SELECT 1 FROM {otlp_span} AS s
                  WHERE s.trace_id = o.trace_id AND s.domain IS NULL)
    ORDER BY o.touched_at
    LIMIT %(limit)s
    FOR UPDATE OF o SKIP LOCKED
), dropped AS (
    DELETE FROM {otlp_span} AS s USING old
    WHERE s.trace_id = old.trace_id AND s.domain IS NULL
    RETURNING s.trace_id
), empty AS (
    DELETE FROM {otlp_trace} AS o USING old
    WHERE o.trace_id = old.trace_id
      AND NOT EXISTS (SELECT 1 FROM {otlp_span} AS s
                      WHERE s.trace_id = o.trace_id AND s.domain IS NOT NULL)
)
SELECT (SELECT count(*) FROM old), (SELECT count(*) FROM dropped);

-- name: abandon_settled_attempts --
-- A later attempt that started before a settled attempt's final row, as live: that attempt had
-- no final row yet, so the later start abandons it (again, earlier, if a later attempt did).
-- The step it had open then is closed FAILED abandoned at that start, and its final row
-- becomes FAILED abandoned, dated then, naming its latest step begun by then (what the
-- writer's abandon would have written at that moment). Only collect's own rows (derived) are
-- read and changed: another writer's final row or step is left as it is.
WITH later AS (
    SELECT * FROM unnest(%(domain)b::text[], %(job_id)b::text[], %(attempt)b::int[],
                         %(at_us)b::bigint[]) AS t (domain, job_id, attempt, at_us)
), victim AS (
    SELECT DISTINCT ON (l.id) l.id, l.domain, l.job_id, l.attempt,
           timestamptz 'epoch' + t.at_us * interval '1 microsecond' AS next_start
    FROM later AS t
    JOIN {job_log} AS l
      ON l.domain = t.domain AND l.job_id = t.job_id AND l.attempt < t.attempt
     AND l.created_at > timestamptz 'epoch' + t.at_us * interval '1 microsecond' AND l.derived
    JOIN {otlp_attempt} AS a
      ON a.domain = l.domain AND a.job_id = l.job_id AND a.attempt = l.attempt AND a.settled
    -- the writer's abandon finds an attempt by its job_event rows written by then
    WHERE EXISTS (SELECT 1 FROM {job_event} AS e
                  WHERE e.domain = l.domain AND e.job_id = l.job_id AND e.attempt = l.attempt
                    AND e.created_at <= timestamptz 'epoch' + t.at_us * interval '1 microsecond'
                    AND e.derived)
    ORDER BY l.id, t.at_us
), closed AS (
    UPDATE {job_event} AS e
    SET step_status = 'FAILED', message = 'abandoned',
        ended_at = GREATEST(e.created_at, v.next_start)
    FROM victim AS v
    WHERE e.domain = v.domain AND e.job_id = v.job_id AND e.attempt = v.attempt
      AND e.type = 'STEP' AND e.created_at <= v.next_start AND e.derived
      AND (e.ended_at IS NULL OR e.ended_at > v.next_start)
)
UPDATE {job_log} AS l
SET status = 'FAILED', reason = 'abandoned', created_at = v.next_start,
    detail = jsonb_build_object(
        'step', (SELECT e.step_key FROM {job_event} AS e
                 WHERE e.domain = v.domain AND e.job_id = v.job_id AND e.attempt = v.attempt
                   AND e.type = 'STEP' AND e.created_at <= v.next_start AND e.derived
                   AND e.step_status <> 'SKIPPED'
                 ORDER BY e.created_at DESC, e.id DESC LIMIT 1))
FROM victim AS v
WHERE l.id = v.id;

-- name: waiting_logs --
-- The records of these traces still waiting for their span to be placed (bounded per trace).
SELECT trace_id, span_id, key, seq, body FROM {otlp_log}
WHERE trace_id = ANY(%(trace_id)b::text[]) AND domain IS NULL;

-- name: stage_logs --
-- Keep the request's records with their place (NULL: waiting); a copy delivered before
-- conflicts with itself. Returns the new ones.
INSERT INTO {otlp_log} AS g (trace_id, span_id, key, seq, body, domain, job_id, attempt)
SELECT * FROM unnest(%(trace_id)b::text[], %(span_id)b::bigint[], %(key)b::bytea[],
                     %(seq)b::int[], %(body)b::bytea[], %(domain)b::text[], %(job_id)b::text[],
                     %(attempt)b::int[])
ON CONFLICT (key) DO NOTHING
RETURNING g.trace_id, g.span_id, g.key;

-- name: place_logs --
-- Waiting records whose span is placed now; one of a settled attempt keeps no body (its LOG
-- row is written at once).
UPDATE {otlp_log} AS g
SET domain = t.domain, job_id = t.job_id, attempt = t.attempt,
    body = CASE WHEN t.settled THEN NULL ELSE g.body END
FROM unnest(%(trace_id)b::text[], %(span_id)b::bigint[], %(key)b::bytea[], %(domain)b::text[],
            %(job_id)b::text[], %(attempt)b::int[], %(settled)b::bool[])
     AS t (trace_id, span_id, key, domain, job_id, attempt, settled)
WHERE g.key = t.key;

-- name: job_logs --
-- Every staged record of these jobs' attempts that are not settled (derived with their spans).
SELECT g.trace_id, g.span_id, g.key, g.seq, g.domain, g.job_id, g.body
FROM {otlp_log} AS g
JOIN unnest(%(domain)b::text[], %(job_id)b::text[]) AS t (domain, job_id)
  ON g.domain = t.domain AND g.job_id = t.job_id
WHERE g.body IS NOT NULL;

-- name: attempt_log_counts --
-- LOG rows collect wrote per step of these attempts, dropped-count rows aside (their records'
-- cap): at most the cap per step, whatever was dropped.
SELECT e.domain, e.job_id, e.attempt, e.step_key, count(*)
FROM {job_event} AS e
JOIN unnest(%(domain)b::text[], %(job_id)b::text[], %(attempt)b::int[])
     AS t (domain, job_id, attempt)
  ON e.domain = t.domain AND e.job_id = t.job_id AND e.attempt = t.attempt
WHERE e.type = 'LOG' AND e.derived AND NOT e.detail ? 'dropped'
GROUP BY 1, 2, 3, 4;

-- name: drop_orphan_logs --
-- Records whose span was never placed within the open settle time: gone (the processor ignores
-- records outside a job scope too).
WITH old AS (
    SELECT g.trace_id, g.span_id, g.key FROM {otlp_log} AS g
    WHERE g.domain IS NULL
      AND g.received_at < now() - %(open_after_s)s * interval '1 second'
    ORDER BY g.received_at
    LIMIT %(limit)s
), dropped AS (
    DELETE FROM {otlp_log} AS g USING old
    WHERE g.key = old.key
    RETURNING 1
)
SELECT (SELECT count(*) FROM old), (SELECT count(*) FROM dropped);

-- name: attempt_names --
-- What a LOG row of these attempts repeats of them: the job type and the execution of the
-- attempt's first row collect wrote that names one (else its final row's type, and no
-- execution); and whether its final row is written.
SELECT t.domain, t.job_id, t.attempt, coalesce(e.job_type, l.job_type), e.execution_id,
       l.domain IS NOT NULL
FROM unnest(%(domain)b::text[], %(job_id)b::text[], %(attempt)b::int[])
     AS t (domain, job_id, attempt)
LEFT JOIN LATERAL (
    SELECT e.job_type, e.execution_id FROM {job_event} AS e
    WHERE e.domain = t.domain AND e.job_id = t.job_id AND e.attempt = t.attempt
      AND e.execution_id IS NOT NULL AND e.derived
    ORDER BY e.id LIMIT 1
) AS e ON true
LEFT JOIN {job_log} AS l
  ON l.domain = t.domain AND l.job_id = t.job_id AND l.attempt = t.attempt AND l.derived;

-- name: count_dropped_lines --
-- Lines the cap dropped after the step they lay in closed (one row each: its attempt's
-- columns, its step key, its time): counted as the processor counts them, each in the
-- dropped-count row dated at the close of the step run it lay in (the latest run of its key
-- begun by its time, else the first; between steps: the attempt's final row), added to that
-- row or in a new one. One statement, whatever the step dropped before.
WITH t AS (
    SELECT * FROM unnest(%(domain)b::text[], %(job_id)b::text[], %(job_type)b::text[],
                         %(attempt)b::int[], %(step_key)b::text[], %(at_us)b::bigint[],
                         %(trace_id)b::text[], %(span_id)b::text[], %(execution)b::text[])
             AS t (domain, job_id, job_type, attempt, step_key, at_us, trace_id, span_id,
                   execution)
), runs AS MATERIALIZED (  -- the steps of those keys, read once for all the lines
    SELECT e.domain, e.job_id, e.attempt, e.step_key, e.created_at, e.ended_at, e.id
    FROM (SELECT DISTINCT domain, job_id, attempt, step_key FROM t) AS k
    JOIN {job_event} AS e
      ON e.domain = k.domain AND e.job_id = k.job_id AND e.attempt = k.attempt
     AND e.type = 'STEP' AND e.step_key = k.step_key AND e.derived
), placed AS (
    SELECT t.domain, t.job_id, t.job_type, t.attempt, t.step_key, t.trace_id, t.span_id,
           t.execution, coalesce(run.ended_at, l.created_at) AS at, count(*)::int AS dropped
    FROM (SELECT *, timestamptz 'epoch' + at_us * interval '1 microsecond' AS at FROM t) AS t
    LEFT JOIN LATERAL (
        SELECT r.ended_at FROM runs AS r
        WHERE r.domain = t.domain AND r.job_id = t.job_id AND r.attempt = t.attempt
          AND r.step_key = t.step_key
        ORDER BY r.created_at <= t.at DESC,
                 CASE WHEN r.created_at <= t.at THEN r.created_at END DESC, r.created_at, r.id
        LIMIT 1
    ) AS run ON true
    LEFT JOIN {job_log} AS l
      ON l.domain = t.domain AND l.job_id = t.job_id AND l.attempt = t.attempt AND l.derived
    GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9
), updated AS (
    UPDATE {job_event} AS e
    SET detail = jsonb_set(e.detail, ARRAY['dropped'],
                           to_jsonb((e.detail ->> 'dropped')::int + p.dropped)),
        message = ((e.detail ->> 'dropped')::int + p.dropped)::text
                  || ' log lines dropped (over the cap of ' || %(cap)s::text || ' per step)'
    FROM placed AS p
    WHERE e.domain = p.domain AND e.job_id = p.job_id AND e.attempt = p.attempt
      AND e.type = 'LOG' AND e.step_key IS NOT DISTINCT FROM p.step_key
      AND e.created_at = p.at AND e.detail ? 'dropped' AND e.derived
    RETURNING e.domain, e.job_id, e.attempt, e.step_key, e.created_at
)
INSERT INTO {job_event} (domain, job_id, job_type, attempt, type, step_key, detail, message,
                         trace_id, span_id, execution_id, created_at, derived)
SELECT p.domain, p.job_id, p.job_type, p.attempt, 'LOG', p.step_key,
       jsonb_build_object('severity', 'WARN', 'dropped', p.dropped,
                          'attributes', jsonb_build_object()),
       p.dropped::text || ' log lines dropped (over the cap of ' || %(cap)s::text || ' per step)',
       p.trace_id, p.span_id, p.execution, p.at, true
FROM placed AS p
WHERE p.at IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM updated AS u
                  WHERE u.domain = p.domain AND u.job_id = p.job_id AND u.attempt = p.attempt
                    AND u.step_key IS NOT DISTINCT FROM p.step_key AND u.created_at = p.at);
