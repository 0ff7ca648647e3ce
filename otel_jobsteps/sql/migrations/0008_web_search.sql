-- The jobs page's searches. Runs with search_path set to the target schema. IF NOT EXISTS: on
-- a big table an operator may build an index CONCURRENTLY beforehand.

-- Counts per status: attempts ended FAILED (or COMPLETED) in a window are an index-only range
-- here; job_log_ended_attempt has no status, so counting a day's failures visited every final
-- row of that day. job_log gets one row per attempt: a small write cost.
CREATE INDEX IF NOT EXISTS job_log_ended_status ON job_log (status, created_at);

-- Tags (job.tag.<name> on the job span): one TAG row per tag and attempt, step_key its name,
-- message its value, created_at the attempt's start. Partial: the writer's other rows only
-- test the predicate, and a tag search walks one (name, value) newest first.
CREATE INDEX IF NOT EXISTS job_event_tag
    ON job_event (step_key, message, created_at)
    WHERE type = 'TAG';

-- The jobs with an attempt tagged name = value that started since started_since (NULL: any
-- time), in job_domain (NULL: any), whose latest attempt is of job_kind and in job_status (NULL:
-- any), the newest tagged start of each: at most max_jobs of them, read from the newest tagged
-- attempt back through at most scan tagged attempts. list_jobs and the web's jobs page read it
-- (inlined: a standard body).
CREATE FUNCTION job_tagged(
    tag_name text, tag_value text, started_since timestamptz, job_domain text, job_kind text,
    job_status text, scan integer, max_jobs integer)
RETURNS TABLE (domain text, job_id text, tagged_at timestamptz)
LANGUAGE sql STABLE PARALLEL SAFE
BEGIN ATOMIC
    SELECT t.domain, t.job_id, t.tagged_at
    FROM (SELECT e.domain, e.job_id, max(e.created_at) AS tagged_at
          FROM (SELECT r.domain, r.job_id, r.created_at
                FROM job_event AS r
                WHERE r.type = 'TAG' AND r.step_key = tag_name AND r.message = tag_value
                  AND r.created_at >= COALESCE(started_since, '-infinity')
                  AND (job_domain IS NULL OR r.domain = job_domain)
                ORDER BY r.created_at DESC
                LIMIT scan) AS e
          GROUP BY e.domain, e.job_id) AS t
    CROSS JOIN LATERAL job_latest_attempt(t.domain, t.job_id) AS latest
    WHERE (job_kind IS NULL OR latest.job_type = job_kind)
      AND (job_status IS NULL OR latest.status = job_status)
    ORDER BY t.tagged_at DESC, t.domain, t.job_id
    LIMIT max_jobs;
END;

COMMENT ON FUNCTION job_tagged(text, text, timestamptz, text, text, text, integer, integer) IS
    'Jobs with an attempt tagged name = value since a time, by their latest attempt.';
