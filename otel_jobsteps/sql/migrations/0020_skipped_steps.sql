-- Step status SKIPPED (issue 37): a step skipped, not run (a CI/CD task run with result
-- `skip`), written ended. Runs with search_path set to the target schema.
--
-- The check on job_event.step_status admits it. Added NOT VALID: every row already there met
-- the narrower check, so nothing needs reading (validating would hold job_event's exclusive
-- lock for a scan of the whole table); new and changed rows are checked as before.
ALTER TABLE job_event DROP CONSTRAINT job_event_step_status_check;
-- The partitioned layout's children (`migrate --partitioned`) copied the check (LIKE ...
-- INCLUDING CONSTRAINTS) before inheriting it, so theirs stay: dropped too, the new one then
-- reaches every table under job_event.
DO $$
DECLARE
    child regclass;
BEGIN
    FOR child IN
        WITH RECURSIVE tree (relid) AS (
            SELECT inhrelid FROM pg_inherits WHERE inhparent = 'job_event'::regclass
            UNION ALL
            SELECT i.inhrelid FROM pg_inherits AS i JOIN tree AS t ON i.inhparent = t.relid
        )
        SELECT c.conrelid::regclass
        FROM pg_constraint AS c JOIN tree AS t ON c.conrelid = t.relid
        WHERE c.conname = 'job_event_step_status_check'
    LOOP
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT job_event_step_status_check', child);
    END LOOP;
END $$;
ALTER TABLE job_event ADD CONSTRAINT job_event_step_status_check
    CHECK (step_status IN ('RUNNING', 'COMPLETED', 'FAILED', 'SKIPPED')) NOT VALID;

-- A skipped step is never the step an attempt is at or ended in: job_attempt of 0016, same
-- columns, its last_step now the latest step row not skipped.
CREATE OR REPLACE VIEW job_attempt AS
SELECT a.domain,
       a.job_id,
       a.attempt,
       COALESCE(l.job_type, r.job_type) AS job_type,
       COALESCE(l.status, 'RUNNING') AS status,
       l.reason,
       l.detail ->> 'error' AS error,
       COALESCE(o.step_key, l.detail ->> 'step', r.last_step) AS last_step,
       o.step_key AS open_step,
       GREATEST(o.created_at, o.heartbeat_at) AS open_step_seen_at,
       r.started_at,
       r.processing_started_at,
       l.created_at AS ended_at,
       GREATEST(r.last_change_at, l.created_at) AS last_activity_at,
       COALESCE(r.stalled_count, 0) AS stalled_count
FROM (
    SELECT domain, job_id, attempt FROM job_event
    UNION
    SELECT domain, job_id, attempt FROM job_log
) AS a
-- at most one final row per attempt (UNIQUE (domain, job_id, attempt))
LEFT JOIN LATERAL (
    SELECT f.job_type, f.status, f.reason, f.detail, f.created_at
    FROM job_log AS f
    WHERE f.domain = a.domain AND f.job_id = a.job_id AND f.attempt = a.attempt
    LIMIT 1
) AS l ON true
-- at most one open step per attempt (job_event_one_open_step)
LEFT JOIN LATERAL (
    SELECT s.step_key, s.created_at, s.heartbeat_at
    FROM job_event AS s
    WHERE s.domain = a.domain AND s.job_id = a.job_id AND s.attempt = a.attempt
      AND s.type = 'STEP' AND s.ended_at IS NULL
    LIMIT 1
) AS o ON true
CROSS JOIN LATERAL (
    SELECT min(e.created_at) FILTER (WHERE e.type <> 'LOG') AS started_at,
           min(e.created_at) FILTER (WHERE e.type = 'STEP') AS processing_started_at,
           max(GREATEST(e.created_at, e.ended_at, e.heartbeat_at))
               FILTER (WHERE e.type <> 'LOG') AS last_change_at,
           count(*) FILTER (WHERE e.type = 'STALLED') AS stalled_count,
           (array_agg(e.job_type ORDER BY e.id DESC)
                FILTER (WHERE e.job_type IS NOT NULL))[1] AS job_type,
           (array_agg(e.step_key ORDER BY e.created_at DESC, e.id DESC)
                FILTER (WHERE e.type = 'STEP' AND e.step_status <> 'SKIPPED'))[1] AS last_step
    FROM job_event AS e
    WHERE e.domain = a.domain AND e.job_id = a.job_id AND e.attempt = a.attempt
) AS r;

