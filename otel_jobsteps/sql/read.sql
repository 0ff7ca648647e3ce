-- Read queries of job_detail, list_jobs and `otel-jobsteps tail`. Same block format as
-- queries.sql: {job_event}, {job_log}, {job_attempt} and the function {job_latest_attempt} are
-- schema-qualified identifiers filled in with psycopg.sql; values are always %(name)s
-- parameters. Column names match the fields of the dataclasses in otel_jobsteps/query.py.

-- name: job_attempt_choice --
-- Which attempts of one job a read lists, oldest first: the newest `newest` numbered below
-- `before` (NULL: all), the first, the latest, the newest `failed` that failed, and `attempt`
-- (NULL: none); each with its place among all the job's attempts (1 for the first) and how
-- many there are (`total`): the attempts between two listed ones are left out, and counted.
-- Every number is read (index only: the job's range of each table's (domain, job_id, attempt)
-- index), never an attempt's summary: job_attempts computes those of the listed ones only.
WITH number AS MATERIALIZED (
    SELECT attempt FROM {job_event} WHERE domain = %(domain)s AND job_id = %(job_id)s
    UNION
    SELECT attempt FROM {job_log} WHERE domain = %(domain)s AND job_id = %(job_id)s
), chosen AS (
    (SELECT attempt FROM number
     WHERE %(before)s::integer IS NULL OR attempt < %(before)s
     ORDER BY attempt DESC
     LIMIT %(newest)s)
    UNION
    SELECT max(attempt) FROM number
    UNION
    SELECT min(attempt) FROM number
    UNION
    (SELECT attempt FROM {job_log}
     WHERE domain = %(domain)s AND job_id = %(job_id)s AND status = 'FAILED'
     ORDER BY attempt DESC
     LIMIT %(failed)s)
    UNION
    SELECT attempt FROM number WHERE attempt = %(attempt)s
)
SELECT attempt, place, total
FROM (SELECT attempt, row_number() OVER (ORDER BY attempt) AS place, count(*) OVER () AS total
      FROM number) AS ranked
WHERE attempt = ANY(ARRAY(SELECT attempt FROM chosen))
ORDER BY attempt;

