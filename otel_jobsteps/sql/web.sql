-- Read queries of the web page (`otel-jobsteps serve`) that the read API has no statement for.
-- Same block format as read.sql: {job_event}, {job_log}, {job_attempt} and the function
-- {job_latest_attempt} are schema-qualified identifiers; values are %(name)s parameters. Every
-- statement reads through an index and is bounded by a LIMIT or by one job's key, so a page
-- costs the same on a big table. A listed job is its latest attempt's job_attempt row
-- (latest.*), its activity time and its number of attempts: the fields of web.data.JobRow.

-- name: jobs_page --
-- One page of jobs, the most recently active first, by their latest attempt. A job's activity
-- time ("at") is its newest recorded change: a row written or closed (job_event_recent) or a
-- final row (job_log_ended_attempt). Heartbeats do not reorder the list (the silence column
-- shows them): ordering by them would read every open step, a heap page each. Each branch walks
-- its index newest first from the page cursor and stops after 8 rows per job asked for (data.py's
-- JOBS_ROWS_PER_JOB); only jobs above the deepest point a full branch reached are complete, so
-- the others wait for the next read (floor_at: data.py reads again below it while a filter
-- leaves the page short, within a budget; the page's Older link starts there). The cursor is
-- (at, domain, job_id), exclusive; a cursor without domain and job
-- id includes its time; NULLs mean the first page. since_at: where the time window starts (NULL:
-- none), a timestamp planned for (data.py), so the partitioned layout's old children are skipped.
WITH touched AS (
    (SELECT 'event' AS branch, domain, job_id, COALESCE(ended_at, created_at) AS at
     FROM {job_event}
     WHERE COALESCE(ended_at, created_at) <= COALESCE(%(before_at)s::timestamptz, 'infinity')
       AND COALESCE(ended_at, created_at) >= COALESCE(%(since_at)s::timestamptz, '-infinity')
     ORDER BY COALESCE(ended_at, created_at) DESC
     LIMIT %(limit)s::integer * 8)
    UNION ALL
    (SELECT 'log', domain, job_id, created_at
     FROM {job_log}
     WHERE created_at <= COALESCE(%(before_at)s::timestamptz, 'infinity')
       AND created_at >= COALESCE(%(since_at)s::timestamptz, '-infinity')
     ORDER BY created_at DESC
     LIMIT %(limit)s::integer * 8)
), floor AS (
    -- how deep the scan is complete: the shallower end of a branch that hit its limit
    SELECT max(deepest) AS at
    FROM (SELECT min(at) AS deepest
          FROM touched
          GROUP BY branch
          HAVING count(*) >= %(limit)s::integer * 8) AS full_branch
), candidate AS (
    SELECT domain, job_id, max(at) AS at
    FROM touched
    WHERE (%(domain)s::text IS NULL OR domain = %(domain)s)
    GROUP BY domain, job_id
)
-- one row even when no job qualifies: the floor still says where the next page starts
SELECT f.at AS floor_at, now() AS as_of, page.*
FROM floor AS f
LEFT JOIN LATERAL (
    SELECT latest.*, c.at AS active_at,
           (SELECT count(DISTINCT n.attempt) FROM {job_event} AS n
            WHERE n.domain = c.domain AND n.job_id = c.job_id) AS attempts
    FROM candidate AS c
    CROSS JOIN LATERAL {job_latest_attempt}(c.domain, c.job_id) AS latest
    WHERE (f.at IS NULL OR c.at > f.at)
      -- a job with a change above the cursor was on an earlier page (one index probe each)
      AND (%(before_at)s::timestamptz IS NULL
           OR NOT EXISTS (SELECT FROM {job_event} AS e
                          WHERE e.domain = c.domain AND e.job_id = c.job_id
                            AND COALESCE(e.ended_at, e.created_at) > %(before_at)s)
              AND NOT EXISTS (SELECT FROM {job_log} AS g
                              WHERE g.domain = c.domain AND g.job_id = c.job_id
                                AND g.created_at > %(before_at)s))
      AND (%(before_at)s::timestamptz IS NULL
           OR (c.at, c.domain, c.job_id) < (%(before_at)s, %(before_domain)s, %(before_job_id)s)
           OR (%(before_domain)s::text IS NULL AND c.at <= %(before_at)s))
      AND (%(job_type)s::text IS NULL OR latest.job_type = %(job_type)s)
      AND (%(status)s::text IS NULL OR latest.status = %(status)s)
    ORDER BY c.at DESC, c.domain DESC, c.job_id DESC
    LIMIT %(limit)s
) AS page ON true
ORDER BY page.active_at DESC, page.domain DESC, page.job_id DESC;

-- name: find_job --
-- Jobs with this exact id, in every domain (or the one given), by their latest attempt. The
-- domains are walked as a loose index scan of job_event_job (one probe per domain), so the id
-- is then an index condition in each. The latest attempt is read as list_jobs reads it
-- (job_latest_attempt, LATERAL): the job_current_attempt view would be computed whole first.
WITH RECURSIVE domains AS (
    (SELECT domain FROM {job_event} ORDER BY domain LIMIT 1)
    UNION ALL
    SELECT (SELECT e.domain FROM {job_event} AS e WHERE e.domain > d.domain
            ORDER BY e.domain LIMIT 1)
    FROM domains AS d
    WHERE d.domain IS NOT NULL
)
SELECT latest.*, latest.last_activity_at AS active_at,
       (SELECT count(DISTINCT n.attempt) FROM {job_event} AS n
        WHERE n.domain = d.domain AND n.job_id = %(job_id)s) AS attempts
FROM domains AS d
CROSS JOIN LATERAL {job_latest_attempt}(d.domain, %(job_id)s) AS latest
WHERE d.domain IS NOT NULL
  AND (%(domain)s::text IS NULL OR d.domain = %(domain)s)
ORDER BY latest.last_activity_at DESC NULLS LAST, d.domain
LIMIT %(limit)s;

-- name: job_rows --
-- Every row of one job, all attempts: steps with their span ids (the swimlanes and the trace
-- links) and ordinary events (the marks on the time axis), with the server's time of the read.
SELECT attempt, type, step_key, step_status, detail, message, trace_id, span_id,
       created_at, ended_at, GREATEST(created_at, heartbeat_at) AS seen_at,
       now() AS as_of
FROM {job_event}
WHERE domain = %(domain)s AND job_id = %(job_id)s
ORDER BY attempt, created_at, id;

-- name: job_logs --
-- The final rows of every attempt of one job.
SELECT attempt, status, reason, detail, trace_id, created_at
FROM {job_log}
WHERE domain = %(domain)s AND job_id = %(job_id)s
ORDER BY attempt;

-- name: open_steps --
-- Open steps of the fleet, the longest silent first (the open steps `sweep` would settle first;
-- it also settles attempts that died between steps, which have none), those
-- silent for at least older_than; at most limit rows, and how many there are in all.
SELECT domain, job_id, job_type, attempt, step_key, detail, created_at AS started_at,
       GREATEST(created_at, heartbeat_at) AS seen_at,
       now() AS as_of,
       count(*) OVER () AS total
FROM {job_event}
WHERE type = 'STEP' AND ended_at IS NULL
  AND GREATEST(created_at, heartbeat_at) <= now() - %(older_than)s::interval
ORDER BY GREATEST(created_at, heartbeat_at), id
LIMIT %(limit)s;

-- name: open_step_gauges --
-- GET /metrics: open steps by domain, job type and step, and how many of them showed no sign of
-- life (start or heartbeat) for silent_after. Reads the open rows only (job_event_one_open_step,
-- whose predicate this is), so a scrape costs the number of open steps, not the table's size.
SELECT domain, job_type, step_key, count(*) AS open,
       count(*) FILTER (WHERE GREATEST(created_at, heartbeat_at)
                              <= now() - %(silent_after)s::interval) AS silent
FROM {job_event}
WHERE type = 'STEP' AND ended_at IS NULL
GROUP BY domain, job_type, step_key;

-- name: step_stats --
-- The job_step_duration view's numbers over a time window (steps closed since since_at), read
-- through job_event_recent instead of over every row kept.
SELECT job_type, step_key, steps, failed, p50_seconds, p95_seconds, max_seconds, last_ended_at
FROM {job_step_durations}(%(since_at)s::timestamptz)
ORDER BY job_type NULLS LAST, step_key;

-- name: step_failures --
-- Recent failures of one step key of one job type, newest first, since since_at.
SELECT domain, job_id, attempt, step_key, message, detail, created_at AS started_at, ended_at
FROM {job_event}
WHERE COALESCE(ended_at, created_at) >= %(since_at)s::timestamptz
  AND type = 'STEP' AND step_status = 'FAILED' AND step_key = %(step_key)s
  AND job_type IS NOT DISTINCT FROM %(job_type)s
ORDER BY COALESCE(ended_at, created_at) DESC
LIMIT %(limit)s;
