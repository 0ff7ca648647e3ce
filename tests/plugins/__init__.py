"""Pytest plugins of the test suite (see pyproject addopts)."""