-- name: job_attempts --
-- The attempts of one job numbered in attempts (job_attempt_choice's), oldest first, with the
-- server's time of the read. job_attempt (0016) computes each by index probes of its number.
SELECT attempt, job_type, status, reason, error, last_step, open_step, started_at,
       processing_started_at, ended_at, last_activity_at, stalled_count,
       now() AS as_of
FROM {job_attempt}
WHERE domain = %(domain)s AND job_id = %(job_id)s AND attempt = ANY(%(attempts)s::integer[])
ORDER BY attempt;

-- name: job_stalled --
-- How many STALLED events one job has, over all its attempts.
SELECT count(*) AS stalled
FROM {job_event}
WHERE domain = %(domain)s AND job_id = %(job_id)s AND type = 'STALLED';

-- name: job_steps --
-- The STEP rows of one attempt in the order they started.
SELECT step_key AS key,
       step_status AS status,
       created_at AS started_at,
       ended_at,
       {job_duration}(created_at, ended_at) AS duration,
       detail,
       message
FROM {job_event}
WHERE domain = %(domain)s AND job_id = %(job_id)s AND attempt = %(attempt)s
  AND type = 'STEP'
ORDER BY created_at, id;

-- name: job_events --
-- The ordinary events of one job (neither STEP, TAG nor LOG rows) of the attempts listed, in
-- the order they happened.
SELECT attempt, type, message, detail, created_at
FROM {job_event}
WHERE domain = %(domain)s AND job_id = %(job_id)s AND type NOT IN ('STEP', 'TAG', 'LOG')
  AND attempt = ANY(%(attempts)s::integer[])
ORDER BY created_at, id;

-- name: job_log_lines --
-- The newest limit log lines (LOG rows) of one attempt, newest first (the caller turns them
-- round): of every step if every, else those between steps and step_key's. One range of
-- job_event_log (0010), whatever else the job has.
SELECT attempt, step_key, created_at AS time, message, detail, trace_id, span_id
FROM {job_event}
WHERE domain = %(domain)s AND job_id = %(job_id)s AND attempt = %(attempt)s AND type = 'LOG'
  AND (%(every)s::boolean OR step_key IS NULL OR step_key = %(step_key)s)
ORDER BY created_at DESC, id DESC
LIMIT %(limit)s;

-- name: job_log_entry --
-- The final row of one attempt, if it has one.
SELECT attempt, status, reason, detail, trace_id, created_at
FROM {job_log}
WHERE domain = %(domain)s AND job_id = %(job_id)s AND attempt = %(attempt)s;

-- name: list_jobs --
-- The latest attempt of jobs touched since the cutoff (no cutoff: every job), newest first.
-- Candidates are read through indexes, bounded by the cutoff: rows written or closed since
-- (job_event_recent_change), open steps with a heartbeat since (job_event_one_open_step) and final rows
-- since (job_log_ended_attempt); the filters then apply to each candidate's latest attempt. The
-- cutoff is written out where an index reads it, so the planner estimates with its value. It is
-- a timestamp (query.py turns "the last hour" into one with the server's clock) and the
-- statement is planned for it each time: in the partitioned layout a constant cutoff lets the
-- planner skip the children older than the window (CHECK rows_before_upper_bound).
-- The in_domain placeholder is empty, or a condition on the domain parameter (query.py): one
-- statement per case, so even a generic plan of the domain case reads that domain's rows only
-- (domain leads the indexes it uses).
WITH candidate AS (
    SELECT domain, job_id
    FROM {job_event}
    WHERE COALESCE(ended_at, created_at)
          >= COALESCE(%(since_at)s::timestamptz, '-infinity')
      AND type <> 'LOG'  -- a log line is no change of the job (0010's job_attempt)
      {in_domain}
    UNION
    -- an open step started before the cutoff is active only if a heartbeat came since
    SELECT domain, job_id
    FROM {job_event}
    WHERE type = 'STEP' AND ended_at IS NULL {in_domain}
      AND heartbeat_at
          >= COALESCE(%(since_at)s::timestamptz, '-infinity')
    UNION
    SELECT domain, job_id
    FROM {job_log}
    WHERE created_at
          >= COALESCE(%(since_at)s::timestamptz, '-infinity')
      {in_domain}
)
SELECT c.domain, c.job_id, latest.attempt, latest.job_type, latest.status, latest.reason,
       latest.error, latest.last_step, latest.open_step, latest.started_at,
       latest.processing_started_at, latest.ended_at, latest.last_activity_at,
       latest.stalled_count
FROM candidate AS c
CROSS JOIN LATERAL {job_latest_attempt}(c.domain, c.job_id) AS latest
WHERE (%(job_type)s::text IS NULL OR latest.job_type = %(job_type)s)
  AND (%(status)s::text IS NULL OR latest.status = %(status)s)
  AND latest.last_activity_at
      >= COALESCE(%(since_at)s::timestamptz, '-infinity')
ORDER BY latest.last_activity_at DESC, c.domain, c.job_id
LIMIT %(limit)s;

-- name: list_tagged_jobs --
-- list_jobs with a tag: the jobs with an attempt tagged tag_name = tag_value that started since
-- the cutoff, newest tagged start first, by their latest attempt (job_tagged: the partial index
-- job_event_tag, at most scan tagged attempts read).
SELECT t.domain, t.job_id, latest.attempt, latest.job_type, latest.status, latest.reason,
       latest.error, latest.last_step, latest.open_step, latest.started_at,
       latest.processing_started_at, latest.ended_at, latest.last_activity_at,
       latest.stalled_count
FROM {job_tagged}(%(tag_name)s, %(tag_value)s, %(since_at)s::timestamptz, %(domain)s,
                  %(job_type)s, %(status)s, %(scan)s, %(limit)s) AS t
CROSS JOIN LATERAL {job_latest_attempt}(t.domain, t.job_id) AS latest
ORDER BY t.tagged_at DESC, t.domain, t.job_id;

-- name: tail_start --
-- Where following starts: the highest id so far and the ids of the steps open now. Run once per
-- follower, so always planned for its values: the test on a missing domain folds away.
SELECT COALESCE((SELECT max(id) FROM {job_event}), 0) AS last_id,
       ARRAY(SELECT id
             FROM {job_event}
             WHERE type = 'STEP' AND ended_at IS NULL
               AND (%(domain)s::text IS NULL OR domain = %(domain)s)) AS open_ids;

-- name: tail_changes --
-- Rows written after the last id seen or in a recent gap below it (a transaction that committed
-- late), and steps seen open that have closed since, by id. Two branches, each an index scan of
-- the primary key: new rows walk it from after_id, known ids are looked up; they never overlap
-- (id > after_id, id <= after_id). The domain is a filter either way (no index orders a
-- domain's rows by id), so one statement serves with and without it.
SELECT id, domain, job_id, attempt, type, step_key, step_status, message, detail,
       created_at, ended_at
FROM (
    (SELECT id, domain, job_id, attempt, type, step_key, step_status, message, detail,
            created_at, ended_at
     FROM {job_event}
     WHERE id > %(after_id)s
       AND (%(domain)s::text IS NULL OR domain = %(domain)s)
     ORDER BY id
     LIMIT %(limit)s)
    UNION ALL
    SELECT id, domain, job_id, attempt, type, step_key, step_status, message, detail,
           created_at, ended_at
    FROM {job_event}
    WHERE id = ANY(%(gap_ids)s::bigint[] || %(open_ids)s::bigint[])
      AND id <= %(after_id)s
      AND (id = ANY(%(gap_ids)s::bigint[]) OR ended_at IS NOT NULL)
      AND (%(domain)s::text IS NULL OR domain = %(domain)s)
) AS change
ORDER BY id
LIMIT %(limit)s;

-- name: attempt_tags --
-- The tags of the attempts listed (TAG rows: the name in step_key, the value in message), in
-- the order they were written.
SELECT attempt, step_key AS name, message AS value
FROM {job_event}
WHERE domain = %(domain)s AND job_id = %(job_id)s AND attempt = ANY(%(attempts)s::integer[])
  AND type = 'TAG'
ORDER BY id;

-- name: attempt_resources --
-- The resource the job span of each attempt listed ran under, kept with its final row (0018).
SELECT attempt, service_name AS "service.name", service_version AS "service.version",
       host_name AS "host.name", service_instance_id AS "service.instance.id"
FROM {job_log}
WHERE domain = %(domain)s AND job_id = %(job_id)s AND attempt = ANY(%(attempts)s::integer[]);
