-- Runtime statements of the writer. Each block: a "-- name: NAME --" header, a one-line
-- description, then the SQL. {job_event} and {job_log} are schema-qualified identifiers filled
-- in with psycopg.sql; values are always %(name)s parameters. Rows arrive as parallel arrays
-- (one statement per kind of operation and batch).
--
-- Guarded writes find their row from the input: per input row, a LATERAL probe of
-- job_event_one_open_step (its predicate, type = 'STEP' AND ended_at IS NULL, named in full),
-- then the row by primary key, guarded again by ended_at IS NULL (re-checked on a row a
-- concurrent writer changed: a close that lost the race must not overwrite the winner). The
-- probe's LIMIT keeps it a per-row subquery, and the updated row names only ended_at IS NULL,
-- so the open-step index can serve the probe alone: with the open steps estimated at a handful
-- of rows (statistics taken on an empty table, no autovacuum), a generic plan that could scan
-- that index for the updated row would walk every open step once per input row (issue 15).
-- In close_foreign_steps, write_progress and close_steps the probes' results travel as one row
-- of arrays sorted by id (the input CTE), and the update reads its rows by e.id = ANY
-- (input.ids), the primary key's index: with no join between the input rows and job_event, no
-- plan can hash a sequential scan of job_event against them (a custom plan of a large batch
-- did, issue 13), and none can loop over the input once per row. Each updated row finds its
-- own input by binary search: width_bucket(e.id, input.ids) is the position of e.id in the
-- sorted ids. A batch may name one attempt twice (two runs of an attempt under one execution
-- id): the guard is applied in the probe and DISTINCT ON keeps one input per open step (the
-- one that would have won had they run one after the other), so the ids are unique and every
-- array stays aligned with them.
-- ONLY: an attempt with an open step or without a final row is never moved out of job_event
-- (partitioned layout), so the writer never reads the archive's children.
-- Times: a row never ends before it starts (GREATEST(created_at, ...)), on every path.
-- Closes and final rows return the rows they changed: metrics count those only (metrics.py),
-- with durations through {job_duration} (a far time stored by hand must not fail the batch).
-- New rows carry %(derived)s: true when collect writes them (it may delete and derive them
-- again), NULL from the processor (migration 0014).

-- name: abandon_earlier_attempts --
-- When attempt N starts, settle every attempt before N that has no final row, open step or not:
-- its open step is closed FAILED abandoned, and it gets a FAILED abandoned job_log row dated no
-- earlier than its last row. Open steps of earlier attempts that have a final row are closed too.
WITH earlier AS (
    SELECT t.domain, t.job_id, a.attempt, a.job_type, a.step_key, a.trace_id, a.last_at, timestamptz 'epoch' + t.at_us * interval '1 microsecond' AS next_start,
           -- a scalar probe per attempt (NOT EXISTS could become a hash of all of job_log)
           (SELECT l.id FROM {job_log} AS l
            WHERE l.domain = t.domain AND l.job_id = t.job_id AND l.attempt = a.attempt
            LIMIT 1) IS NULL AS unsettled
    FROM unnest(%(domain)b::text[], %(job_id)b::text[], %(attempt)b::int[], %(at_us)b::bigint[])
         AS t (domain, job_id, attempt, at_us),
         -- grouped, so a per-input-row subquery over job_event_job: the earlier attempts' rows
         LATERAL (SELECT e.attempt,
                         (array_agg(e.job_type ORDER BY e.id DESC)
                              FILTER (WHERE e.job_type IS NOT NULL))[1] AS job_type,
                         (array_agg(e.step_key ORDER BY e.created_at DESC, e.id DESC)
                              FILTER (WHERE e.type = 'STEP' AND e.step_status <> 'SKIPPED'))[1]
                             AS step_key,
                         (array_agg(e.trace_id ORDER BY e.id DESC)
                              FILTER (WHERE e.trace_id IS NOT NULL))[1] AS trace_id,
                         max(GREATEST(e.created_at, e.ended_at)) AS last_at
                  FROM ONLY {job_event} AS e
                  WHERE e.domain = t.domain AND e.job_id = t.job_id AND e.attempt < t.attempt
                  GROUP BY e.attempt) AS a
), closed AS (
    UPDATE ONLY {job_event} AS e
    SET step_status = 'FAILED',
        message = 'abandoned',
        ended_at = GREATEST(e.created_at, earlier.next_start)
    FROM earlier,
         LATERAL (SELECT o.id FROM ONLY {job_event} AS o
                  WHERE o.domain = earlier.domain AND o.job_id = earlier.job_id
                    AND o.attempt = earlier.attempt
                    AND o.type = 'STEP' AND o.ended_at IS NULL
                  LIMIT 1) AS open
    WHERE e.id = open.id AND e.ended_at IS NULL
    RETURNING e.trace_id, e.span_id, e.domain, e.job_type, e.step_key,
              extract(epoch FROM {job_duration}(e.created_at, e.ended_at))::float8 AS seconds
), settled AS (
    INSERT INTO {job_log} (domain, job_id, job_type, attempt, status, reason, detail, trace_id,
                           created_at, derived)
    SELECT domain, job_id, job_type, attempt, 'FAILED', 'abandoned',
           jsonb_build_object('step', step_key), trace_id, GREATEST(last_at, next_start),
           %(derived)s::boolean
    FROM earlier
    WHERE unsettled
    ON CONFLICT (domain, job_id, attempt) DO NOTHING
    RETURNING domain, job_id, attempt, job_type
)
-- What changed, for the metrics: closed steps (attempt NULL), then final rows (seconds NULL).
SELECT trace_id, span_id, domain, NULL AS job_id, job_type, step_key, NULL::int AS attempt,
       seconds
