-- Read queries of the web page (`otel-jobsteps serve`) that the read API has no statement for.
-- Same block format as read.sql: {job_event}, {job_log}, {job_attempt} and the function
-- {job_latest_attempt} are schema-qualified identifiers; values are %(name)s parameters. Every
-- statement reads through an index and is bounded by a LIMIT or by one job's key, so a page
-- costs the same on a big table. A listed job is its latest attempt's job_attempt row
-- (latest.*), its activity time and its number of attempts: the fields of web.data.JobRow.

-- name: jobs_page --
-- One page of jobs, the most recently active first, by their latest attempt. A job's activity
-- time ("at") is its newest recorded change: a row written or closed (job_event_recent_change: no log line) or a
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
       AND type <> 'LOG'  -- a log line is no change of the job (0010's job_attempt)
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
                            AND COALESCE(e.ended_at, e.created_at) > %(before_at)s
                            AND e.type <> 'LOG')
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

-- name: find_jobs --
-- A page of the jobs whose id starts with prefix (an exact id is its own prefix), in every
-- domain (or the one given), in (domain, job id) order after the cursor (after_domain,
-- after_job; NULLs: the first page), each by its latest attempt. The domains from the cursor's
-- on are walked as a loose index scan of job_event_job (one probe per domain); in each, the ids
-- from prefix (from the cursor's id in its own domain) up to upper (prefix with its last
-- character's next code point) are walked one distinct id per probe, at most limit + 1 of them
-- (the cursor's own id may be one). upper is always given: a bound, not a filter, in a generic
-- plan too. The range is exact where the collation orders by code point (C, C.UTF-8);
-- starts_with keeps only true matches under any other.
WITH RECURSIVE domains AS (
    (SELECT domain FROM {job_event}
     WHERE domain >= COALESCE(%(after_domain)s::text, '')
     ORDER BY domain LIMIT 1)
    UNION ALL
    SELECT (SELECT e.domain FROM {job_event} AS e WHERE e.domain > d.domain
            ORDER BY e.domain LIMIT 1)
    FROM domains AS d
    WHERE d.domain IS NOT NULL
), ids AS (
    SELECT d.domain, first.job_id, 1 AS n
    FROM domains AS d
    CROSS JOIN LATERAL (
        SELECT e.job_id FROM {job_event} AS e
        WHERE e.domain = d.domain AND e.job_id < %(upper)s
          AND e.job_id >= CASE WHEN d.domain = %(after_domain)s
                               THEN GREATEST(%(after_job)s::text, %(prefix)s)
                               ELSE %(prefix)s END
        ORDER BY e.job_id LIMIT 1) AS first
    WHERE d.domain IS NOT NULL
      AND (%(domain)s::text IS NULL OR d.domain = %(domain)s)
    UNION ALL
    SELECT i.domain, later.job_id, i.n + 1
    FROM ids AS i
    CROSS JOIN LATERAL (
        SELECT e.job_id FROM {job_event} AS e
        WHERE e.domain = i.domain AND e.job_id > i.job_id AND e.job_id < %(upper)s
        ORDER BY e.job_id LIMIT 1) AS later
    WHERE i.n <= %(limit)s
)
SELECT latest.*, latest.last_activity_at AS active_at,
       (SELECT count(DISTINCT n.attempt) FROM {job_event} AS n
        WHERE n.domain = i.domain AND n.job_id = i.job_id) AS attempts
FROM ids AS i
CROSS JOIN LATERAL {job_latest_attempt}(i.domain, i.job_id) AS latest
WHERE starts_with(i.job_id, %(prefix)s)
  -- the cursor's own job ended the page before
  AND (%(after_domain)s::text IS NULL
       OR (i.domain, i.job_id) > (%(after_domain)s, %(after_job)s::text))
ORDER BY i.domain, i.job_id
LIMIT %(limit)s;

-- name: tagged_jobs --
-- A page of the jobs with an attempt tagged tag_name = tag_value that started since since_at,
-- the newest tagged start ("at") first, by their latest attempt: job_tagged's read (0008) with
-- the page cursor as a bound of its scan. At most scan TAG rows are read (job_event_tag), newest
-- first from the cursor; when the scan is full, only the jobs tagged above its deepest row are
-- complete (floor_at, as in jobs_page: data.py reads again below it while the page is short).
-- The cursor is (at, domain, job_id), exclusive; without domain and job id it includes its
-- time; NULLs mean the first page. A job tagged again above the cursor was on an earlier page:
-- one probe of job_event_job each tells.
WITH scanned AS (
    SELECT r.domain, r.job_id, r.created_at
    FROM {job_event} AS r
    WHERE r.type = 'TAG' AND r.step_key = %(tag_name)s AND r.message = %(tag_value)s
      AND r.created_at >= COALESCE(%(since_at)s::timestamptz, '-infinity')
      AND r.created_at <= COALESCE(%(before_at)s::timestamptz, 'infinity')
      AND (%(domain)s::text IS NULL OR r.domain = %(domain)s)
    ORDER BY r.created_at DESC
    LIMIT %(scan)s
), floor AS (
    SELECT CASE WHEN count(*) >= %(scan)s THEN min(created_at) END AS at FROM scanned
), tagged AS (
    SELECT domain, job_id, max(created_at) AS at FROM scanned GROUP BY domain, job_id
)
-- one row even when no job qualifies: the floor still says where the next page starts
SELECT f.at AS floor_at, now() AS as_of, page.*
FROM floor AS f
LEFT JOIN LATERAL (
    SELECT latest.*, t.at AS active_at,
           (SELECT count(DISTINCT n.attempt) FROM {job_event} AS n
            WHERE n.domain = t.domain AND n.job_id = t.job_id) AS attempts
    FROM tagged AS t
    CROSS JOIN LATERAL {job_latest_attempt}(t.domain, t.job_id) AS latest
    WHERE (f.at IS NULL OR t.at > f.at)
      AND (%(before_at)s::timestamptz IS NULL
           OR (t.at, t.domain, t.job_id) < (%(before_at)s, %(before_domain)s, %(before_job_id)s)
           OR (%(before_domain)s::text IS NULL AND t.at <= %(before_at)s))
      AND (%(before_at)s::timestamptz IS NULL
           OR NOT EXISTS (SELECT FROM {job_event} AS x
                          WHERE x.domain = t.domain AND x.job_id = t.job_id AND x.type = 'TAG'
                            AND x.step_key = %(tag_name)s AND x.message = %(tag_value)s
                            AND x.created_at > %(before_at)s))
      AND (%(job_type)s::text IS NULL OR latest.job_type = %(job_type)s)
      AND (%(status)s::text IS NULL OR latest.status = %(status)s)
    ORDER BY t.at DESC, t.domain DESC, t.job_id DESC
    LIMIT %(limit)s
) AS page ON true
ORDER BY page.active_at DESC, page.domain DESC, page.job_id DESC;

-- name: status_counts --
-- How many attempts ended COMPLETED and FAILED since since_at, and how many steps are open now,
-- each counted to at most cap (the page says "cap+"): an index range each, never the table.
SELECT (SELECT count(*) FROM (SELECT FROM {job_log}
                              WHERE created_at >= COALESCE(%(since_at)s::timestamptz, '-infinity')
                                AND status = 'COMPLETED' LIMIT %(cap)s) AS c) AS completed,
       (SELECT count(*) FROM (SELECT FROM {job_log}
                              WHERE created_at >= COALESCE(%(since_at)s::timestamptz, '-infinity')
                                AND status = 'FAILED' LIMIT %(cap)s) AS f) AS failed,
       -- ordered as job_event_one_open_step: the planner, which takes far more rows for open
       -- steps than there are, would otherwise filter a scan of the table
       (SELECT count(*) FROM (SELECT FROM {job_event}
                              WHERE type = 'STEP' AND ended_at IS NULL
                              ORDER BY domain, job_id, attempt LIMIT %(cap)s) AS r)
           AS running;

-- name: job_rows --
-- Every row of one job's listed attempts (read.sql's job_attempt_choice: a few of a job
-- retried 10,000 times) but their log lines, without their detail and message (a job of 10,000
-- steps draws 200 of them: job_row_details reads those): steps (the waterfall), ordinary
-- events and tags, with the server's time of the read. The log lines shown are read apart
-- (read.sql's job_log_lines: one step's, up to 1,000 a step are kept).
SELECT id, attempt, type, step_key, step_status, trace_id, created_at, ended_at,
       GREATEST(created_at, heartbeat_at) AS seen_at,
       now() AS as_of
FROM {job_event}
WHERE domain = %(domain)s AND job_id = %(job_id)s AND type <> 'LOG'
  AND attempt = ANY(%(attempts)s::integer[])
ORDER BY attempt, created_at, id;

-- name: job_row_details --
-- The detail, message and span id of some rows of one job (those the page draws), by id.
SELECT id, detail, message, span_id
FROM {job_event}
WHERE id = ANY(%(ids)s) AND domain = %(domain)s AND job_id = %(job_id)s;

-- name: job_logs --
-- The final rows of the listed attempts of one job.
SELECT attempt, status, reason, detail, trace_id, created_at
FROM {job_log}
WHERE domain = %(domain)s AND job_id = %(job_id)s AND attempt = ANY(%(attempts)s::integer[])
ORDER BY attempt;

-- name: open_steps --
-- Open steps of the fleet, the longest silent first (the open steps `sweep` would settle first;
-- it also settles attempts that died between steps, which have none), those
-- silent for at least older_than; at most limit rows, and how many there are in all. The
-- candidates and their count come from job_event_open_gauges alone (an Index Only Scan, its
-- predicate as written there); only the rows shown are read from the table, by id. overdue:
-- running longer than its (job type, step key)'s limit in seconds (web/overdue.py: p99 x
-- factor), given as three arrays; a step without one is never overdue.
WITH shown AS (
    SELECT id, GREATEST(created_at, heartbeat_at) AS seen_at, count(*) OVER () AS total
    FROM ONLY {job_event}  -- the partitioned layout's children hold no open step
    WHERE (type = 'STEP' AND ended_at IS NULL) IS TRUE
      AND GREATEST(created_at, heartbeat_at) <= now() - %(older_than)s::interval
    ORDER BY seen_at, id
    LIMIT %(limit)s
), limits AS (
    SELECT * FROM unnest(%(job_types)s::text[], %(step_keys)s::text[], %(seconds)s::float8[])
        AS l(job_type, step_key, seconds)
)
SELECT e.domain, e.job_id, e.job_type, e.attempt, e.step_key, e.detail,
       e.created_at AS started_at, shown.seen_at, now() AS as_of, shown.total,
       COALESCE(e.created_at < now() - make_interval(secs => l.seconds), false) AS overdue
