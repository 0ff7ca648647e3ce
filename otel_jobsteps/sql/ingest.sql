-- Statements of the OTLP receiver (otel_jobsteps.ingest.staging). Same conventions as
-- queries.sql: {relation} names are schema-qualified identifiers, values %(name)s parameters.

-- name: lock_traces --
-- Register the request's traces and lock their rows, in the (sorted) order given: two receivers
-- touching the same traces wait for each other instead of deriving the same rows twice.
INSERT INTO {otlp_trace} AS o (trace_id)
SELECT unnest(%(trace_id)b::text[])
ON CONFLICT (trace_id) DO UPDATE SET touched_at = now()
RETURNING o.trace_id, o.settled, o.span_count, o.written;

-- name: stage_spans --
-- Keep the request's spans; a span delivered before is skipped. Returns the ones that are new.
INSERT INTO {otlp_span} (trace_id, span_id, phase, body)
SELECT * FROM unnest(%(trace_id)b::text[], %(span_id)b::bigint[], %(phase)b::smallint[],
                     %(body)b::bytea[])
ON CONFLICT (trace_id, span_id, phase) DO NOTHING
RETURNING trace_id, span_id, phase;

-- name: staged_spans --
-- Every span received so far of these traces (to derive their rows from all of them).
SELECT trace_id, span_id, phase, body FROM {otlp_span} WHERE trace_id = ANY(%(trace_id)b::text[]);

-- name: staging_columns --
-- At startup: the staging tables exist with the newest columns (no row is read).
SELECT s.body, t.whole FROM {otlp_span} AS s, {otlp_trace} AS t LIMIT 0;

-- name: missing_rights --
-- At startup: the rights collect needs that this role lacks (it deletes what an earlier
-- derivation wrote, and settled spans). has_table_privilege with several rights asks for any.
SELECT t.name, r.name
FROM unnest(ARRAY['job_event', 'job_log', 'otlp_trace', 'otlp_span']) AS t (name),
     unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE']) AS r (name)
WHERE NOT has_table_privilege(format('%%I.%%I', %(schema)s::text, t.name), r.name)
ORDER BY 1, 2;

-- name: note_traces --
-- After a derivation: how many spans each trace has, which attempts its rows are in, and
-- whether it is whole (NULL: its derivation failed, as it was).
UPDATE {otlp_trace} AS o
SET span_count = o.span_count + t.added, written = t.written::jsonb,
    whole = COALESCE(t.whole, o.whole)
FROM unnest(%(trace_id)b::text[], %(added)b::int[], %(written)b::text[], %(whole)b::bool[])
     AS t (trace_id, added, written, whole)
WHERE o.trace_id = t.trace_id;

-- name: forget_derived_rows --
-- Remove what an earlier derivation of these traces wrote, before writing the new derivation.
-- Returns what of it the metrics counted then: its closed steps, then its final rows.
WITH target AS (
    SELECT * FROM unnest(%(domain)b::text[], %(job_id)b::text[], %(attempt)b::int[],
                         %(trace_id)b::text[]) AS t (domain, job_id, attempt, trace_id)
), events AS (
    DELETE FROM {job_event} AS e USING target AS t
    WHERE e.domain = t.domain AND e.job_id = t.job_id AND e.attempt = t.attempt
      AND e.trace_id = t.trace_id
    RETURNING e.trace_id, e.span_id, e.type, e.ended_at
), logs AS (
    DELETE FROM {job_log} AS l USING target AS t
    WHERE l.domain = t.domain AND l.job_id = t.job_id AND l.attempt = t.attempt
      AND l.trace_id = t.trace_id
    RETURNING l.domain, l.job_id, l.attempt
)
SELECT trace_id, span_id, NULL AS domain, NULL AS job_id, NULL::int AS attempt FROM events
WHERE type = 'STEP' AND ended_at IS NOT NULL
UNION ALL
SELECT NULL, NULL, domain, job_id, attempt FROM logs;

-- name: forget_abandoned_logs --
-- A later attempt's start wrote FAILED abandoned for an attempt whose end is only arriving now,
-- and is dated after it: in span order the attempt ended first, so its own final row replaces it
-- (returned: the metrics counted that attempt once already).
DELETE FROM {job_log} AS l
USING unnest(%(domain)b::text[], %(job_id)b::text[], %(attempt)b::int[], %(end_us)b::bigint[])
      AS t (domain, job_id, attempt, end_us)
WHERE l.domain = t.domain AND l.job_id = t.job_id AND l.attempt = t.attempt
  AND l.reason = 'abandoned'
  AND l.created_at >= timestamptz 'epoch' + t.end_us * interval '1 microsecond'
RETURNING l.domain, l.job_id, l.attempt;

-- name: settle_traces --
-- Traces untouched for the settle time: drop their spans, keep a tombstone so late copies are
-- ignored. A trace that is not whole (a span waits for its end or for its job span: a long
-- step, a job still running) waits for the open settle time instead; each kind is read by its
-- own index, oldest first. Returns, per settled trace, its span count and whether it ever had
-- a job's rows.
WITH due AS (
    (SELECT trace_id FROM {otlp_trace}
     WHERE NOT settled AND whole AND touched_at < now() - %(after_s)s * interval '1 second'
     ORDER BY touched_at
     LIMIT %(limit)s)
    UNION ALL
    (SELECT trace_id FROM {otlp_trace}
     WHERE NOT settled AND NOT whole
       AND touched_at < now() - %(open_after_s)s * interval '1 second'
     ORDER BY touched_at
     LIMIT %(limit)s)
), locked AS (
    -- The conditions again on the locked row: one a request touched meanwhile drops out.
    SELECT o.trace_id FROM {otlp_trace} AS o JOIN due USING (trace_id)
    WHERE NOT o.settled AND o.touched_at < now() - %(after_s)s * interval '1 second'
      AND (o.whole OR o.touched_at < now() - %(open_after_s)s * interval '1 second')
    ORDER BY o.touched_at
    LIMIT %(limit)s
    FOR UPDATE OF o SKIP LOCKED
), dropped AS (
    DELETE FROM {otlp_span} AS s USING locked WHERE s.trace_id = locked.trace_id
)
UPDATE {otlp_trace} AS o SET settled = true
FROM locked WHERE o.trace_id = locked.trace_id AND NOT o.settled
RETURNING o.span_count, o.written IS NOT NULL;
