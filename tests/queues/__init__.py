"""Queue adapters with real workers and brokers."""

import pytest

# Before conftest imports it: its assertion helpers get pytest's rewriting.
pytest.register_assert_rewrite("tests.queues.support")
