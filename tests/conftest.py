"""Fixtures any test folder may use, as plugins per concern; folder conftests add their own."""

import signal

pytest_plugins = [
    "tests.plugins.database",
    "tests.plugins.tracing",
    "tests.plugins.faults",
    "tests.plugins.collect",
]


def pytest_configure() -> None:
    """Tests stop ``tail`` with SIGINT, as Ctrl-C does. A suite started with SIGINT ignored (a
    background job of a non-interactive shell) would hand that on to every child it starts."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
