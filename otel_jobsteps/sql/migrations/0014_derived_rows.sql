-- Which rows collect derived from staged spans: true on collect's writes, NULL on everyone
-- else's (the processor, sweep, a watcher's record_job_event, a program's own INSERT). A full
-- re-derivation of a job deletes and rewrites only its true rows (docs/ingest.md, "Whose rows").
-- The rows already there read true: until now collect took every row of its attempts for its
-- own, and it touches no other job's rows. A constant default dropped at once is catalog work
-- only (PostgreSQL 11+ keeps it as the value of the rows before): no table is rewritten, and
-- each inheritance child of the partitioned layout gets the column the same way.
ALTER TABLE job_event ADD COLUMN derived boolean DEFAULT true;
ALTER TABLE job_event ALTER COLUMN derived DROP DEFAULT;
ALTER TABLE job_log ADD COLUMN derived boolean DEFAULT true;
ALTER TABLE job_log ALTER COLUMN derived DROP DEFAULT;
