"""The listen addresses of the two servers (``serve``, ``collect``): ``HOST:PORT``."""

from __future__ import annotations

import errno
import socket

from ..errors import ConfigurationError

__all__ = ["check_free", "parse_listen", "url_host"]


def parse_listen(
    text: str, *, option: str = "--listen", example: str = "127.0.0.1:8080"
) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8080`` for IPv6) as host and port; `ConfigurationError` if not."""
    host, sep, port = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigurationError(f"{option} must be HOST:PORT, e.g. {example}; got {text!r}")
    return host, int(port)


def url_host(host: str) -> str:
    """``host`` as a URL or ``HOST:PORT`` spells it: an IPv6 address in brackets."""
    return f"[{host}]" if ":" in host else host


def check_free(host: str, port: int, *, option: str = "--listen") -> None:
    """`ConfigurationError` in one line unless ``host:port`` can be bound now (as the server
    binds, SO_REUSEADDR): not a traceback, nor gRPC's SO_REUSEPORT sharing it silently."""
    shown = f"{url_host(host)}:{port}"
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        for family, kind, proto, _, address in found:
            with socket.socket(family, kind, proto) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                probe.bind(address)
    except socket.gaierror as error:
        raise ConfigurationError(f"cannot listen on {shown}: {error.strerror}") from None
    except OSError as error:
        if error.errno == errno.EADDRINUSE:
            raise ConfigurationError(
                f"cannot listen on {shown}: the port is in use by another process"
                f" (stop it or pass another {option})"
            ) from None
        raise ConfigurationError(f"cannot listen on {shown}: {error.strerror}") from None
