"""The package's own telemetry: its logger, its counters, the step metrics of what was
committed, and their Prometheus exposition."""
