-- Functions of the read side: what several read statements (and a view) say alike, said once.
-- Runs with search_path set to the target schema. Both are set-returning SQL functions with a
-- standard body (BEGIN ATOMIC): the planner inlines them into the calling statement, so their
-- arguments become index conditions there, and their names are bound here, in this schema,
-- whatever the caller's search_path. PARALLEL SAFE: a statement that names an unsafe function
-- is planned without parallel workers, even where the function is inlined.

-- The latest attempt of one job, as a job_attempt row: what list_jobs and the web's jobs and
-- search pages read, LATERAL, for each job they list. Not a view: job_current_attempt says the
-- same for every job at once, and a join cannot filter it before it is computed whole (seconds
-- on a big table, for a page of 50).
CREATE FUNCTION job_latest_attempt(job_domain text, job_key text)
RETURNS SETOF job_attempt
LANGUAGE sql STABLE PARALLEL SAFE
BEGIN ATOMIC
    SELECT *
    FROM job_attempt AS a
    WHERE a.domain = job_domain AND a.job_id = job_key
    ORDER BY a.attempt DESC
    LIMIT 1;
END;

COMMENT ON FUNCTION job_latest_attempt(text, text) IS
    'The latest attempt of one job (domain, job id), as a job_attempt row.';

-- Durations of the steps closed since closed_since (NULL: every row kept) per job type and
-- step key. The window reads through job_event_recent (a closed step's COALESCE(ended_at,
-- created_at) is its end). job_step_duration is this over every row; the web's steps page
-- reads it over a window.
CREATE FUNCTION job_step_durations(closed_since timestamptz)
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
               extract(epoch FROM e.ended_at - e.created_at)::double precision AS seconds
        FROM job_event AS e
        WHERE e.type = 'STEP' AND e.ended_at IS NOT NULL
          AND COALESCE(e.ended_at, e.created_at) >= COALESCE(closed_since, '-infinity')
    ) AS s
    GROUP BY s.job_type, s.step_key;
END;

COMMENT ON FUNCTION job_step_durations(timestamptz) IS
    'Closed step durations (seconds) per job type and step key, of steps closed since then.';

-- The view of migration 0002, same columns, now over the function.
CREATE OR REPLACE VIEW job_step_duration AS
SELECT * FROM job_step_durations(NULL);
