"""Fixtures any test folder may use, as plugins per concern; folder conftests add their own."""

pytest_plugins = [
    "tests.plugins.database",
    "tests.plugins.tracing",
    "tests.plugins.faults",
    "tests.plugins.collect",
]
