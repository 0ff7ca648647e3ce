-- The retry tax from a summary (issue 40: job_retry_tax over 30 days of 5 M rows in < 500 ms).
-- Runs with search_path set to the target schema. job_retry_tax read every failed attempt's
-- step rows at each call (1.3 s for 57,647 failures); the numbers it sums are now kept per
-- failed attempt as its final row is written, and the function reads them.
--
-- job_failed_step: per FAILED attempt (its job_log row), per job type and step key: the
-- attempt's closed runs of that step (seconds) and whether it was the failing step
-- (failed_attempts 1: job_log's detail step, else the attempt's latest step; step_key NULL when
-- neither exists). Every failed attempt has exactly one row with failed_attempts = 1. ended_at
-- is the final row's created_at (the window job_retry_tax(ended_since) reads).
CREATE TABLE job_failed_step (
    domain           text             NOT NULL,
    job_id           text             NOT NULL,
    attempt          integer          NOT NULL,
    ended_at         timestamptz      NOT NULL,
    job_type         text,
    step_key         text,
    failed_attempts  integer          NOT NULL,
    seconds          double precision NOT NULL
);

COMMENT ON TABLE job_failed_step IS
    'What each FAILED attempt spent per job type and step, and its failing step: the retry '
    'tax''s summary, kept by triggers on job_log (migration 0019).';

CREATE INDEX job_failed_step_attempt ON job_failed_step (domain, job_id, attempt);
-- The window's rows with what the sums read, index only.
CREATE INDEX job_failed_step_ended ON job_failed_step (ended_at)
    INCLUDE (job_type, step_key, failed_attempts, seconds);
-- The window's failed attempts, one entry each, index only.
CREATE INDEX job_failed_step_failing ON job_failed_step (ended_at)
    INCLUDE (domain, job_id, attempt) WHERE failed_attempts = 1;

-- The completions that follow a failure (never an attempt 1): job_retry_tax probes this, not
-- every final row, for each failed attempt's next completion; small where retries are rare.
CREATE INDEX job_log_retried_completion ON job_log (domain, job_id, attempt)
    WHERE status = 'COMPLETED' AND attempt > 1;

-- Write these attempts' rows anew from job_log and job_event as they are now (none for an
-- attempt whose final row is gone or not FAILED): the definition job_retry_tax used to read at
-- each call, per attempt. Its body's names are bound here (BEGIN ATOMIC).
CREATE FUNCTION job_failed_step_refresh(domains text[], job_ids text[], attempts integer[])
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
          AND e.type = 'STEP' AND e.ended_at IS NOT NULL
        UNION ALL
        SELECT f.job_type,
               COALESCE(f.step,
                        (SELECT e.step_key FROM job_event AS e
                         WHERE e.domain = f.domain AND e.job_id = f.job_id
                           AND e.attempt = f.attempt AND e.type = 'STEP'
                         ORDER BY e.created_at DESC, e.id DESC
                         LIMIT 1)),
               1, 0
    ) AS r
    GROUP BY f.domain, f.job_id, f.attempt, f.created_at, r.job_type, r.step_key;
END;

COMMENT ON FUNCTION job_failed_step_refresh(text[], text[], integer[]) IS
    'Write job_failed_step anew for these attempts from their job_log and job_event rows.';

