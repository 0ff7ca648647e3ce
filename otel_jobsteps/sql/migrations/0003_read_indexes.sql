-- Indexes of the read side and of prune. Runs with search_path set to the target schema, so
-- names stay unqualified here. Nothing new on job_event: every index there costs each insert of
-- the writer, and job_event_recent, job_event_one_open_step and job_event_job already serve
-- list_jobs, tail and prune. IF NOT EXISTS: on a big table an operator may build it
-- CONCURRENTLY beforehand.

-- When attempts ended, with the attempt: prune walks the final rows past its cutoff oldest
-- first, (created_at, id) being the key it resumes from, and list_jobs finds the ones since its
-- cutoff, both in this index alone (index-only) where job_log_recent needed a heap visit per
-- row. job_log gets one row per attempt, so its write cost is small, and it replaces
-- job_log_recent: same leading key, and a btree is read in either direction.
CREATE INDEX IF NOT EXISTS job_log_ended_attempt
    ON job_log (created_at, id) INCLUDE (domain, job_id, attempt);

DROP INDEX IF EXISTS job_log_recent;