FROM closed
UNION ALL
SELECT NULL, NULL, domain, job_id, job_type, NULL, attempt, NULL FROM settled;

-- name: close_foreign_steps --
-- Close an attempt's open step owned by another execution (a stalled re-run or a zombie).
WITH chosen AS (
    SELECT DISTINCT ON (open.id) open.id, t.execution_id, t.at_us
    FROM unnest(%(domain)b::text[], %(job_id)b::text[], %(attempt)b::int[],
                %(execution_id)b::text[], %(at_us)b::bigint[]) WITH ORDINALITY
         AS t (domain, job_id, attempt, execution_id, at_us, ord),
         LATERAL (SELECT o.id FROM ONLY {job_event} AS o
                  WHERE o.domain = t.domain AND o.job_id = t.job_id AND o.attempt = t.attempt
                    AND o.type = 'STEP' AND o.ended_at IS NULL
                    AND o.execution_id IS DISTINCT FROM t.execution_id
                  LIMIT 1) AS open
    ORDER BY open.id, t.ord
), input AS (
    SELECT array_agg(id ORDER BY id) AS ids,
           array_agg(execution_id ORDER BY id) AS execution_ids,
           array_agg(at_us ORDER BY id) AS at_us
    FROM chosen
)
UPDATE ONLY {job_event} AS e
SET step_status = 'FAILED',
    message = 'abandoned',
    ended_at = GREATEST(e.created_at, timestamptz 'epoch'
                        + input.at_us[width_bucket(e.id, input.ids)] * interval '1 microsecond')
FROM input
WHERE e.id = ANY (input.ids) AND e.ended_at IS NULL
  AND e.execution_id IS DISTINCT FROM input.execution_ids[width_bucket(e.id, input.ids)]
RETURNING e.trace_id, e.span_id, e.domain, e.job_type, e.step_key, e.step_status,
          extract(epoch FROM {job_duration}(e.created_at, e.ended_at))::float8 AS seconds;

-- name: write_progress --
-- Replace the detail of an open step this execution owns; a closed row is left alone. A
-- progress write is a sign of life too: it moves heartbeat_at once the step's last sign of life
-- is 15 s old. heartbeat_at is in job_event_open_gauges, so only those writes leave HOT; the
-- others keep it as it is (an unchanged value: a HOT update).
-- Of two inputs for one step, the later wins (as if written one after the other).
WITH chosen AS (
    SELECT DISTINCT ON (open.id) open.id, t.execution_id, t.step_key, t.detail
    FROM unnest(%(domain)b::text[], %(job_id)b::text[], %(attempt)b::int[],
                %(execution_id)b::text[], %(step_key)b::text[], %(detail)b::text[])
         WITH ORDINALITY AS t (domain, job_id, attempt, execution_id, step_key, detail, ord),
         LATERAL (SELECT o.id FROM ONLY {job_event} AS o
                  WHERE o.domain = t.domain AND o.job_id = t.job_id AND o.attempt = t.attempt
                    AND o.type = 'STEP' AND o.ended_at IS NULL
                    AND o.execution_id = t.execution_id AND o.step_key = t.step_key
                  LIMIT 1) AS open
    ORDER BY open.id, t.ord DESC
), input AS (
    SELECT array_agg(id ORDER BY id) AS ids,
           array_agg(execution_id ORDER BY id) AS execution_ids,
           array_agg(step_key ORDER BY id) AS step_keys,
           array_agg(detail ORDER BY id) AS details
    FROM chosen
)
UPDATE ONLY {job_event} AS e
SET detail = input.details[width_bucket(e.id, input.ids)]::jsonb,
    heartbeat_at = CASE WHEN GREATEST(e.created_at, e.heartbeat_at) > now() - interval '15 s'
                        THEN e.heartbeat_at ELSE now() END
