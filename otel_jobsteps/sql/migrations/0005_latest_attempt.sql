-- The latest attempt of one job, as a job_attempt row: what list_jobs and the web's jobs and
-- search pages read for each job they list. Runs with search_path set to the target schema.
--
-- A set-returning SQL function (not a view): the read side joins it LATERAL per candidate job,
-- and the planner inlines it there, so each job reads only its own attempts, newest first, and
-- stops at the first. job_current_attempt says the same for every job at once, and a join
-- cannot filter it before it is computed whole (seconds on a big table, for a page of 50).
-- The standard body (BEGIN ATOMIC) binds job_attempt here, in this schema, whatever the
-- caller's search_path. PARALLEL SAFE: a query that names an unsafe function is planned
-- without parallel workers, even where the function is inlined.
CREATE FUNCTION job_latest_attempt(job_domain text, job_key text)
RETURNS SETOF job_attempt
LANGUAGE sql STABLE PARALLEL SAFE
BEGIN ATOMIC
    SELECT *
    FROM job_attempt AS a
    WHERE a.domain = job_domain AND a.job_id = job_key
    ORDER BY a.attempt DESC
    LIMIT 1;
END;

COMMENT ON FUNCTION job_latest_attempt(text, text) IS
    'The latest attempt of one job (domain, job id), as a job_attempt row.';
