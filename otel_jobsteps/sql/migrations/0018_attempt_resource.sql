-- The resource of each attempt (issue 40, DESIGN "Per attempt resource"): service.name,
-- service.version, host.name and service.instance.id of the job span's resource, kept with the
-- attempt's final row by both doors. Runs with search_path set to the target schema. Nullable:
-- older rows, and final rows no job span wrote (a sweep's, an abandoned attempt's), have none.
-- job_log is one table in both layouts, so the partitioned layout needs nothing more.
ALTER TABLE job_log
    ADD COLUMN service_name text,
    ADD COLUMN service_version text,
    ADD COLUMN host_name text,
    ADD COLUMN service_instance_id text;
