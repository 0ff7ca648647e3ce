-- The retry tax (issue 40): what failed attempts cost per job type and step, and how long a job
-- takes to succeed counting its retries. Runs with search_path set to the target schema. Reads
-- job_event and job_log as they are, so the partitioned layout (children of job_event) too.

-- Over the attempts that ended since ended_since (NULL: every row kept), per job type and step:
-- failed_attempts, the FAILED attempts whose failing step it was (job_log's detail step, else
-- the attempt's latest step); failed_seconds, the time the FAILED attempts spent in that step
-- (its closed runs); and, for the job type, the p50 and p95 of to_success_seconds, from the
-- start of a job's first attempt (the first after its previous completion) to the end of the
-- attempt that completed it, backoffs between attempts included, over the jobs completed in
-- the window. A job type without a failed attempt in the window has no row.
CREATE FUNCTION job_retry_tax(ended_since timestamptz)
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
    WITH failed AS (
        SELECT l.domain, l.job_id, l.attempt, l.job_type,
               COALESCE(l.detail ->> 'step',
                        (SELECT e.step_key FROM job_event AS e
                         WHERE e.domain = l.domain AND e.job_id = l.job_id
                           AND e.attempt = l.attempt AND e.type = 'STEP'
                         ORDER BY e.created_at DESC, e.id DESC
                         LIMIT 1)) AS failing_step
        FROM job_log AS l
        WHERE l.status = 'FAILED' AND l.created_at >= COALESCE(ended_since, '-infinity')
    ), spent AS (
        SELECT COALESCE(f.job_type, e.job_type) AS job_type, e.step_key, 0 AS failing,
               extract(epoch FROM job_duration(e.created_at, e.ended_at))::double precision
                   AS seconds
        FROM failed AS f
        JOIN job_event AS e
          ON e.domain = f.domain AND e.job_id = f.job_id AND e.attempt = f.attempt
         AND e.type = 'STEP' AND e.ended_at IS NOT NULL
        UNION ALL
        SELECT f.job_type, f.failing_step, 1, 0
        FROM failed AS f
        WHERE f.failing_step IS NOT NULL
    ), to_success AS (
        SELECT c.job_type,
               percentile_cont(0.5) WITHIN GROUP (ORDER BY c.seconds) AS p50,
               percentile_cont(0.95) WITHIN GROUP (ORDER BY c.seconds) AS p95
        FROM (
            SELECT l.job_type,
                   extract(epoch FROM job_duration(s.started_at, l.created_at))::double precision
                       AS seconds
            FROM job_log AS l
            CROSS JOIN LATERAL (
                -- the first attempt after the job's previous completion, and its start
                SELECT min(e.created_at) AS started_at
                FROM job_event AS e
                WHERE e.domain = l.domain AND e.job_id = l.job_id AND e.type <> 'LOG'
                  AND e.attempt = (
                      SELECT min(f.attempt) FROM job_event AS f
                      WHERE f.domain = l.domain AND f.job_id = l.job_id
                        AND f.attempt <= l.attempt
                        AND f.attempt > COALESCE(
                            (SELECT max(p.attempt) FROM job_log AS p
                             WHERE p.domain = l.domain AND p.job_id = l.job_id
                               AND p.status = 'COMPLETED' AND p.attempt < l.attempt), 0))
            ) AS s
            WHERE l.status = 'COMPLETED' AND l.created_at >= COALESCE(ended_since, '-infinity')
              AND s.started_at IS NOT NULL
        ) AS c
        GROUP BY c.job_type
    )
    SELECT s.job_type, s.step_key, sum(s.failing), sum(s.seconds), t.p50, t.p95
    FROM spent AS s
    LEFT JOIN to_success AS t ON t.job_type IS NOT DISTINCT FROM s.job_type
    GROUP BY s.job_type, s.step_key, t.p50, t.p95;
END;

COMMENT ON FUNCTION job_retry_tax(timestamptz) IS
    'Failed attempts and seconds in failed attempts per job type and step, with the type''s '
    'p50/p95 seconds to success, over the attempts ended since then.';

-- The same over every row kept (see prune).
CREATE VIEW job_retry_tax AS
SELECT * FROM job_retry_tax(NULL);

COMMENT ON VIEW job_retry_tax IS
    'job_retry_tax(NULL): the retry tax over every row kept.';