FROM input
WHERE e.id = ANY (input.ids) AND e.ended_at IS NULL
  AND e.execution_id = input.execution_ids[width_bucket(e.id, input.ids)]
  AND e.step_key = input.step_keys[width_bucket(e.id, input.ids)];

-- name: close_steps --
-- Close an open step this execution owns (step_key NULL: whichever it is); guarded, so a close
-- that lost a race changes nothing. Of two inputs for one step, the first whose guard holds
-- wins (as if written one after the other).
WITH chosen AS (
    SELECT DISTINCT ON (open.id) open.id, t.execution_id, t.step_key, t.status, t.detail,
           t.message, t.ended_us
    FROM unnest(%(domain)b::text[], %(job_id)b::text[], %(attempt)b::int[],
                %(execution_id)b::text[], %(step_key)b::text[], %(status)b::text[],
                %(detail)b::text[], %(message)b::text[], %(ended_us)b::bigint[]) WITH ORDINALITY
         AS t (domain, job_id, attempt, execution_id, step_key, status, detail, message,
               ended_us, ord),
         LATERAL (SELECT o.id FROM ONLY {job_event} AS o
                  WHERE o.domain = t.domain AND o.job_id = t.job_id AND o.attempt = t.attempt
                    AND o.type = 'STEP' AND o.ended_at IS NULL
                    AND o.execution_id = t.execution_id
                    AND o.step_key = COALESCE(t.step_key, o.step_key)
                  LIMIT 1) AS open
    ORDER BY open.id, t.ord
), input AS (
    SELECT array_agg(id ORDER BY id) AS ids,
           array_agg(execution_id ORDER BY id) AS execution_ids,
           array_agg(step_key ORDER BY id) AS step_keys,
           array_agg(status ORDER BY id) AS statuses,
           array_agg(detail ORDER BY id) AS details,
           array_agg(message ORDER BY id) AS messages,
           array_agg(ended_us ORDER BY id) AS ended_us
    FROM chosen
)
UPDATE ONLY {job_event} AS e
SET step_status = input.statuses[width_bucket(e.id, input.ids)],
    ended_at = GREATEST(e.created_at, timestamptz 'epoch'
                        + input.ended_us[width_bucket(e.id, input.ids)] * interval '1 microsecond'),
    detail = COALESCE(input.details[width_bucket(e.id, input.ids)]::jsonb, e.detail),
    message = input.messages[width_bucket(e.id, input.ids)]
FROM input
WHERE e.id = ANY (input.ids) AND e.ended_at IS NULL
  AND e.execution_id = input.execution_ids[width_bucket(e.id, input.ids)]
  AND e.step_key = COALESCE(input.step_keys[width_bucket(e.id, input.ids)], e.step_key)
RETURNING e.trace_id, e.span_id, e.domain, e.job_type, e.step_key, e.step_status,
          extract(epoch FROM {job_duration}(e.created_at, e.ended_at))::float8 AS seconds;

