-- The retry tax (issue 40): what failed attempts cost per job type and step, and how long a job
-- takes to succeed counting its retries. Runs with search_path set to the target schema. Reads
-- job_event and job_log as they are, so the partitioned layout (children of job_event) too.

-- Over the attempts that failed since ended_since (NULL: every row kept), per job type and
-- step: failed_attempts, the FAILED attempts whose failing step it was (job_log's detail step,
-- else the attempt's latest step); failed_seconds, the time the FAILED attempts spent in that
-- step (its closed runs); and, for the job type, the p50 and p95 of to_success_seconds over
-- the jobs those failures were retried to success: from the start of the job's first attempt
-- (the first after its previous completion) to the end of the attempt that completed it,
-- backoffs included. A job type without a failed attempt in the window has no row.
--
-- Every read starts from the failed attempts (job_log_ended_status) and probes each one's rows
-- by (domain, job_id, attempt): the cost follows the failures in the window, never the table
-- (OFFSET 0 keeps each LATERAL a probe, where the planner would hash-join a whole table).
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
    WITH failed AS MATERIALIZED (
        SELECT l.domain, l.job_id, l.attempt, l.job_type, l.detail ->> 'step' AS step
        FROM job_log AS l
        WHERE l.status = 'FAILED' AND l.created_at >= COALESCE(ended_since, '-infinity')
    ), spent AS (
        SELECT COALESCE(f.job_type, s.job_type) AS job_type, s.step_key, 0 AS failing,
               s.seconds
        FROM failed AS f
        CROSS JOIN LATERAL (
            SELECT e.job_type, e.step_key,
                   extract(epoch FROM job_duration(e.created_at, e.ended_at))::double precision
                       AS seconds
            FROM job_event AS e
            WHERE e.domain = f.domain AND e.job_id = f.job_id AND e.attempt = f.attempt
              AND e.type = 'STEP' AND e.ended_at IS NOT NULL
            OFFSET 0
        ) AS s
        UNION ALL
        SELECT f.job_type,
               COALESCE(f.step,
                        (SELECT e.step_key FROM job_event AS e
                         WHERE e.domain = f.domain AND e.job_id = f.job_id
                           AND e.attempt = f.attempt AND e.type = 'STEP'
                         ORDER BY e.created_at DESC, e.id DESC
                         LIMIT 1)),
               1, 0
        FROM failed AS f
    ), retried AS (
        -- the completion that followed each failure, once per completion
        SELECT DISTINCT c.domain, c.job_id, c.attempt, c.job_type, c.created_at
        FROM failed AS f
        CROSS JOIN LATERAL (
            SELECT n.domain, n.job_id, n.attempt, n.job_type, n.created_at
            FROM job_log AS n
            WHERE n.domain = f.domain AND n.job_id = f.job_id AND n.attempt > f.attempt
              AND n.status = 'COMPLETED'
            ORDER BY n.attempt
            LIMIT 1
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
                -- the first attempt after the job's previous completion, and its start
                SELECT min(e.created_at) AS started_at
                FROM job_event AS e
                WHERE e.domain = r.domain AND e.job_id = r.job_id AND e.type <> 'LOG'
                  AND e.attempt = (
                      SELECT min(a.attempt) FROM job_event AS a
                      WHERE a.domain = r.domain AND a.job_id = r.job_id
                        AND a.attempt > COALESCE(
                            (SELECT max(p.attempt) FROM job_log AS p
                             WHERE p.domain = r.domain AND p.job_id = r.job_id
                               AND p.status = 'COMPLETED' AND p.attempt < r.attempt), 0))
            ) AS s
            WHERE s.started_at IS NOT NULL
        ) AS r
        GROUP BY r.job_type
    )
    SELECT s.job_type, s.step_key, s.failed_attempts, s.failed_seconds, t.p50, t.p95
    FROM (
        SELECT spent.job_type, spent.step_key, sum(spent.failing) AS failed_attempts,
               sum(spent.seconds) AS failed_seconds
        FROM spent
        WHERE spent.step_key IS NOT NULL
        GROUP BY spent.job_type, spent.step_key
    ) AS s
    LEFT JOIN to_success AS t ON t.job_type IS NOT DISTINCT FROM s.job_type;
END;

COMMENT ON FUNCTION job_retry_tax(timestamptz) IS
    'Failed attempts and seconds in failed attempts per job type and step, with the type''s '
    'p50/p95 seconds to success of retried jobs, over the attempts failed since then.';

-- The same over every row kept (see prune).
CREATE VIEW job_retry_tax AS
SELECT * FROM job_retry_tax(NULL);

COMMENT ON VIEW job_retry_tax IS
    'job_retry_tax(NULL): the retry tax over every row kept.';
