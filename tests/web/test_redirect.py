"""The token login's redirect, over real uvicorn and a raw socket (an HTTP client would normalise
the request target): it goes to a path on this origin, anything else goes to ``/``."""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

import pytest

from otel_jobsteps.web import create_app
from tests.web.support import live_server

SECRET = "hunter2-never-shown"


def _location(base: str, target: str) -> tuple[int, str]:
    """Status and Location of ``GET target?token=SECRET`` sent byte for byte."""
    address = urlsplit(base)
    with socket.create_connection((address.hostname, address.port), timeout=10) as connection:
        head = f"GET {target}?token={SECRET} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        connection.sendall((head + "Connection: close\r\n\r\n").encode("latin-1"))
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    lines = answer.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    lower = {name.lower(): value for name, value in headers.items()}
    return int(lines[0].split()[1]), lower.get("location", "")


@pytest.mark.parametrize(
    ("target", "location"),
    [
        pytest.param("//evil.example/x", "/", id="authority"),
        pytest.param("///evil.example/x", "/", id="three-slashes"),
        pytest.param("/\\evil.example/x", "/", id="backslash"),
        pytest.param("/\\/evil.example", "/", id="backslash-slash"),
        pytest.param("https://evil.example/x", "/", id="absolute-url"),
        pytest.param("/%2F%2Fevil.example", "/", id="encoded-slashes"),
        pytest.param("/%2fevil.example", "/", id="encoded-slash-lower"),
        pytest.param("/%5Cevil.example", "/", id="encoded-backslash"),
        pytest.param("/%252F%252Fevil.example", "/", id="double-encoded"),
        pytest.param("/%09/evil.example", "/", id="encoded-tab"),
        pytest.param("/%0A/evil.example", "/", id="encoded-newline"),
        pytest.param("/\t/evil.example", "/", id="tab"),
        pytest.param("/jobs/render/42", "/jobs/render/42", id="job-page"),
        pytest.param("/jobs/a%2Fb/7", "/jobs/a%2Fb/7", id="slash-in-segment"),
        pytest.param("/jobs/%2F%2Fevil/7", "/jobs/%2F%2Fevil/7", id="slashes-inside"),
        pytest.param("/", "/", id="root"),
    ],
)
def test_token_login_redirects_to_this_origin_only(dsn: str, target: str, location: str) -> None:
    with live_server(create_app(dsn, token=SECRET)) as base:
        status, found = _location(base, target)
    # A target the server refuses outright (400) is safe too; an answer 303 goes home.
    assert (status, found) in ((303, location), (400, ""))
    if "evil" not in target:
        assert status == 303
