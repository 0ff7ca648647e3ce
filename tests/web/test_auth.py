"""The page token's rules: long enough not to be guessed, and guessing slowed per client (a
backoff with an injected clock; a real server told apart by source address, not by header)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from starlette.testclient import TestClient

from otel_jobsteps.cli import FORWARDED_ENV, main
from otel_jobsteps.errors import ConfigurationError
from otel_jobsteps.web import create_app
from otel_jobsteps.web.auth import MIN_TOKEN_LENGTH, TOKEN_RECIPE, FailureLimiter, check_token
from otel_jobsteps.web.security import TOKEN_COOKIE, TOKEN_ENV, TokenMiddleware
from otel_jobsteps.web.server import UVICORN_OPTIONS, uvicorn_options
from tests.ops.test_services import Service
from tests.web.support import live_server

TOKEN = "a-token-nobody-guesses-in-time"
WRONG = {"authorization": "Bearer not-the-token-at-all"}
RIGHT = {"authorization": f"Bearer {TOKEN}"}


class Clock:
    """A monotonic clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# -- a token long enough ----------------------------------------------------------------------


@pytest.mark.parametrize("token", ["7", "x" * (MIN_TOKEN_LENGTH - 1), " " * 20])
def test_a_short_or_blank_token_is_refused(token: str) -> None:
    with pytest.raises(ConfigurationError, match="--token"):
        check_token(token, "--token")


def test_a_token_of_the_minimum_length_is_taken() -> None:
    check_token("x" * MIN_TOKEN_LENGTH, "--token")