-- name: fail_sibling_closed_steps --
-- Overlapping steps: a row closed COMPLETED when a sibling step started (its end is that
-- sibling's start: another step row of the attempt and execution, not skipped, began then)
-- whose own span then ended in error becomes FAILED with that error, dated at its own end.
-- A row its own end closed, or one closed FAILED since (abandoned), is left alone.
UPDATE ONLY {job_event} AS e
SET step_status = 'FAILED',
    message = t.message,
    ended_at = GREATEST(e.created_at, timestamptz 'epoch' + t.ended_us * interval '1 microsecond')
FROM unnest(%(domain)b::text[], %(job_id)b::text[], %(attempt)b::int[],
            %(execution_id)b::text[], %(span_id)b::text[], %(message)b::text[],
            %(ended_us)b::bigint[])
     AS t (domain, job_id, attempt, execution_id, span_id, message, ended_us)
WHERE e.domain = t.domain AND e.job_id = t.job_id AND e.attempt = t.attempt
  AND e.type = 'STEP' AND e.span_id = t.span_id AND e.execution_id = t.execution_id
  AND e.step_status = 'COMPLETED' AND e.ended_at IS NOT NULL
  AND EXISTS (SELECT FROM ONLY {job_event} AS s
              WHERE s.domain = e.domain AND s.job_id = e.job_id AND s.attempt = e.attempt
                AND s.type = 'STEP' AND s.id <> e.id AND s.created_at = e.ended_at
                AND s.execution_id = e.execution_id AND s.step_status <> 'SKIPPED');

-- name: insert_events --
-- New job_event rows in command order; a second open step for an attempt is skipped, not an error.
-- Rows arrive as parallel arrays, one per field of batch.EventRow, the detail as JSON text.
INSERT INTO {job_event} (domain, job_id, job_type, attempt, type, step_key, step_status, detail,
                         message, trace_id, span_id, execution_id, created_at, ended_at, derived)
SELECT domain, job_id, job_type, attempt, type, step_key, step_status, detail::jsonb,
       message, trace_id, span_id, execution_id,
       timestamptz 'epoch' + created_us * interval '1 microsecond',
       timestamptz 'epoch' + ended_us * interval '1 microsecond', %(derived)s::boolean
FROM unnest(%(domain)b::text[], %(job_id)b::text[], %(job_type)b::text[], %(attempt)b::int[],
            %(type)b::text[], %(step_key)b::text[], %(step_status)b::text[], %(detail)b::text[],
            %(message)b::text[], %(trace_id)b::text[], %(span_id)b::text[],
            %(execution_id)b::text[], %(created_us)b::bigint[], %(ended_us)b::bigint[])
     WITH ORDINALITY
     AS t (domain, job_id, job_type, attempt, type, step_key, step_status, detail, message,
           trace_id, span_id, execution_id, created_us, ended_us, n)
ORDER BY n
ON CONFLICT (domain, job_id, attempt) WHERE type = 'STEP' AND ended_at IS NULL DO NOTHING;

-- name: copy_events --
-- New job_event rows none of which an ON CONFLICT could skip (events, and steps already closed):
-- insert_events' rows without its conflict check, COPYed (binary) in command order. The store
-- sends each field in its column type's binary form, times as the statements compute them.
COPY {job_event} (domain, job_id, job_type, attempt, type, step_key, step_status, message,
                  trace_id, span_id, execution_id, detail, created_at, ended_at, derived)
FROM STDIN (FORMAT BINARY);

-- name: insert_job_logs --
-- Final rows of finished attempts; the first final state of an attempt wins.
-- Rows arrive as parallel arrays, one per field of batch.JobLogRow, the detail as JSON text.
INSERT INTO {job_log} (domain, job_id, job_type, attempt, status, reason, detail, trace_id,
                       created_at, derived, service_name, service_version, host_name,
                       service_instance_id)
SELECT domain, job_id, job_type, attempt, status, reason, detail::jsonb, trace_id,
       timestamptz 'epoch' + created_us * interval '1 microsecond', %(derived)s::boolean,
       service_name, service_version, host_name, service_instance_id
FROM unnest(%(domain)b::text[], %(job_id)b::text[], %(job_type)b::text[], %(attempt)b::int[],
            %(status)b::text[], %(reason)b::text[], %(detail)b::text[], %(trace_id)b::text[],
            %(created_us)b::bigint[], %(service_name)b::text[], %(service_version)b::text[],
            %(host_name)b::text[], %(service_instance_id)b::text[]) WITH ORDINALITY
     AS t (domain, job_id, job_type, attempt, status, reason, detail, trace_id, created_us,
           service_name, service_version, host_name, service_instance_id, n)
ORDER BY n
ON CONFLICT (domain, job_id, attempt) DO NOTHING
RETURNING domain, job_id, attempt;

-- name: refresh_heartbeats --
-- Mark the attempts this process runs as alive, on the latest step row this execution wrote
-- (open, or the last one closed while the attempt goes on between steps): one statement per
-- interval, not per attempt. sweep reads it for open steps and for attempts between steps.
UPDATE ONLY {job_event} AS e
SET heartbeat_at = now()
FROM unnest(%(domain)b::text[], %(job_id)b::text[], %(attempt)b::int[],
            %(execution_id)b::text[])
     AS t (domain, job_id, attempt, execution_id),
     LATERAL (SELECT o.id FROM ONLY {job_event} AS o
              WHERE o.domain = t.domain AND o.job_id = t.job_id AND o.attempt = t.attempt
                AND o.type = 'STEP' AND o.execution_id = t.execution_id
              ORDER BY o.id DESC
              LIMIT 1) AS latest
WHERE e.id = latest.id;