-- job_failed_step_refresh of 0019, same signature: a skipped step is neither a run of its step
-- (no seconds) nor the failing step.
CREATE OR REPLACE FUNCTION job_failed_step_refresh(domains text[], job_ids text[], attempts integer[])
RETURNS void
LANGUAGE sql VOLATILE
BEGIN ATOMIC
    DELETE FROM job_failed_step AS s
    USING unnest(domains, job_ids, attempts) AS k (domain, job_id, attempt)
    WHERE s.domain = k.domain AND s.job_id = k.job_id AND s.attempt = k.attempt;
    INSERT INTO job_failed_step (domain, job_id, attempt, ended_at, job_type, step_key,
                                 failed_attempts, seconds)
    SELECT f.domain, f.job_id, f.attempt, f.created_at, r.job_type, r.step_key,
           sum(r.failing), sum(r.seconds)
    FROM (
        SELECT l.domain, l.job_id, l.attempt, l.created_at, l.job_type,
               l.detail ->> 'step' AS step
        FROM (SELECT DISTINCT * FROM unnest(domains, job_ids, attempts)) AS k (domain, job_id,
                                                                            attempt)
        JOIN job_log AS l
          ON l.domain = k.domain AND l.job_id = k.job_id AND l.attempt = k.attempt
        WHERE l.status = 'FAILED'
    ) AS f
    CROSS JOIN LATERAL (
        SELECT COALESCE(f.job_type, e.job_type) AS job_type, e.step_key, 0 AS failing,
               extract(epoch FROM job_duration(e.created_at, e.ended_at))::double precision
                   AS seconds
        FROM job_event AS e
        WHERE e.domain = f.domain AND e.job_id = f.job_id AND e.attempt = f.attempt
          AND e.type = 'STEP' AND e.ended_at IS NOT NULL AND e.step_status <> 'SKIPPED'
        UNION ALL
        SELECT f.job_type,
               COALESCE(f.step,
                        (SELECT e.step_key FROM job_event AS e
                         WHERE e.domain = f.domain AND e.job_id = f.job_id
                           AND e.attempt = f.attempt AND e.type = 'STEP'
                           AND e.step_status <> 'SKIPPED'
                         ORDER BY e.created_at DESC, e.id DESC
                         LIMIT 1)),
               1, 0
    ) AS r
    GROUP BY f.domain, f.job_id, f.attempt, f.created_at, r.job_type, r.step_key;
END;

-- job_step_durations of 0011 (and so the job_step_duration view, `steps` and /steps), same
-- signature: durations of the steps that ran; a skipped step took no time worth a percentile.
CREATE OR REPLACE FUNCTION job_step_durations(closed_since timestamptz)
RETURNS TABLE (
    job_type      text,
    step_key      text,
    steps         bigint,
    failed        bigint,
    avg_seconds   double precision,
    p50_seconds   double precision,
    p95_seconds   double precision,
    max_seconds   double precision,
    last_ended_at timestamptz
)
LANGUAGE sql STABLE PARALLEL SAFE
BEGIN ATOMIC
    SELECT s.job_type,
           s.step_key,
           count(*),
           count(*) FILTER (WHERE s.step_status = 'FAILED'),
           avg(s.seconds),
           percentile_cont(0.5) WITHIN GROUP (ORDER BY s.seconds),
           percentile_cont(0.95) WITHIN GROUP (ORDER BY s.seconds),
           max(s.seconds),
           max(s.ended_at)
    FROM (
        SELECT e.job_type, e.step_key, e.step_status, e.ended_at,
               extract(epoch FROM job_duration(e.created_at, e.ended_at))::double precision
                   AS seconds
        FROM job_event AS e
        WHERE e.type = 'STEP' AND e.ended_at IS NOT NULL AND e.step_status <> 'SKIPPED'
          AND COALESCE(e.ended_at, e.created_at) >= COALESCE(closed_since, '-infinity')
    ) AS s
    GROUP BY s.job_type, s.step_key;
END;