-- A final row written, changed or deleted: its attempt's summary is written anew at COMMIT
-- (a deferred constraint trigger), so the steps written in the same transaction count whatever
-- their order (collect derives an attempt's rows again in one transaction). Both doors, sweep
-- and prune write final rows (the partitioned layout's moves change no number). The writers
-- (SELECT, INSERT, UPDATE on job_event and job_log) and collect need no right on the summary
-- nor EXECUTE on its function (SECURITY DEFINER); the search_path is the schema's.
CREATE FUNCTION job_failed_step_track()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        PERFORM job_failed_step_refresh(ARRAY[NEW.domain], ARRAY[NEW.job_id],
                                        ARRAY[NEW.attempt]);
    ELSIF TG_OP = 'DELETE' THEN
        PERFORM job_failed_step_refresh(ARRAY[OLD.domain], ARRAY[OLD.job_id],
                                        ARRAY[OLD.attempt]);
    ELSE  -- both sides in one call (the same attempt, unless its key changed)
        PERFORM job_failed_step_refresh(ARRAY[OLD.domain, NEW.domain],
                                        ARRAY[OLD.job_id, NEW.job_id],
                                        ARRAY[OLD.attempt, NEW.attempt]);
    END IF;
    RETURN NULL;
END;
$$;

COMMENT ON FUNCTION job_failed_step_track() IS
    'Trigger: keep job_failed_step for the attempt of a FAILED final row written or changed.';

-- Only FAILED rows (either side of a change) queue anything: a COMPLETED final row costs the
-- WHEN test alone.
CREATE CONSTRAINT TRIGGER job_failed_step_insert
    AFTER INSERT ON job_log DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.status = 'FAILED')
    EXECUTE FUNCTION job_failed_step_track();

CREATE CONSTRAINT TRIGGER job_failed_step_update
    AFTER UPDATE ON job_log DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN ((OLD.status = 'FAILED' OR NEW.status = 'FAILED')
          AND (OLD.domain, OLD.job_id, OLD.attempt, OLD.status, OLD.job_type, OLD.detail,
               OLD.created_at)
              IS DISTINCT FROM (NEW.domain, NEW.job_id, NEW.attempt, NEW.status, NEW.job_type,
                                NEW.detail, NEW.created_at))
    EXECUTE FUNCTION job_failed_step_track();

CREATE CONSTRAINT TRIGGER job_failed_step_delete
    AFTER DELETE ON job_log DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (OLD.status = 'FAILED')
    EXECUTE FUNCTION job_failed_step_track();

-- Every FAILED final row kept so far.
SELECT job_failed_step_refresh(array_agg(domain), array_agg(job_id), array_agg(attempt))
FROM job_log
WHERE status = 'FAILED';

-- The same answers as migration 0017's, from the summary: the window's rows of job_failed_step
-- (index only) summed per job type and step, and the time to success of the jobs its failed
-- attempts were retried to, probed per failed attempt as before (job_log by (domain, job_id,
-- attempt), each completion's first attempt in job_event).
CREATE OR REPLACE FUNCTION job_retry_tax(ended_since timestamptz)
RETURNS TABLE (
    job_type                text,
    step_key                text,
    failed_attempts         bigint,
    failed_seconds          double precision,
    to_success_p50_seconds  double precision,
    to_success_p95_seconds  double precision
)
LANGUAGE sql STABLE PARALLEL SAFE
BEGIN ATOMIC
    WITH retried AS (
        -- the completion that followed each failure in the window (its first completed later
        -- attempt), once per completion; a join, so that few retried completions are hashed
        SELECT DISTINCT c.domain, c.job_id, c.attempt, c.job_type, c.created_at
        FROM (
            SELECT DISTINCT ON (f.domain, f.job_id, f.attempt)
                   n.domain, n.job_id, n.attempt, n.job_type, n.created_at
            FROM job_failed_step AS f
            JOIN job_log AS n
              ON n.domain = f.domain AND n.job_id = f.job_id AND n.attempt > f.attempt
             AND n.status = 'COMPLETED' AND n.attempt > 1  -- job_log_retried_completion
            WHERE f.failed_attempts = 1 AND f.ended_at >= COALESCE(ended_since, '-infinity')
            ORDER BY f.domain, f.job_id, f.attempt, n.attempt
        ) AS c
    ), to_success AS (
        SELECT r.job_type,
               percentile_cont(0.5) WITHIN GROUP (ORDER BY r.seconds) AS p50,
               percentile_cont(0.95) WITHIN GROUP (ORDER BY r.seconds) AS p95
        FROM (
            SELECT r.job_type,
                   extract(epoch FROM job_duration(s.started_at, r.created_at))::double precision
                       AS seconds
            FROM retried AS r
            CROSS JOIN LATERAL (
                -- the first attempt after the job's previous completion, and its start: one
                -- walk of job_event_job from there, stopped after that attempt's rows
                SELECT min(e.created_at) FILTER (WHERE e.type <> 'LOG') AS started_at
                FROM job_event AS e
                WHERE e.domain = r.domain AND e.job_id = r.job_id
                  AND e.attempt > COALESCE(
                      (SELECT max(p.attempt) FROM job_log AS p
                       WHERE p.domain = r.domain AND p.job_id = r.job_id
                         AND p.status = 'COMPLETED' AND p.attempt < r.attempt), 0)
                GROUP BY e.attempt
                ORDER BY e.attempt
                LIMIT 1
            ) AS s
            WHERE s.started_at IS NOT NULL
        ) AS r
        GROUP BY r.job_type
    )
    SELECT s.job_type, s.step_key, s.failed_attempts, s.failed_seconds, t.p50, t.p95
    FROM (
        SELECT f.job_type, f.step_key, sum(f.failed_attempts) AS failed_attempts,
               sum(f.seconds) AS failed_seconds
        FROM job_failed_step AS f
        WHERE f.ended_at >= COALESCE(ended_since, '-infinity') AND f.step_key IS NOT NULL
        GROUP BY f.job_type, f.step_key
    ) AS s
    LEFT JOIN to_success AS t ON t.job_type IS NOT DISTINCT FROM s.job_type;
END;
