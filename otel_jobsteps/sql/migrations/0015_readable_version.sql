-- Every role may read which migrations are applied (version numbers, names and times: nothing
-- about jobs), so the writer, collect and serve, whose roles read no other table of ours, refuse
-- a schema newer than their code knows (schema.check_schema_version).
GRANT SELECT ON otel_jobsteps_migration TO PUBLIC;
