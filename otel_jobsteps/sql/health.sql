-- The readiness checks of `serve` and `collect` (GET /readyz).

-- name: missing_rights --
-- The rights on its tables this role lacks (a table that is not there lacks them all), and
-- whether the schema is usable at all: has_table_privilege with several rights asks for any.
SELECT t.name AS table_name, r.name AS right_name, c.oid IS NULL AS absent
FROM unnest(%(tables)s::text[]) AS t (name)
CROSS JOIN unnest(%(rights)s::text[]) AS r (name)
LEFT JOIN pg_namespace AS n ON n.nspname = %(schema)s
LEFT JOIN pg_class AS c ON c.relnamespace = n.oid AND c.relname = t.name
WHERE c.oid IS NULL
   OR NOT has_schema_privilege(n.oid, 'USAGE')
   OR NOT has_table_privilege(c.oid, r.name)
ORDER BY 1, 2;
