-- Runtime statements of the writer. Each block: a "-- name: NAME --" header, a one-line
-- description, then the SQL. {job_event} and {job_log} are schema-qualified identifiers filled
-- in with psycopg.sql; values are always %(name)s parameters. Rows arrive as parallel arrays
-- (one statement per kind of operation and batch). Every guarded write names the predicate of
-- job_event_one_open_step (type = 'STEP' AND ended_at IS NULL) so the planner uses that index.

-- name: abandon_earlier_attempts --
-- When attempt N starts, close steps still open in attempts before N and settle those attempts.
WITH target AS (
    SELECT *
    FROM unnest(%(domain)b::text[], %(job_id)b::text[], %(attempt)b::int[], %(at_us)b::bigint[])
         AS t (domain, job_id, attempt, at_us)
), closed AS (
    UPDATE {job_event} AS e
    SET step_status = 'FAILED',
        message = 'abandoned',
        ended_at = GREATEST(e.created_at, timestamptz 'epoch' + t.at_us * interval '1 microsecond')
    FROM target AS t
    WHERE e.domain = t.domain AND e.job_id = t.job_id AND e.attempt < t.attempt
      AND e.type = 'STEP' AND e.ended_at IS NULL
    RETURNING e.domain, e.job_id, e.job_type, e.attempt, e.step_key, e.trace_id, e.ended_at
)
INSERT INTO {job_log} (domain, job_id, job_type, attempt, status, reason, detail, trace_id, created_at)
SELECT domain, job_id, job_type, attempt, 'FAILED', 'abandoned',
       jsonb_build_object('step', step_key), trace_id, ended_at
FROM closed
ON CONFLICT (domain, job_id, attempt) DO NOTHING;

-- name: close_foreign_steps --
-- Close an attempt's open step owned by another execution (a stalled re-run or a zombie).
UPDATE {job_event} AS e
SET step_status = 'FAILED',
    message = 'abandoned',
    ended_at = GREATEST(e.created_at, timestamptz 'epoch' + t.at_us * interval '1 microsecond')
FROM unnest(%(domain)b::text[], %(job_id)b::text[], %(attempt)b::int[],
            %(execution_id)b::text[], %(at_us)b::bigint[])
     AS t (domain, job_id, attempt, execution_id, at_us)
WHERE e.domain = t.domain AND e.job_id = t.job_id AND e.attempt = t.attempt
  AND e.type = 'STEP' AND e.ended_at IS NULL
  AND e.execution_id IS DISTINCT FROM t.execution_id;

-- name: write_progress --
-- Replace the detail of an open step this execution owns; a closed row is left alone.
UPDATE {job_event} AS e
SET detail = t.detail::jsonb
FROM unnest(%(domain)b::text[], %(job_id)b::text[], %(attempt)b::int[],
            %(execution_id)b::text[], %(step_key)b::text[], %(detail)b::text[])
     AS t (domain, job_id, attempt, execution_id, step_key, detail)
WHERE e.domain = t.domain AND e.job_id = t.job_id AND e.attempt = t.attempt
  AND e.type = 'STEP' AND e.ended_at IS NULL
  AND e.execution_id = t.execution_id AND e.step_key = t.step_key;

-- name: close_steps --
-- Close an open step this execution owns; guarded, so a close that lost a race changes nothing.
UPDATE {job_event} AS e
SET step_status = t.status,
    ended_at = GREATEST(e.created_at, timestamptz 'epoch' + t.ended_us * interval '1 microsecond'),
    detail = COALESCE(t.detail::jsonb, e.detail),
    message = t.message
FROM unnest(%(domain)b::text[], %(job_id)b::text[], %(attempt)b::int[],
            %(execution_id)b::text[], %(step_key)b::text[], %(status)b::text[],
            %(detail)b::text[], %(message)b::text[], %(ended_us)b::bigint[])
     AS t (domain, job_id, attempt, execution_id, step_key, status, detail, message, ended_us)
WHERE e.domain = t.domain AND e.job_id = t.job_id AND e.attempt = t.attempt
  AND e.type = 'STEP' AND e.ended_at IS NULL
  AND e.execution_id = t.execution_id AND e.step_key = t.step_key;

-- name: insert_events --
-- New job_event rows in command order; a second open step for an attempt is skipped, not an error.
-- Rows arrive as one JSON array of arrays, fields in batch.EventRow order (one C call to encode
-- instead of a Python loop per column); each r->>N below is aliased with its field's name.
INSERT INTO {job_event} (domain, job_id, job_type, attempt, type, step_key, step_status, detail,
                         message, trace_id, span_id, execution_id, created_at, ended_at)
SELECT domain, job_id, job_type, attempt, type, step_key, step_status, detail::jsonb,
       message, trace_id, span_id, execution_id,
       timestamptz 'epoch' + created_us * interval '1 microsecond',
       timestamptz 'epoch' + ended_us * interval '1 microsecond'
FROM jsonb_array_elements(%(rows)s::jsonb) WITH ORDINALITY AS t (r, n),
     LATERAL (SELECT r->>0 AS domain, r->>1 AS job_id, r->>2 AS job_type,
                     (r->>3)::int AS attempt, r->>4 AS type, r->>5 AS step_key,
                     r->>6 AS step_status, r->>7 AS detail, r->>8 AS message,
                     r->>9 AS trace_id, r->>10 AS span_id, r->>11 AS execution_id,
                     (r->>12)::bigint AS created_us, (r->>13)::bigint AS ended_us) AS row
ORDER BY n
ON CONFLICT (domain, job_id, attempt) WHERE type = 'STEP' AND ended_at IS NULL DO NOTHING;

-- name: insert_job_logs --
-- Final rows of finished attempts; the first final state of an attempt wins.
-- Rows arrive as one JSON array of arrays, fields in batch.JobLogRow order.
INSERT INTO {job_log} (domain, job_id, job_type, attempt, status, reason, detail, trace_id,
                       created_at)
SELECT domain, job_id, job_type, attempt, status, reason, detail::jsonb, trace_id,
       timestamptz 'epoch' + created_us * interval '1 microsecond'
FROM jsonb_array_elements(%(rows)s::jsonb) WITH ORDINALITY AS t (r, n),
     LATERAL (SELECT r->>0 AS domain, r->>1 AS job_id, r->>2 AS job_type,
                     (r->>3)::int AS attempt, r->>4 AS status, r->>5 AS reason,
                     r->>6 AS detail, r->>7 AS trace_id,
                     (r->>8)::bigint AS created_us) AS row
ORDER BY n
ON CONFLICT (domain, job_id, attempt) DO NOTHING;

-- name: refresh_heartbeats --
-- Mark the open steps this process owns as alive: one statement per interval, not per step.
UPDATE {job_event} AS e
SET heartbeat_at = now()
FROM unnest(%(domain)b::text[], %(job_id)b::text[], %(attempt)b::int[],
            %(execution_id)b::text[])
     AS t (domain, job_id, attempt, execution_id)
WHERE e.domain = t.domain AND e.job_id = t.job_id AND e.attempt = t.attempt
  AND e.type = 'STEP' AND e.ended_at IS NULL
  AND e.execution_id = t.execution_id;
