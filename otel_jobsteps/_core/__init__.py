"""The interpretation both doors share, pure: facts -> commands -> row operations.

The translation of spans and log records into commands, the sequential step rules, the
bound on open attempts, the progress debounce, text cleaning and limits, the words of the
tables. No I/O: nothing here imports psycopg, the environment, the SDK's internals or a door
(tests/unit/test_layout.py keeps it so)."""
