-- The schema's version, as `schema.check_schema_version` reads it.

-- name: version_readable --
-- Whether this role may read the version table (no row: there is none). Asked first, so a role
-- that may not read it (schemas before migration 0015) leaves no error in the server's log.
SELECT has_schema_privilege(n.oid, 'USAGE') AND has_table_privilege(c.oid, 'SELECT')
FROM pg_namespace AS n
JOIN pg_class AS c ON c.relnamespace = n.oid
WHERE n.nspname = %(schema)s AND c.relname = %(table)s;

-- name: newest_version --
SELECT max(version) FROM {version_table};
