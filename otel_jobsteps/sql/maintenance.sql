-- Maintenance statements of sweep and prune. Same block format as queries.sql. An open step's
-- last sign of life is GREATEST(created_at, heartbeat_at): heartbeat_at is NULL until the
-- owning writer first refreshes it. Every statement that closes or deletes names the predicate
-- of job_event_one_open_step (type = 'STEP' AND ended_at IS NULL) so that index finds them.

-- name: sweep_silent_steps --
-- Close open steps silent since before the cutoff as FAILED abandoned, ended at their last sign
-- of life, and settle their attempts (the first final row wins). Rows a live writer holds are
-- skipped, and the cutoff is checked again on the locked row, so a heartbeat that lands in
-- between keeps its step open. Then settle attempts whose writer went silent between steps (no
-- open step, no final row, every step row silent since the cutoff): their latest step row is
-- locked and checked again the same way, and the FAILED abandoned job_log row is dated at their
-- last sign of life. On an attempt collect derives, the final row is collect's too (derived):
-- a verdict standing in for spans that have not arrived, replaced when they do. Finding those reads the step rows of attempts without a final row, in one
-- pass over job_event (no index tells an attempt between steps from a finished one); a dry run
-- is this statement rolled back.
WITH silent AS (
    SELECT id
    FROM {job_event}
    WHERE type = 'STEP' AND ended_at IS NULL
      AND GREATEST(created_at, heartbeat_at) < now() - %(older_than)s::interval
    FOR UPDATE SKIP LOCKED
), closed AS (
    UPDATE {job_event} AS e
    SET step_status = 'FAILED',
        message = 'abandoned',
        ended_at = GREATEST(e.created_at, e.heartbeat_at)
    FROM silent
    WHERE e.id = silent.id
      AND e.type = 'STEP' AND e.ended_at IS NULL
      AND GREATEST(e.created_at, e.heartbeat_at) < now() - %(older_than)s::interval
    RETURNING e.id, e.domain, e.job_id, e.job_type, e.attempt, e.step_key, e.execution_id,
              e.trace_id, e.created_at, e.ended_at, e.derived
), between_steps AS (
    SELECT e.domain, e.job_id, e.attempt,
           (array_agg(e.step_key ORDER BY e.created_at DESC, e.id DESC))[1] AS step_key,
           (array_agg(e.execution_id ORDER BY e.id DESC))[1] AS execution_id,
           (array_agg(e.job_type ORDER BY e.id DESC)
                FILTER (WHERE e.job_type IS NOT NULL))[1] AS job_type,
           (array_agg(e.trace_id ORDER BY e.id DESC)
                FILTER (WHERE e.trace_id IS NOT NULL))[1] AS trace_id,
           max(e.created_at) AS started_at,
           max(GREATEST(e.created_at, e.ended_at, e.heartbeat_at)) AS last_seen_at,
           max(e.id) AS last_id,
           bool_or(e.derived) AS derived
    FROM ONLY {job_event} AS e  -- an attempt without a final row is never moved to the archive
    WHERE e.type = 'STEP'
      AND NOT EXISTS (SELECT 1 FROM {job_log} AS l
                      WHERE l.domain = e.domain AND l.job_id = e.job_id
                        AND l.attempt = e.attempt)
    GROUP BY e.domain, e.job_id, e.attempt
    HAVING bool_and(e.ended_at IS NOT NULL)
       AND max(GREATEST(e.created_at, e.ended_at, e.heartbeat_at))
           < now() - %(older_than)s::interval
), quiet AS (
    SELECT a.*
    FROM between_steps AS a
    JOIN ONLY {job_event} AS e ON e.id = a.last_id
    WHERE GREATEST(e.created_at, e.ended_at, e.heartbeat_at) < now() - %(older_than)s::interval
    FOR UPDATE OF e SKIP LOCKED
), settling AS (
    SELECT domain, job_id, job_type, attempt, step_key, trace_id, ended_at AS settled_at, derived
    FROM closed
    UNION ALL
    SELECT domain, job_id, job_type, attempt, step_key, trace_id, last_seen_at, derived
    FROM quiet
), logged AS (
    INSERT INTO {job_log} (domain, job_id, job_type, attempt, status, reason, detail, trace_id,
                           created_at, derived)
    SELECT domain, job_id, job_type, attempt, 'FAILED', 'abandoned',
           jsonb_build_object('step', step_key), trace_id, settled_at, derived
    FROM settling
    ON CONFLICT (domain, job_id, attempt) DO NOTHING
    RETURNING domain, job_id, attempt
)
SELECT c.domain, c.job_id, c.attempt, c.step_key, c.execution_id,
       c.created_at AS started_at,
       c.ended_at AS last_seen_at,
       g.attempt IS NOT NULL AS writes_job_log,
       true AS closes_step
FROM closed AS c
LEFT JOIN logged AS g USING (domain, job_id, attempt)
UNION ALL
SELECT q.domain, q.job_id, q.attempt, q.step_key, q.execution_id, q.started_at,
       q.last_seen_at, g.attempt IS NOT NULL, false
FROM quiet AS q
LEFT JOIN logged AS g USING (domain, job_id, attempt)
ORDER BY last_seen_at, domain, job_id, attempt;

