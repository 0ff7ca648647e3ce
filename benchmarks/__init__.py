"""Benchmarks for otel_jobsteps: the targets of issue 4, measured side by side in one run.

Run ``python -m benchmarks [--dsn DSN] [--quick]``; without a DSN an embedded PostgreSQL is
started. Every benchmark works in throwaway ``bench_*`` databases it drops afterwards, and only
talks to a server on the loopback interface or a local socket.
"""