FROM shown
JOIN ONLY {job_event} AS e ON e.id = shown.id
LEFT JOIN limits AS l ON l.step_key = e.step_key AND l.job_type IS NOT DISTINCT FROM e.job_type
ORDER BY shown.seen_at, shown.id;

-- name: open_step_gauges --
-- GET /metrics: open steps by domain, job type and step, how many of them showed no sign of
-- life (start or heartbeat) for silent_after, and how many are overdue (as in open_steps). An
-- Index Only Scan of job_event_open_gauges (0013), which holds every column named here for the
-- open rows only: a scrape costs the number of open steps, not the table's size, and no visit
-- of their heap pages once vacuumed; the limits, one row per baseline, are hashed. The
-- condition is that index's predicate as written there (see 0013 for why IS TRUE).
WITH limits AS (
    SELECT * FROM unnest(%(job_types)s::text[], %(step_keys)s::text[], %(seconds)s::float8[])
        AS l(job_type, step_key, seconds)
)
SELECT e.domain, e.job_type, e.step_key, count(*) AS open,
       count(*) FILTER (WHERE GREATEST(e.created_at, e.heartbeat_at)
                              <= now() - %(silent_after)s::interval) AS silent,
       count(*) FILTER (WHERE e.created_at < now() - make_interval(secs => l.seconds))
           AS overdue