-- name: prunable_rows --
-- What prune would delete, counted read-only (a dry run works on a replica or with SELECT
-- only), batch_size job_log rows past the cutoff at a time in (created_at, id) order after the
-- previous batch's last row (job_log_ended_attempt, index only), each with its attempt's rows
-- in one pass through job_event_job, which also tells whether the attempt has an open step.
SELECT count(*) FILTER (WHERE e.open_steps = 0) AS job_logs,
       COALESCE(sum(e.rows) FILTER (WHERE e.open_steps = 0), 0)::bigint AS job_events,
       count(*) AS scanned,
       (array_agg(l.created_at ORDER BY l.created_at DESC, l.id DESC))[1] AS last_created_at,
       (array_agg(l.id ORDER BY l.created_at DESC, l.id DESC))[1] AS last_id
FROM (
    SELECT p.id, p.created_at, p.domain, p.job_id, p.attempt
    FROM {job_log} AS p
    WHERE p.created_at < now() - %(older_than)s::interval
      AND (p.created_at, p.id) > (%(after_created_at)s::timestamptz, %(after_id)s::bigint)
    ORDER BY p.created_at, p.id
    LIMIT %(batch_size)s
) AS l
CROSS JOIN LATERAL (
    SELECT count(*) AS rows,
           count(*) FILTER (WHERE e.type = 'STEP' AND e.ended_at IS NULL) AS open_steps
    FROM {job_event} AS e
    WHERE (e.domain, e.job_id, e.attempt) = (l.domain, l.job_id, l.attempt)
) AS e;

-- name: prune_batch --
-- Delete up to batch_size job_log rows past the cutoff, oldest first, with their attempts'
-- job_event rows. An attempt with an open step is skipped whole, and an open step is never
-- deleted even if one appeared since (checked again in the DELETE). So is an attempt collect
-- has not settled: it may derive that attempt's rows again (deleting and writing them). The batch is read through
-- job_log_ended_attempt and handed on as arrays: a generic plan, which cannot know batch_size,
-- then still deletes by primary key and, per attempt, through job_event_job.
WITH batch AS (
    SELECT array_agg(old.id) AS ids,
           array_agg(old.domain) AS domains,
           array_agg(old.job_id) AS job_ids,
           array_agg(old.attempt) AS attempts
    FROM (
        SELECT l.id, l.domain, l.job_id, l.attempt
        FROM {job_log} AS l
        WHERE l.created_at < now() - %(older_than)s::interval
          AND NOT EXISTS (SELECT 1 FROM {job_event} AS o
                          WHERE o.domain = l.domain AND o.job_id = l.job_id
                            AND o.attempt = l.attempt
                            AND o.type = 'STEP' AND o.ended_at IS NULL)
          AND NOT EXISTS (SELECT 1 FROM {otlp_attempt} AS c
                          WHERE c.domain = l.domain AND c.job_id = l.job_id
                            AND c.attempt = l.attempt AND NOT c.settled)
        ORDER BY l.created_at, l.id
        LIMIT %(batch_size)s
        FOR UPDATE SKIP LOCKED
    ) AS old
), deleted_event AS (
    DELETE FROM {job_event} AS e
    USING batch,
          unnest(batch.domains, batch.job_ids, batch.attempts) AS a (domain, job_id, attempt)
    WHERE e.domain = a.domain AND e.job_id = a.job_id AND e.attempt = a.attempt
      AND NOT (e.type = 'STEP' AND e.ended_at IS NULL)
    RETURNING e.id
), deleted_log AS (
    DELETE FROM {job_log} AS l
    USING batch
    WHERE l.id = ANY(batch.ids)
    RETURNING l.id
)
SELECT (SELECT count(*) FROM deleted_log) AS job_logs,
       (SELECT count(*) FROM deleted_event) AS job_events;

-- name: prune_settled_attempts --
-- Forget up to batch_size OTLP attempts settled before the cutoff, with the bodiless rows their
-- spans and log records keep: collect keeps them to drop late copies, and nothing is delivered
-- that late.
WITH old AS (
    SELECT domain, job_id, attempt FROM {otlp_attempt}
    WHERE settled AND touched_at < now() - %(older_than)s::interval
    ORDER BY touched_at
    LIMIT %(batch_size)s
    FOR UPDATE SKIP LOCKED
), spans AS (
    DELETE FROM {otlp_span} AS s USING old
    WHERE s.domain = old.domain AND s.job_id = old.job_id AND s.attempt = old.attempt
), records AS (
    DELETE FROM {otlp_log} AS g USING old
    WHERE g.domain = old.domain AND g.job_id = old.job_id AND g.attempt = old.attempt
)
DELETE FROM {otlp_attempt} AS a USING old
WHERE a.domain = old.domain AND a.job_id = old.job_id AND a.attempt = old.attempt;

-- name: prune_idle_otlp_jobs --
-- Forget up to batch_size job locks untouched since before the cutoff with no attempt left.
WITH old AS (
    SELECT domain, job_id FROM {otlp_job} AS j
    WHERE touched_at < now() - %(older_than)s::interval
      AND NOT EXISTS (SELECT 1 FROM {otlp_attempt} AS a
                      WHERE a.domain = j.domain AND a.job_id = j.job_id)
    ORDER BY touched_at
    LIMIT %(batch_size)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM {otlp_job} AS j USING old WHERE j.domain = old.domain AND j.job_id = old.job_id;

-- name: prune_idle_otlp_traces --
-- Forget up to batch_size trace rows untouched since before the cutoff with no span left.
WITH old AS (
    SELECT trace_id FROM {otlp_trace} AS o
    WHERE touched_at < now() - %(older_than)s::interval
      AND NOT EXISTS (SELECT 1 FROM {otlp_span} AS s WHERE s.trace_id = o.trace_id)
    ORDER BY touched_at
    LIMIT %(batch_size)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM {otlp_trace} AS o USING old WHERE o.trace_id = old.trace_id;