def test_serve_refuses_a_short_token_option_in_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    assert main(["serve", "--dsn", "postgresql://127.0.0.1:1/none", "--token", "7"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "--token is too short" in err
    assert f"at least {MIN_TOKEN_LENGTH} characters" in err
    assert TOKEN_RECIPE in err


def test_serve_refuses_a_short_token_from_the_environment(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TOKEN_ENV, "hunter2")
    assert main(["serve", "--dsn", "postgresql://127.0.0.1:1/none"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"{TOKEN_ENV} is too short" in err
    assert TOKEN_RECIPE in err


# -- the backoff, on an injected clock ---------------------------------------------------------


def test_failures_past_the_free_ones_wait_a_doubling_window() -> None:
    clock = Clock()
    limiter = FailureLimiter(free_failures=3, first_wait_s=1.0, max_wait_s=5.0, clock=clock)
    for _ in range(2):
        limiter.failed("a")
        assert limiter.retry_after("a") is None  # typos are free
    waits = []
    for _ in range(5):
        limiter.failed("a")
        wait = limiter.retry_after("a")
        assert wait is not None
        waits.append(wait)
        clock.now += wait - 0.5
        assert limiter.retry_after("a") == 1  # still closed, rounded up
        clock.now += 0.5
        assert limiter.retry_after("a") is None  # open again for one more try
    assert waits == [1, 2, 4, 5, 5]  # doubling, up to max_wait_s
    assert limiter.retry_after("b") is None  # another client is not slowed


def test_a_right_token_forgets_the_failures() -> None:
    clock = Clock()
    limiter = FailureLimiter(free_failures=2, clock=clock)
    limiter.failed("a")
    limiter.succeeded("a")
    limiter.failed("a")
    assert limiter.retry_after("a") is None  # counting starts again from zero
    limiter.failed("a")
    assert limiter.retry_after("a") == 1


def test_a_quiet_client_starts_afresh() -> None:
    clock = Clock()
    limiter = FailureLimiter(free_failures=1, max_wait_s=4.0, forget_after_s=60.0, clock=clock)
    for _ in range(4):
        limiter.failed("a")
        clock.now += 4.0
    clock.now += 60.0
    limiter.failed("a")
    assert limiter.retry_after("a") == 1  # the first window again, not the fifth


def test_the_clients_remembered_are_bounded_the_least_recent_forgotten() -> None:
    limiter = FailureLimiter(free_failures=1, max_clients=3, clock=Clock())
    for client in ("a", "b", "c", "a", "d", "e"):
        limiter.failed(client)
    assert len(limiter) == 3
    assert limiter.retry_after("b") is None  # forgotten
    assert limiter.retry_after("c") is None
    assert all(limiter.retry_after(client) for client in ("a", "d", "e"))


# -- the middleware ----------------------------------------------------------------------------


def _hello(_request: Request) -> Response:
    return PlainTextResponse("hello")


def _client(limiter: FailureLimiter) -> TestClient:
    app = Starlette(routes=[Route(path, _hello) for path in ("/page", "/api/jobs")])
    return TestClient(TokenMiddleware(app, TOKEN, limiter), follow_redirects=False)


def test_a_blocked_client_gets_429_even_with_the_right_token() -> None:
    clock = Clock()
    client = _client(FailureLimiter(free_failures=2, first_wait_s=30.0, clock=clock))
    assert [client.get("/page", headers=WRONG).status_code for _ in range(2)] == [401, 401]
    page = client.get("/page", headers=RIGHT)
    api = client.get("/api/jobs", headers=RIGHT)
    visit = client.get(f"/page?token={TOKEN}")
    clock.now += 30.0
    after = client.get("/api/jobs", headers=RIGHT)

    assert (page.status_code, page.headers["retry-after"]) == (429, "30")
    assert "Too many wrong tokens: retry in 30 s." in page.text
    assert (api.status_code, api.json()) == (429, {"error": "too many wrong tokens"})
    assert api.headers["retry-after"] == "30"
    assert visit.status_code == 429
    assert after.status_code == 200


def test_a_request_without_a_token_is_no_guess() -> None:
    limiter = FailureLimiter(free_failures=1, clock=Clock())
    client = _client(limiter)
    for _ in range(3):
        assert client.get("/page").status_code == 401
    assert len(limiter) == 0


def test_a_wrong_cookie_is_cleared_so_it_counts_once() -> None:
    limiter = FailureLimiter(clock=Clock())
    refused = _client(limiter).get("/page", headers={"cookie": f"{TOKEN_COOKIE}=an-old-token"})

    assert refused.status_code == 401
    cleared = refused.headers["set-cookie"]
    assert cleared.startswith(f'{TOKEN_COOKIE}="";')
    assert "Max-Age=0" in cleared  # the browser drops it: its next refresh sends no token
    assert len(limiter) == 1


# -- a real server ------------------------------------------------------------------------------


def _get(base: str, headers: dict[str, str], source: str = "127.0.0.1") -> httpx.Response:
    transport = httpx.HTTPTransport(local_address=source)
    with httpx.Client(transport=transport, timeout=10) as client:
        return client.get(base + "/api/jobs", headers=headers)


def test_wrong_tokens_slow_their_address_only(dsn: str) -> None:
    clock = Clock()  # frozen: the window cannot run out while the test looks
    limiter = FailureLimiter(clock=clock)
    app = create_app(dsn, token=TOKEN, failures=limiter)
    with live_server(app, **UVICORN_OPTIONS) as base:
        guesses = [_get(base, WRONG).status_code for _ in range(6)]
        blocked = _get(base, RIGHT)
        forwarded = _get(base, {**RIGHT, "x-forwarded-for": "10.9.8.7"})
        other = _get(base, RIGHT, source="127.0.0.2")

    assert guesses == [401] * 5 + [429]
    assert (blocked.status_code, blocked.headers["retry-after"]) == (429, "1")
    assert forwarded.status_code == 429  # a header names no other client
    assert (other.status_code, other.json()) == (200, [])


@pytest.fixture
def served(dsn: str, tmp_path: Path) -> Iterator[str]:
    service = Service("serve", dsn, tmp_path / "serve.log", "--token", TOKEN)
    try:
        yield service.url
    finally:
        service.stop()


def test_serve_answers_429_with_retry_after_to_a_guesser(served: str) -> None:
    first = [_get(served, WRONG).status_code for _ in range(4)]
    # Wall clock here: each failure past the fifth doubles the window from 1 s, so a 429 comes
    # within a few more tries however slow the machine.
    replies = (_get(served, WRONG) for _ in range(20))
    refused = next((reply for reply in replies if reply.status_code == 429), None)
    other = _get(served, RIGHT, source="127.0.0.2")

    assert first == [401] * 4
    assert refused is not None
    assert int(refused.headers["retry-after"]) >= 1
    assert other.status_code == 200


def test_behind_a_named_proxy_the_forwarded_client_is_slowed(dsn: str) -> None:
    limiter = FailureLimiter(clock=Clock())
    app = create_app(dsn, token=TOKEN, failures=limiter)
    with live_server(app, **uvicorn_options("127.0.0.1")) as base:
        guesses = [
            _get(base, {**WRONG, "x-forwarded-for": "10.0.0.1"}).status_code for _ in range(6)
        ]
        neighbour = _get(base, {**RIGHT, "x-forwarded-for": "10.0.0.2"})
        # 127.0.0.2 is no proxy of ours: its header names nobody, the guesser stays slowed.
        unnamed = _get(base, {**RIGHT, "x-forwarded-for": "10.0.0.1"}, source="127.0.0.2")
        blocked = _get(base, {**RIGHT, "x-forwarded-for": "10.0.0.1"})
        visit = httpx.get(
            f"{base}/?token={TOKEN}", headers={"x-forwarded-proto": "https"}, timeout=10
        )

    assert guesses == [401] * 5 + [429]
    assert neighbour.status_code == 200
    assert unnamed.status_code == 200
    assert blocked.status_code == 429
    assert "secure" in visit.headers["set-cookie"].lower()


def test_forwarded_allow_ips_are_checked_at_the_command_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(FORWARDED_ENV, raising=False)
    argv = ["serve", "--dsn", "postgresql://127.0.0.1:1/none", "--token", TOKEN]
    assert main([*argv, "--forwarded-allow-ips", "10.0.0.5,proxy"]) == 2
    assert "'proxy' is not an address or network" in capsys.readouterr().err
    monkeypatch.setenv(FORWARDED_ENV, "not-an-ip")
    assert main(argv) == 2
    assert "'not-an-ip' is not an address or network" in capsys.readouterr().err
