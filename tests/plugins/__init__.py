"""Pytest plugins of the test suite, one per concern, registered in ``tests/conftest.py``."""
