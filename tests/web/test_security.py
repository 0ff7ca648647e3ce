"""The security layer's pieces, each on a bare app (no database): headers, token, Host check."""

from __future__ import annotations

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from starlette.testclient import TestClient
from starlette.types import ASGIApp

from otel_jobsteps.web.security import (
    CSP,
    SECURITY_HEADERS,
    TOKEN_COOKIE,
    SecurityHeadersMiddleware,
    TokenMiddleware,
    secure,
)

TOKEN = "s3cret-token-long-enough"


def _hello(_request: Request) -> Response:
    return PlainTextResponse("hello")


def _bare() -> Starlette:
    paths = ("/", "/page", "/api/jobs", "/healthz", "/readyz")
    return Starlette(routes=[Route(path, _hello) for path in paths])


def _client(app: ASGIApp) -> TestClient:
    return TestClient(app, follow_redirects=False)


def test_headers_are_on_every_answer_a_missing_page_too() -> None:
    client = _client(SecurityHeadersMiddleware(_bare()))
    for path, status in (("/", 200), ("/nowhere", 404)):
        response = client.get(path)
        assert response.status_code == status
        assert response.headers["content-security-policy"] == CSP
        for name, value in SECURITY_HEADERS.items():
            assert response.headers[name] == value


def test_the_token_is_asked_for_pages_and_api_alike() -> None:
    client = _client(TokenMiddleware(_bare(), TOKEN))
    page = client.get("/page")
    assert page.status_code == 401
    assert page.headers["content-type"].startswith("text/html")
    assert "Authentication required" in page.text
    api = client.get("/api/jobs")
    assert (api.status_code, api.json()) == (401, {"error": "authentication required"})
    wrong = client.get("/page", headers={"authorization": "Bearer not-it"})
    assert wrong.status_code == 401


def test_a_bearer_header_or_the_cookie_lets_a_request_through() -> None:
    client = _client(TokenMiddleware(_bare(), TOKEN))
    assert client.get("/page", headers={"authorization": f"bearer {TOKEN}"}).text == "hello"
    client.cookies.set(TOKEN_COOKIE, TOKEN)
    assert client.get("/page").text == "hello"


def test_a_token_in_the_url_moves_into_a_cookie() -> None:
    client = _client(TokenMiddleware(_bare(), TOKEN))
    response = client.get(f"/page?a=1&token={TOKEN}&b=2")
    assert response.status_code == 303
    assert response.headers["location"] == "/page?a=1&b=2"
    cookie = response.headers["set-cookie"]
    assert cookie.startswith(f"{TOKEN_COOKIE}={TOKEN};")
    assert "HttpOnly" in cookie
    assert "SameSite=strict" in cookie


@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
def test_health_probes_need_no_token(path: str) -> None:
    assert _client(TokenMiddleware(_bare(), TOKEN)).get(path).text == "hello"


def test_the_host_check_answers_before_the_token_with_the_headers() -> None:
    app = secure(_bare(), TOKEN, frozenset({"127.0.0.1"}))
    refused = _client(app).get("/page", headers={"host": "rebound.example"})
    assert (refused.status_code, refused.text) == (421, "unknown Host header")
    assert refused.headers["content-security-policy"] == CSP
    asked = _client(app).get("/page", headers={"host": "127.0.0.1:8080"})
    assert asked.status_code == 401
    assert asked.headers["x-frame-options"] == "DENY"


def test_without_token_or_hosts_only_the_headers_are_added() -> None:
    response = _client(secure(_bare(), None, None)).get("/page", headers={"host": "any.example"})
    assert (response.status_code, response.text) == (200, "hello")
    assert response.headers["referrer-policy"] == "no-referrer"
