"""Rules for a secret token (serve's page token; an operator token will follow the same): long
enough not to be guessed, compared in constant time, and guessing slowed per client.

`FailureLimiter` is the slowing: after `FREE_FAILURES` wrong tokens from one remote address, each
further one closes the door to that address for a window that doubles from `FIRST_WAIT_S` up
to `MAX_WAIT_S` (answered 429 with Retry-After, the token not even compared); a right token
forgets the address. At most `MAX_CLIENTS` addresses are remembered, the least recently failed
forgotten first, so memory stays bounded whoever knocks.
"""

from __future__ import annotations

import hmac
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from .._cli.arguments import utf8
from ..errors import ConfigurationError

__all__ = [
    "FIRST_WAIT_S",
    "FORGET_AFTER_S",
    "FREE_FAILURES",
    "MAX_CLIENTS",
    "MAX_WAIT_S",
    "MIN_TOKEN_LENGTH",
    "TOKEN_RECIPE",
    "FailureLimiter",
    "check_token",
    "same_token",
]

MIN_TOKEN_LENGTH = 16
TOKEN_RECIPE = 'python -c "import secrets; print(secrets.token_urlsafe(32))"'
FREE_FAILURES = 5  # wrong tokens an address may send before it has to wait (typos)
FIRST_WAIT_S = 1.0
MAX_WAIT_S = 600.0
FORGET_AFTER_S = 3600.0  # an address quiet for this long starts afresh
MAX_CLIENTS = 10_000


def check_token(token: str, name: str) -> None:
    """Refuse a token that is empty, not UTF-8 (an environment variable's undecodable bytes) or
    shorter than `MIN_TOKEN_LENGTH` (``name`` says where it came from: an option or an
    environment variable), saying how to make a good one."""
    utf8(token, name)
    if not token.strip():
        raise ConfigurationError(f"{name} must not be empty")
    if len(token) < MIN_TOKEN_LENGTH:
        raise ConfigurationError(
            f"{name} is too short to resist guessing (at least {MIN_TOKEN_LENGTH} characters, "
            f"it has {len(token)}); make one with: {TOKEN_RECIPE}"
        )


def same_token(given: str, expected: str) -> bool:
    """Constant-time comparison: the time taken tells nothing of how much of ``given`` matched."""
    return hmac.compare_digest(given.encode(), expected.encode())


@dataclass(slots=True)
class _Failures:
    count: int
    last_at: float  # when the latest counted failure came
    blocked_until: float


class FailureLimiter:
    """Per-client backoff of wrong tokens; ``clock`` (monotonic seconds) is injectable for tests.

    A caller asks `retry_after` first (a number: refuse with 429 and that Retry-After, without
    comparing the token), then reports `failed` or `succeeded`.
    """

    def __init__(
        self,
        *,
        free_failures: int = FREE_FAILURES,
        first_wait_s: float = FIRST_WAIT_S,
        max_wait_s: float = MAX_WAIT_S,
        forget_after_s: float = FORGET_AFTER_S,
        max_clients: int = MAX_CLIENTS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._free, self._first, self._max = free_failures, first_wait_s, max_wait_s
        self._forget_after, self._max_clients, self._clock = forget_after_s, max_clients, clock
        self._clients: OrderedDict[str, _Failures] = OrderedDict()  # least recent failure first
        self._lock = threading.Lock()

    def retry_after(self, client: str) -> int | None:
        """Whole seconds ``client`` must wait before its next try is looked at, or None."""
        with self._lock:
            found = self._current(client)
            if found is None:
                return None
            left = found.blocked_until - self._clock()
            return math.ceil(left) if left > 0 else None

    def failed(self, client: str) -> None:
        """``client`` sent a wrong token: past the free ones, it waits a doubled window."""
        with self._lock:
            now = self._clock()
            found = self._current(client)
            if found is None:
                found = self._clients[client] = _Failures(0, now, now)
                while len(self._clients) > self._max_clients:
                    self._clients.popitem(last=False)
            self._clients.move_to_end(client)
            found.count += 1
            found.last_at = now
            over = found.count - self._free
            if over >= 0:
                found.blocked_until = now + min(self._max, self._first * 2.0 ** min(over, 64))

    def succeeded(self, client: str) -> None:
        """``client`` sent the right token: its failures are forgotten."""
        with self._lock:
            self._clients.pop(client, None)

    def __len__(self) -> int:
        return len(self._clients)

    def _current(self, client: str) -> _Failures | None:
        """``client``'s failures, unless it has been quiet for `FORGET_AFTER_S` (then dropped)."""
        found = self._clients.get(client)
        if found is not None and self._clock() - found.last_at >= self._forget_after:
            del self._clients[client]
            return None
        return found