FROM ONLY {job_event} AS e  -- the partitioned layout's children hold no open step
LEFT JOIN limits AS l ON l.step_key = e.step_key AND l.job_type IS NOT DISTINCT FROM e.job_type
WHERE (e.type = 'STEP' AND e.ended_at IS NULL) IS TRUE
GROUP BY e.domain, e.job_type, e.step_key;

-- name: step_baselines --
-- The overdue baselines (web/overdue.py): per job type and step key, the p99 duration of the
-- steps completed since since_at (7 days ago), where at least min_samples did. Read by serve at
-- most once per refresh period, never per request: a range of job_event_recent (a closed step's
-- COALESCE(ended_at, created_at) is its end), planned for its window (unprepared), then the
-- completed steps' durations sorted per key.
SELECT e.job_type, e.step_key,
       percentile_cont(0.99) WITHIN GROUP (
           ORDER BY extract(epoch FROM {job_duration}(e.created_at, e.ended_at))::float8
       ) AS p99_seconds,
       count(*) AS samples
FROM {job_event} AS e
WHERE COALESCE(e.ended_at, e.created_at) >= %(since_at)s::timestamptz
  AND e.type = 'STEP' AND e.step_status = 'COMPLETED' AND e.ended_at IS NOT NULL
GROUP BY e.job_type, e.step_key
HAVING count(*) >= %(min_samples)s;

-- name: step_stats --
-- The job_step_duration view's numbers over a time window (steps closed since since_at), read
-- through job_event_recent instead of over every row kept.
SELECT job_type, step_key, steps, failed, p50_seconds, p95_seconds, max_seconds, last_ended_at
FROM {job_step_durations}(%(since_at)s::timestamptz)
ORDER BY job_type NULLS LAST, step_key;

