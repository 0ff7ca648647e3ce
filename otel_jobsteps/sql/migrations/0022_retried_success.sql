-- The retry tax's time to success from a summary too (issue 40: job_retry_tax < 500 ms also when
-- every failure of the window was retried to success). Runs with search_path set to the target
-- schema. 0019's function found, per failure of the window, the completion after it, the job's
-- previous completion and its first attempt's start at each call: three index probes and heap
-- pages per retried job (1.8-3.1 s for 57,647). Those numbers are now kept per completion as
-- final rows are written, and the function reads them.
--
-- job_retried_success: per COMPLETED final row that followed a FAILED one (one with a higher
-- attempt than the job's previous completion): its job type (the final row's), the seconds to
-- success (the start of the first attempt after the previous completion, its earliest row but
-- a log line, to this final row's time; no row when that attempt has no such row), and
-- failed_at, the latest time of those failures' final rows: job_retry_tax(ended_since) counts
-- the completion when one of its failures is in the window, so when failed_at is.
CREATE TABLE job_retried_success (
    domain      text             NOT NULL,
    job_id      text             NOT NULL,
    attempt     integer          NOT NULL,
    failed_at   timestamptz      NOT NULL,
    job_type    text,
    seconds     double precision NOT NULL
);

COMMENT ON TABLE job_retried_success IS
    'Per completion that followed failures, its seconds to success and its latest failure''s '
    'time: the retry tax''s percentiles, kept by triggers on job_log (migration 0022).';

CREATE INDEX job_retried_success_job ON job_retried_success (domain, job_id);
-- The window's completions with what the percentiles read, index only.
CREATE INDEX job_retried_success_failed ON job_retried_success (failed_at)
    INCLUDE (job_type, seconds);

-- Write anew the rows of the completions an attempt's final row may bear on: its own, and the
-- job's next completion after it (whose failures, previous completion or first attempt it may
-- be), from job_log and job_event as they are now. So a write reads the job's final rows
-- between its completions around the attempt, never all of them (a job id run again and again
-- keeps a bounded cost). One attempt at a time by its key on generic plans (as
-- job_failed_step_refresh, 0021).
CREATE FUNCTION job_retried_success_refresh(domains text[], job_ids text[], attempts integer[])
RETURNS void
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    target record;
    completed_before integer;  -- the job's last completion before the attempt (0: none)
    completed_after integer;   -- its first completion after the attempt (else the attempt)
BEGIN
    FOR target IN SELECT DISTINCT * FROM unnest(domains, job_ids, attempts) AS k (domain, job_id,
                                                                                  attempt)
    LOOP
        -- Probes down and up the job's attempts from this one (its unique index), stopping at
        -- the first completion: never a scan of the job's other final rows.
        completed_before := COALESCE((
            SELECT l.attempt FROM job_log AS l
            WHERE l.domain = target.domain AND l.job_id = target.job_id
              AND l.attempt < target.attempt AND l.status = 'COMPLETED'
            ORDER BY l.attempt DESC LIMIT 1), 0);
        completed_after := COALESCE((
            SELECT l.attempt FROM job_log AS l
            WHERE l.domain = target.domain AND l.job_id = target.job_id
              AND l.attempt > target.attempt AND l.status = 'COMPLETED'
            ORDER BY l.attempt LIMIT 1), target.attempt);
        DELETE FROM job_retried_success AS s
        WHERE s.domain = target.domain AND s.job_id = target.job_id
          AND s.attempt BETWEEN target.attempt AND completed_after;
        INSERT INTO job_retried_success (domain, job_id, attempt, failed_at, job_type, seconds)
        WITH finals AS (
            SELECT l.attempt, l.status, l.job_type, l.created_at
            FROM job_log AS l
            WHERE l.domain = target.domain AND l.job_id = target.job_id
              AND l.attempt > completed_before AND l.attempt <= completed_after
              AND l.status IN ('COMPLETED', 'FAILED')
        ), completions AS (
            -- the attempt's completion and the next one, each with its previous completion
            SELECT c.attempt, c.job_type, c.created_at,
                   COALESCE((SELECT max(p.attempt) FROM finals AS p
                             WHERE p.status = 'COMPLETED' AND p.attempt < c.attempt),
                            completed_before) AS previous
            FROM finals AS c
            WHERE c.status = 'COMPLETED' AND c.attempt >= target.attempt
        )
        SELECT target.domain, target.job_id, c.attempt, c.failed_at, c.job_type,
               extract(epoch FROM job_duration(s.started_at, c.created_at))::double precision
        FROM (
            SELECT c.*,
                   (SELECT max(f.created_at) FROM finals AS f
                    WHERE f.status = 'FAILED' AND f.attempt > c.previous
                      AND f.attempt < c.attempt) AS failed_at
            FROM completions AS c
        ) AS c
        CROSS JOIN LATERAL (
            -- the first attempt after the previous completion (one probe), and its start
            SELECT min(e.created_at) FILTER (WHERE e.type <> 'LOG') AS started_at
            FROM job_event AS e
            WHERE e.domain = target.domain AND e.job_id = target.job_id
              AND e.attempt = (SELECT f.attempt FROM job_event AS f
                               WHERE f.domain = target.domain AND f.job_id = target.job_id
                                 AND f.attempt > c.previous
                               ORDER BY f.attempt LIMIT 1)
        ) AS s
        WHERE c.failed_at IS NOT NULL AND s.started_at IS NOT NULL;
    END LOOP;
