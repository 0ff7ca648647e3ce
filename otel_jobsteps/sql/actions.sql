-- Statements of the actions runner (otel_jobsteps/actions/runner.py). Same block format as
-- read.sql: {job_event}, {job_log} and {job_latest_attempt} are schema-qualified identifiers;
-- values are %(name)s parameters. An action is an ordinary job_event row of type 'ACTION'.

-- name: lock_job --
-- One action at a time per job, held to the end of the transaction: a double click waits for
-- the first action's row and then finds it by its idempotency key.
SELECT pg_advisory_xact_lock(hashtextextended('otel_jobsteps.action:' || %(domain)s
                                              || chr(1) || %(job_id)s, 0));

-- name: earlier_action --
-- The action an idempotency key already named for this job (job_event_job narrows to the job).
SELECT id, attempt, detail FROM {job_event}
WHERE domain = %(domain)s AND job_id = %(job_id)s AND type = 'ACTION'
  AND detail ->> 'idempotency_key' = %(key)s
ORDER BY id
LIMIT 1;

-- name: latest_attempt --
-- The job's latest attempt (its number, status and type); no row: nothing recorded yet.
SELECT attempt, status, job_type FROM {job_latest_attempt}(%(domain)s, %(job_id)s);

-- name: insert_action --
-- The audit row of one action, on the attempt it acted on.
INSERT INTO {job_event} (domain, job_id, job_type, attempt, type, detail, message)
VALUES (%(domain)s, %(job_id)s, %(job_type)s, %(attempt)s, 'ACTION', %(detail)s, %(message)s)
RETURNING id;

-- name: cancelled_attempt --
-- A job cancelled before any run was recorded: its attempt ends here, FAILED 'cancelled', so the
-- audit row alone does not read as a running attempt.
INSERT INTO {job_log} (domain, job_id, job_type, attempt, status, reason, detail)
VALUES (%(domain)s, %(job_id)s, %(job_type)s, %(attempt)s, 'FAILED', 'cancelled', %(detail)s)
ON CONFLICT (domain, job_id, attempt) DO NOTHING;

-- name: prefixed_jobs --
-- Bulk actions' id prefix: the jobs of one domain whose id starts with prefix (a range of
-- job_event_job, upper the prefix's successor), by their latest attempt, filtered as the jobs
-- list filters (type, status, active since), in job id order, at most limit.
SELECT d.domain, d.job_id
FROM (SELECT DISTINCT domain, job_id FROM {job_event}
      WHERE domain = %(domain)s AND job_id >= %(prefix)s AND job_id < %(upper)s
        AND starts_with(job_id, %(prefix)s)) AS d
CROSS JOIN LATERAL {job_latest_attempt}(d.domain, d.job_id) AS latest
WHERE (%(job_type)s::text IS NULL OR latest.job_type = %(job_type)s)
  AND (%(status)s::text IS NULL OR latest.status = %(status)s)
  AND (%(since)s::interval IS NULL OR latest.last_activity_at >= now() - %(since)s::interval)
ORDER BY d.job_id
LIMIT %(limit)s;