-- name: retry_tax --
-- The retry tax of the attempts failed since since_at (job_retry_tax, migration 0017): per job
-- type, the steps costing failed attempts the most time first.
SELECT job_type, step_key, failed_attempts, failed_seconds, to_success_p50_seconds,
       to_success_p95_seconds
FROM {job_retry_tax}(%(since_at)s::timestamptz)
ORDER BY job_type NULLS LAST, failed_seconds DESC, step_key;

-- name: step_versions --
-- Regressions by release (issue 40): the steps closed since since_at of finished attempts, per
-- job type, step key and the service.version of the attempt's final row (migration 0018; rows
-- without one are left out): count, failures, failure ratio and p95. A version's place is its
-- first appearance (the earliest final row with it among these), never its text read as a
-- number; each row is compared with the previous version of the same step, and flagged when
-- both sides have min_samples steps and its p95 is more than p95_factor times the previous one
-- (p95_regressed) or its failure ratio rose by more than failure_points percentage points
-- (failure_regressed). Both sides are bounded by the window: the steps closed since since_at
-- (job_event_recent) of attempts whose final row is since since_at too (job_log_ended_attempt;
-- a final row follows its steps, so this leaves out only a step closed after its attempt
-- ended), matched on job_log's (domain, job_id, attempt) key; never history before the window.
-- Measured on 5 M rows: a hash join of the two ranges, or the planner's seq scan of job_log
-- when the window holds a large share of it (docs/read-side.md).
WITH closed AS MATERIALIZED (
    SELECT e.job_type, e.step_key, e.step_status, l.service_version, l.created_at AS ended_at,
           extract(epoch FROM {job_duration}(e.created_at, e.ended_at))::float8 AS seconds
    FROM {job_event} AS e
    JOIN {job_log} AS l
      ON l.domain = e.domain AND l.job_id = e.job_id AND l.attempt = e.attempt
    WHERE COALESCE(e.ended_at, e.created_at) >= COALESCE(%(since_at)s::timestamptz, '-infinity')
      AND e.type = 'STEP' AND e.ended_at IS NOT NULL AND e.step_status <> 'SKIPPED'
      AND l.created_at >= COALESCE(%(since_at)s::timestamptz, '-infinity')
      AND l.service_version IS NOT NULL
), firsts AS (
    SELECT service_version, min(ended_at) AS first_seen_at
    FROM closed
    GROUP BY service_version
), versions AS (
    SELECT c.job_type, c.step_key, c.service_version, f.first_seen_at, count(*) AS steps,
           count(*) FILTER (WHERE c.step_status = 'FAILED') AS failed,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY c.seconds) AS p95_seconds
    FROM closed AS c
    JOIN firsts AS f USING (service_version)
    GROUP BY c.job_type, c.step_key, c.service_version, f.first_seen_at
), compared AS (
    SELECT v.*, v.failed::float8 / v.steps AS failure_ratio,
           lag(v.service_version) OVER w AS previous_version,
           lag(v.steps) OVER w AS previous_steps,
           lag(v.failed::float8 / v.steps) OVER w AS previous_failure_ratio,
           lag(v.p95_seconds) OVER w AS previous_p95_seconds
    FROM versions AS v
    WINDOW w AS (PARTITION BY v.job_type, v.step_key
                 ORDER BY v.first_seen_at, v.service_version)
)
SELECT job_type, step_key, service_version, first_seen_at, steps, failed, failure_ratio,
       p95_seconds, previous_version, previous_steps, previous_failure_ratio,
       previous_p95_seconds,
       COALESCE(least(steps, previous_steps) >= %(min_samples)s
                AND p95_seconds > previous_p95_seconds * %(p95_factor)s::float8,
                false) AS p95_regressed,
       COALESCE(least(steps, previous_steps) >= %(min_samples)s
                AND (failure_ratio - previous_failure_ratio) * 100
                    > %(failure_points)s::float8,
                false) AS failure_regressed
FROM compared
ORDER BY job_type NULLS LAST, step_key, first_seen_at, service_version;

-- name: step_failures --
-- Recent failures of one step key of one job type, newest first, since since_at.
SELECT domain, job_id, attempt, step_key, message, detail, created_at AS started_at, ended_at
FROM {job_event}
WHERE COALESCE(ended_at, created_at) >= %(since_at)s::timestamptz
  AND type = 'STEP' AND step_status = 'FAILED' AND step_key = %(step_key)s
  AND job_type IS NOT DISTINCT FROM %(job_type)s
ORDER BY COALESCE(ended_at, created_at) DESC
LIMIT %(limit)s;