END;
$$;

COMMENT ON FUNCTION job_retried_success_refresh(text[], text[], integer[]) IS
    'Write job_retried_success anew for the completions these attempts'' final rows bear on.';

-- Its names are unqualified and looked up when it runs: the schema it was made in, then
-- pg_temp (a session's temporary tables never stand in for them).
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION job_retried_success_refresh(text[], text[], integer[])'
                   ' SET search_path = %I, pg_temp', current_schema());
END;
$$;

-- A final row that may make or change a completion after failures, written, changed or
-- deleted: the rows of the completions it bears on are written anew at COMMIT, as the table's
-- owner (as job_failed_step_track, 0019: the writers need no right on the summary).
CREATE FUNCTION job_retried_success_track()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        PERFORM job_retried_success_refresh(ARRAY[NEW.domain], ARRAY[NEW.job_id],
                                            ARRAY[NEW.attempt]);
    ELSIF TG_OP = 'DELETE' THEN
        PERFORM job_retried_success_refresh(ARRAY[OLD.domain], ARRAY[OLD.job_id],
                                            ARRAY[OLD.attempt]);
    ELSE  -- both sides in one call (the same attempt, unless its key changed)
        PERFORM job_retried_success_refresh(ARRAY[OLD.domain, NEW.domain],
                                            ARRAY[OLD.job_id, NEW.job_id],
                                            ARRAY[OLD.attempt, NEW.attempt]);
    END IF;
    RETURN NULL;
END;
$$;

COMMENT ON FUNCTION job_retried_success_track() IS
    'Trigger: keep job_retried_success for the completions a final row bears on.';

-- A failure, or a completion after attempt 1, queues its job. A completion of attempt 1 costs
-- the WHEN test alone: written before its job's later attempts (as the doors write them) it
-- follows no failure and bounds none yet; deleted (prune, oldest first, with its job_event
-- rows) it leaves the later completions' failures and first attempts as they were.
CREATE CONSTRAINT TRIGGER job_retried_success_insert
    AFTER INSERT ON job_log DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.status = 'FAILED' OR (NEW.status = 'COMPLETED' AND NEW.attempt > 1))
    EXECUTE FUNCTION job_retried_success_track();

CREATE CONSTRAINT TRIGGER job_retried_success_update
    AFTER UPDATE ON job_log DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN ((OLD.status IN ('FAILED', 'COMPLETED') OR NEW.status IN ('FAILED', 'COMPLETED'))
          AND (OLD.domain, OLD.job_id, OLD.attempt, OLD.status, OLD.job_type, OLD.created_at)
              IS DISTINCT FROM (NEW.domain, NEW.job_id, NEW.attempt, NEW.status, NEW.job_type,
                                NEW.created_at))
    EXECUTE FUNCTION job_retried_success_track();

CREATE CONSTRAINT TRIGGER job_retried_success_delete
    AFTER DELETE ON job_log DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (OLD.status = 'FAILED' OR (OLD.status = 'COMPLETED' AND OLD.attempt > 1))
    EXECUTE FUNCTION job_retried_success_track();

-- Every completion after attempt 1 kept so far.
SELECT job_retried_success_refresh(array_agg(domain), array_agg(job_id), array_agg(attempt))
FROM job_log
WHERE status = 'COMPLETED' AND attempt > 1;

-- The same answers as migrations 0017 and 0019: the window's rows of job_failed_step summed per
-- job type and step, and the percentiles of the window's rows of job_retried_success (index
-- only): it walks no job.
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
    WITH to_success AS (
        SELECT r.job_type,
               percentile_cont(0.5) WITHIN GROUP (ORDER BY r.seconds) AS p50,
               percentile_cont(0.95) WITHIN GROUP (ORDER BY r.seconds) AS p95
        FROM job_retried_success AS r
        WHERE r.failed_at >= COALESCE(ended_since, '-infinity')
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

-- 0019's index for the completions after failures: the function reads none now.
DROP INDEX job_log_retried_completion;
