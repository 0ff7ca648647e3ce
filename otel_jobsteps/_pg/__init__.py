"""PostgreSQL access: connections, the store that writes a batch, the step numbers the CLI
and the web page read, the loader for reads of far times."""
