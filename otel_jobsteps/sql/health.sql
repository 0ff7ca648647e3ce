-- The readiness checks of `serve` and `collect` (GET /readyz).

-- name: readiness --
-- One row: whether this session may write (a read-only transaction; a standby in recovery),
-- joined to the rights on its tables this role lacks, one row each (a table that is not there
-- lacks them all). has_table_privilege with several rights asks for any: one right a row.
SELECT s.read_only, s.in_recovery, m.table_name, m.right_name, m.absent
FROM (SELECT current_setting('transaction_read_only')::boolean, pg_is_in_recovery())
     AS s (read_only, in_recovery)
LEFT JOIN (
    SELECT t.name, r.name, c.oid IS NULL
    FROM unnest(%(tables)s::text[]) AS t (name)
    CROSS JOIN unnest(%(rights)s::text[]) AS r (name)
    LEFT JOIN pg_namespace AS n ON n.nspname = %(schema)s
    LEFT JOIN pg_class AS c ON c.relnamespace = n.oid AND c.relname = t.name
    WHERE c.oid IS NULL
       OR NOT has_schema_privilege(n.oid, 'USAGE')
       OR NOT has_table_privilege(c.oid, r.name)
) AS m (table_name, right_name, absent) ON true
ORDER BY 3, 4;
