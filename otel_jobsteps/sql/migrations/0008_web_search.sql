-- The jobs page's counts per status: attempts ended FAILED (or COMPLETED) in a window are an
-- index-only range here; job_log_ended_attempt has no status, so counting the failures of a
-- day visited every final row of that day. job_log gets one row per attempt: a small write
-- cost. IF NOT EXISTS: on a big table an operator may build it CONCURRENTLY beforehand.
CREATE INDEX IF NOT EXISTS job_log_ended_status ON job_log (status, created_at);
