"""The framework-neutral request: headers read from a WSGI environ, the body decoded as JSON."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mcp_common import http
from mcp_common.http import HTTPRequest, environ_headers
from mcp_common.jsonrpc import dumps
from mcp_common.security import host_allowed


def _reference_headers(environ: dict[str, Any]) -> dict[str, str]:
    """What PEP 3333 says the headers are, written the plain way."""
    headers = {}
    for key, value in environ.items():
        if key.startswith("HTTP_"):
            headers[key[5:].replace("_", "-").lower()] = value
        elif key in ("CONTENT_TYPE", "CONTENT_LENGTH") and value:
            headers[key.replace("_", "-").lower()] = value
    return headers


def test_environ_headers_reads_the_request_headers_only() -> None:
    environ = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": "/mcp",
        "SERVER_NAME": "127.0.0.1",
        "wsgi.input": object(),
        "HTTP_HOST": "127.0.0.1:8000",
        "HTTP_MCP_SESSION_ID": "abc",
        "HTTP_MCP_PROTOCOL_VERSION": "2025-11-25",
        "HTTP_X_EMPTY": "",
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": "",
    }
    headers = environ_headers(environ)
    assert headers == {
        "host": "127.0.0.1:8000",
        "mcp-session-id": "abc",
        "mcp-protocol-version": "2025-11-25",
        "x-empty": "",  # a header sent empty is still a header
        "content-type": "application/json",  # CONTENT_LENGTH "" means none was sent
    }
    # Read twice (the second time from the remembered names): the same answer.
    assert environ_headers(environ) == headers


def test_environ_headers_stays_right_and_bounded_under_many_header_names() -> None:
    """Clients choose header names: remembering them must not grow without bound, and names
    past the bound are still translated."""
    for batch in range(4):
        environ = {f"HTTP_X_NAME_{batch}_{i}": str(i) for i in range(400)}
        environ["CONTENT_LENGTH"] = "12"
        environ["wsgi.url_scheme"] = "http"
        assert environ_headers(environ) == _reference_headers(environ)
    assert len(http._HEADER_NAMES) <= http._HEADER_NAMES_MAX


BODIES = [
    b'{"jsonrpc":"2.0","id":1,"method":"ping"}',
    '{"text":"caf\u00e9 \u2603"}'.encode(),
    b'{"escaped":"\\ud800 and \\u00e9"}',  # a lone surrogate, as JSON may carry it
    '{"a":1}'.encode("utf-16"),  # with a byte-order mark
    '{"a":1}'.encode("utf-16-le"),  # "{" then a NUL: json.loads reads UTF-16
    '{"a":1}'.encode("utf-32"),
    b'\xef\xbb\xbf{"bom":true}',  # UTF-8 with a byte-order mark
    b'{"bad":"\xff"}',  # not UTF-8
    b'{"unterminated":',
    b"[1,2,3]",
    b"",
    b"{",
    b'{"a":NaN}',
]


@pytest.mark.parametrize("body", BODIES)
def test_the_body_decodes_exactly_as_json_loads_decodes_it(body: bytes) -> None:
    try:
        expected: Any = json.loads(body)
    except ValueError as exc:
        expected = type(exc)
    request = HTTPRequest(method="POST", headers={}, body=body)
    try:
        got: Any = request.json()
    except ValueError as exc:
        got = type(exc)
    if expected is not got:
        assert json.dumps(got) == json.dumps(expected)
    if not isinstance(expected, type):
        assert request.json() is got  # decoded once


def test_host_allowed_takes_any_sequence_of_patterns() -> None:
    assert host_allowed("api.example.com", [".example.com"]) is True  # type: ignore[arg-type]
    assert host_allowed("evil.test", [".example.com"]) is False  # type: ignore[arg-type]
    assert host_allowed("api.example.com", (".example.com",)) is True


def test_numbers_json_cannot_write_go_out_as_null_as_the_sdk_writes_them() -> None:
    value = {"a": float("nan"), "b": [float("inf"), -float("inf"), 1.5], "c": ("x", float("nan")), "d": 2}
    assert dumps(value) == '{"a":null,"b":[null,null,1.5],"c":["x",null],"d":2}'
    # With a lone surrogate too: the escaped encoding, still with no NaN.
    assert dumps({"t": "\ud800é", "n": float("nan")}) == '{"t":"\\ud800\\u00e9","n":null}'
