-- The read side: the index list_jobs needs, and views for job_detail, list_jobs and dashboards.
-- Runs with search_path set to the target schema, so names stay unqualified here.
--
-- sweep finds open steps through job_event_one_open_step (its predicate is sweep's), and prune
-- finds old attempts through job_log_recent. Neither gets an index on heartbeat_at on purpose:
-- it would turn every heartbeat refresh of an open row into a non-HOT update.

-- list_jobs finds jobs touched since a cutoff: a row last changed when it closed, else when it
-- was written. The expression must stay exactly the one list_jobs names. IF NOT EXISTS: on a
-- big table an operator may build it CONCURRENTLY beforehand.
CREATE INDEX IF NOT EXISTS job_event_recent ON job_event ((COALESCE(ended_at, created_at)));

-- One row per attempt of a job: its outcome (the job_log row, else RUNNING), the step it is at
-- or ended in, and when it started, started processing, ended and last showed activity.
CREATE VIEW job_attempt AS
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
LEFT JOIN job_log AS l
       ON l.domain = a.domain AND l.job_id = a.job_id AND l.attempt = a.attempt
-- at most one open step per attempt (job_event_one_open_step)
LEFT JOIN job_event AS o
       ON o.domain = a.domain AND o.job_id = a.job_id AND o.attempt = a.attempt
      AND o.type = 'STEP' AND o.ended_at IS NULL
CROSS JOIN LATERAL (
    SELECT min(e.created_at) AS started_at,
           min(e.created_at) FILTER (WHERE e.type = 'STEP') AS processing_started_at,
           max(GREATEST(e.created_at, e.ended_at, e.heartbeat_at)) AS last_change_at,
           count(*) FILTER (WHERE e.type = 'STALLED') AS stalled_count,
           (array_agg(e.job_type ORDER BY e.id DESC)
                FILTER (WHERE e.job_type IS NOT NULL))[1] AS job_type,
           (array_agg(e.step_key ORDER BY e.created_at DESC, e.id DESC)
                FILTER (WHERE e.type = 'STEP'))[1] AS last_step
    FROM job_event AS e
    WHERE e.domain = a.domain AND e.job_id = a.job_id AND e.attempt = a.attempt
) AS r;

COMMENT ON VIEW job_attempt IS
    'One row per attempt of a job: status from job_log (else RUNNING), open step, timings.';

-- The latest attempt of every job: "what is each job doing now, or how did it end".
CREATE VIEW job_current_attempt AS
SELECT DISTINCT ON (domain, job_id) *
FROM job_attempt
ORDER BY domain, job_id, attempt DESC;

COMMENT ON VIEW job_current_attempt IS
    'The latest attempt of every job, with its open step and status.';

-- Durations of closed steps per job type and step key, over the rows kept (see prune).
CREATE VIEW job_step_duration AS
SELECT job_type,
       step_key,
       count(*) AS steps,
       count(*) FILTER (WHERE step_status = 'FAILED') AS failed,
       avg(seconds) AS avg_seconds,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY seconds) AS p50_seconds,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY seconds) AS p95_seconds,
       max(seconds) AS max_seconds,
       max(ended_at) AS last_ended_at
FROM (
    SELECT job_type, step_key, step_status, ended_at,
           extract(epoch FROM ended_at - created_at)::double precision AS seconds
    FROM job_event
    WHERE type = 'STEP' AND ended_at IS NOT NULL
) AS closed_step
GROUP BY job_type, step_key;

COMMENT ON VIEW job_step_duration IS
    'Closed step durations (seconds) per job type and step key: count, failed, avg, p50, p95, max.';
