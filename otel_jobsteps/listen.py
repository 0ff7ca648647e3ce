"""The listen addresses of the two servers (``serve``, ``collect``): ``HOST:PORT``."""

from __future__ import annotations

from .errors import ConfigurationError

__all__ = ["parse_listen"]


def parse_listen(
    text: str, *, option: str = "--listen", example: str = "127.0.0.1:8080"
) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8080`` for IPv6) as host and port; `ConfigurationError` if not."""
    host, sep, port = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigurationError(f"{option} must be HOST:PORT, e.g. {example}; got {text!r}")
    return host, int(port)
