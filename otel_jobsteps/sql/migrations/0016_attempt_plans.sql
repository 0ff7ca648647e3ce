-- Plans that stay per attempt whatever the statistics (issue 36). Runs with search_path set to
-- the target schema.
--
-- job_attempt of 0010, same columns: the final row and the open step of each attempt are now
-- LATERAL subqueries with LIMIT 1, which the planner cannot fold into a join, so each is one
-- probe of a unique index by (domain, job_id, attempt). As plain joins, on tables not yet
-- analyzed (a fresh install, a table grown since its last ANALYZE), the planner took one row
-- for a job and joined its rows to its final rows by a filter: every attempt against every
-- other, 4.6 s for a job of 10,000 attempts (0.1 s now).
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
                FILTER (WHERE e.type = 'STEP'))[1] AS last_step
    FROM job_event AS e
    WHERE e.domain = a.domain AND e.job_id = a.job_id AND e.attempt = a.attempt
) AS r;

-- job_latest_attempt of 0005, same signature: the latest attempt's number first (the last
-- entry of each table's (domain, job_id, attempt) index, a LIMIT 1 that no statistics make a
-- read of the job's every row), then that attempt's row alone. Sorting
-- the view by attempt computed every attempt of the job first: each job of the jobs list cost
-- its number of attempts.
CREATE OR REPLACE FUNCTION job_latest_attempt(job_domain text, job_key text)
RETURNS SETOF job_attempt
LANGUAGE sql STABLE PARALLEL SAFE
BEGIN ATOMIC
    SELECT *
    FROM job_attempt AS a
    WHERE a.domain = job_domain AND a.job_id = job_key
      AND a.attempt = GREATEST((SELECT e.attempt FROM job_event AS e
                                WHERE e.domain = job_domain AND e.job_id = job_key
                                ORDER BY e.attempt DESC LIMIT 1),
                               (SELECT f.attempt FROM job_log AS f
                                WHERE f.domain = job_domain AND f.job_id = job_key
                                ORDER BY f.attempt DESC LIMIT 1));
END;
