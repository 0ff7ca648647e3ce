-- Log lines (issue 23): job_event rows of type LOG, a log record each, up to 1,000 per step and
-- attempt. Runs with search_path set to the target schema. IF NOT EXISTS: on a big table an
-- operator may build the index CONCURRENTLY beforehand.

-- One attempt's lines in time order are one range of this index: job_detail and the job page
-- read a job's lines without visiting its other rows. Partial: the writer's other rows only
-- test the predicate.
CREATE INDEX IF NOT EXISTS job_event_log
    ON job_event (domain, job_id, attempt, created_at, id)
    WHERE type = 'LOG';

-- job_attempt of 0002, same columns: a log line is neither the start of an attempt nor a change
-- the jobs list orders by (the lines of a busy step would reorder it at every line).
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
LEFT JOIN job_log AS l
       ON l.domain = a.domain AND l.job_id = a.job_id AND l.attempt = a.attempt
-- at most one open step per attempt (job_event_one_open_step)
LEFT JOIN job_event AS o
       ON o.domain = a.domain AND o.job_id = a.job_id AND o.attempt = a.attempt
      AND o.type = 'STEP' AND o.ended_at IS NULL
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
