"""Bad input gets a JSON-RPC error with the right HTTP status: never a 500, never HTML."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.conftest import LiveServer

TARGETS = [("django", "gunicorn"), ("django", "uvicorn"), ("flask", "gunicorn")]
MODERN = "2026-07-28"
ACCEPT = "application/json, text/event-stream"
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
}


@pytest.fixture(scope="module", params=TARGETS, ids=lambda t: f"{t[0]}-{t[1]}")
def server(request: pytest.FixtureRequest, example_server: Callable[..., LiveServer]) -> LiveServer:
    return example_server(request.param[0], request.param[1], 2, "sqlite")


def post(url: str, body: Any, headers: dict[str, str] | None = None, raw: bytes | None = None) -> httpx.Response:
    base = {"Content-Type": "application/json", "Accept": ACCEPT}
    base.update(headers or {})
    content = raw if raw is not None else json.dumps(body).encode()
    return httpx.post(url, content=content, headers=base, timeout=10)


def modern_headers(method: str, name: str | None = None) -> dict[str, str]:
    headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": method}
    if name is not None:
        headers["Mcp-Name"] = name
    return headers


def jsonrpc_error(response: httpx.Response, status: int, code: int) -> dict[str, Any]:
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["content-type"].startswith("application/json"), response.headers
    assert "<html" not in response.text.lower()
    body = response.json()
    assert body["jsonrpc"] == "2.0"
    assert body["error"]["code"] == code, body
    assert "Traceback" not in response.text
    return body


def initialize(url: str) -> str:
    response = post(
        url,
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "bad-input-test", "version": "0"},
            },
        },
    )
    assert response.status_code == 200, response.text
    return response.headers["mcp-session-id"]


@pytest.mark.slow
@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_malformed_json(server: LiveServer, era: str) -> None:
    headers = modern_headers("tools/call") if era == "modern" else {}
    jsonrpc_error(post(server.url(), None, headers, raw=b'{"jsonrpc": "2.0", "id": 1,'), 400, -32700)


@pytest.mark.slow
@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_batch_is_refused(server: LiveServer, era: str) -> None:
    headers = modern_headers("tools/list") if era == "modern" else {}
    batch = [{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, {"jsonrpc": "2.0", "id": 2, "method": "ping"}]
    jsonrpc_error(post(server.url(), batch, headers), 400, -32600)


@pytest.mark.slow
@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_not_a_jsonrpc_message(server: LiveServer, era: str) -> None:
    headers = modern_headers("tools/list") if era == "modern" else {}
    jsonrpc_error(post(server.url(), {"hello": "world", "id": 3}, headers), 400, -32600)


@pytest.mark.slow
@pytest.mark.parametrize("method", [["tools/list"], {"name": "tools/list"}], ids=["list", "object"])
def test_a_method_that_is_not_a_string_modern(server: LiveServer, method: Any) -> None:
    """Not a JSON-RPC request: a 400 the client can read (it was a 500 under gunicorn)."""
    body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": {"_meta": ENVELOPE}}
    jsonrpc_error(post(server.url(), body, modern_headers("tools/list")), 400, -32600)


@pytest.mark.slow
def test_unknown_method_modern(server: LiveServer) -> None:
    body = {"jsonrpc": "2.0", "id": 7, "method": "no/such", "params": {"_meta": ENVELOPE}}
    error = jsonrpc_error(post(server.url(), body, modern_headers("no/such")), 404, -32601)
    assert error["id"] == 7


@pytest.mark.slow
def test_unknown_method_legacy(server: LiveServer) -> None:
    session = initialize(server.url())
    response = post(
        server.url(),
        {"jsonrpc": "2.0", "id": 8, "method": "no/such", "params": {}},
        {"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"},
    )
    assert response.status_code == 200
    # The legacy wire answers requests on an SSE stream; the error is the stream's last event.
    events = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
    reply = json.loads([e for e in events if e][-1])
    assert reply["id"] == 8 and reply["error"]["code"] == -32601


@pytest.mark.slow
def test_header_body_mismatch(server: LiveServer) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": ENVELOPE}}
    jsonrpc_error(post(server.url(), body, modern_headers("tools/call")), 400, -32020)


@pytest.mark.slow
def test_missing_envelope(server: LiveServer) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    jsonrpc_error(post(server.url(), body, modern_headers("tools/list")), 400, -32602)


@pytest.mark.slow
def test_unsupported_version(server: LiveServer) -> None:
    envelope = {**ENVELOPE, "io.modelcontextprotocol/protocolVersion": "2099-01-01"}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": envelope}}
    headers = {**modern_headers("tools/list"), "MCP-Protocol-Version": "2099-01-01"}
    error = jsonrpc_error(post(server.url(), body, headers), 400, -32022)
    assert MODERN in error["error"]["data"]["supported"]


@pytest.mark.slow
@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_wrong_content_type_and_accept(server: LiveServer, era: str) -> None:
    headers = modern_headers("tools/list") if era == "modern" else {}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": ENVELOPE}}
    jsonrpc_error(post(server.url(), body, {**headers, "Content-Type": "text/plain"}), 400, -32600)
    jsonrpc_error(post(server.url(), body, {**headers, "Accept": "text/html"}), 406, -32600)


@pytest.mark.slow
def test_modern_get_and_delete_are_405(server: LiveServer) -> None:
    for method in ("GET", "DELETE"):
        response = httpx.request(method, server.url(), headers={"MCP-Protocol-Version": MODERN}, timeout=10)
        assert response.status_code == 405
        assert response.headers["allow"] == "POST"


@pytest.mark.slow
def test_unknown_and_missing_session(server: LiveServer) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    jsonrpc_error(post(server.url(), body, {"Mcp-Session-Id": "f" * 32}), 404, -32600)
    jsonrpc_error(post(server.url(), body), 400, -32600)
    response = httpx.get(server.url(), headers={"Accept": "text/event-stream", "Mcp-Session-Id": "nope"}, timeout=10)
    jsonrpc_error(response, 404, -32600)


@pytest.mark.slow
def test_deleted_session_is_gone_on_every_worker(server: LiveServer) -> None:
    session = initialize(server.url())
    headers = {"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"}
    listed = post(server.url(), {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers)
    assert listed.status_code == 200 and "tools" in listed.json()["result"]
    assert httpx.delete(server.url(), headers=headers, timeout=10).status_code == 200
    for request_id in range(3, 9):  # new connections: every worker must answer 404
        gone = post(server.url(), {"jsonrpc": "2.0", "id": request_id, "method": "tools/list"}, headers)
        jsonrpc_error(gone, 404, -32600)


@pytest.mark.slow
@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_oversized_body(server: LiveServer, era: str) -> None:
    headers = modern_headers("tools/call", "greet") if era == "modern" else {}
    huge = (
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"greet","arguments":{"name":"'
        + (b"x" * (5 * 1024 * 1024))
        + b'"}}}'
    )
    jsonrpc_error(post(server.url(), None, headers, raw=huge), 413, -32600)


@pytest.mark.slow
@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_foreign_host_and_origin(server: LiveServer, era: str) -> None:
    headers = modern_headers("tools/list") if era == "modern" else {}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": ENVELOPE}}
    jsonrpc_error(post(server.url(), body, {**headers, "Host": "evil.example"}), 421, -32600)
    jsonrpc_error(post(server.url(), body, {**headers, "Origin": "http://evil.example"}), 403, -32600)
    # Same-origin browser requests are fine.
    port = server.base_url.rsplit(":", 1)[1]
    same = post(server.url(), body, {**headers, "Origin": f"http://127.0.0.1:{port}"})
    assert same.status_code != 403


@pytest.mark.slow
@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_a_stale_session_cookie(server: LiveServer, era: str) -> None:
    # Django looks the session up in the database: under ASGI, never on the event loop.
    headers = modern_headers("tools/list") if era == "modern" else {}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": ENVELOPE}}
    if era == "legacy":
        headers["Mcp-Session-Id"] = initialize(server.url())
        headers["MCP-Protocol-Version"] = "2025-11-25"
    response = post(server.url(), body, {**headers, "Cookie": f"sessionid={'x' * 32}; session=x"})
    assert response.status_code == 200, response.text[:300]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("framework", "server_kind"), [("django", "uvicorn"), ("django", "gunicorn"), ("flask", "gunicorn")]
)
def test_a_chunked_body_over_djangos_memory_limit(
    example_server: Callable[..., LiveServer], framework: str, server_kind: str
) -> None:
    """No Content-Length (``Transfer-Encoding: chunked``): the body is read all the same, under
    ASGI (Django spools it) and under gunicorn (Django's WSGI request would read it as empty),
    and neither Django's 2.5 MB form-data limit nor anything but ``MAX_BODY_SIZE`` applies."""
    server = example_server(framework, server_kind, 2, "sqlite")

    def chunked(size: int) -> httpx.Response:
        opening = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": ENVELOPE}})
        padded = opening[:1].encode() + b" " * size + opening[1:].encode()
        chunks = (padded[i : i + 65536] for i in range(0, len(padded), 65536))
        headers = {"Content-Type": "application/json", "Accept": ACCEPT, **modern_headers("tools/list")}
        return httpx.post(server.url(), content=chunks, headers=headers, timeout=30)

    served = chunked(3 * 1024 * 1024)
    assert served.status_code == 200, served.text[:300]
    assert "tools" in served.json()["result"]
    jsonrpc_error(chunked(5 * 1024 * 1024), 413, -32600)


@pytest.mark.slow
def test_the_webhook_reads_a_chunked_body(server: LiveServer) -> None:
    """A payment provider's client may stream its callback (``Transfer-Encoding: chunked``, no
    Content-Length), as nginx forwards one with ``proxy_request_buffering off``: the webhook
    reads it under gunicorn as under uvicorn. One over Django's ``DATA_UPLOAD_MAX_MEMORY_SIZE``
    is refused as one that declares its length is: a JSON 413, the body never read whole."""
    webhook = server.base_url + "/payments/webhook"
    headers = {"Authorization": "Bearer demo-webhook-token", "Content-Type": "application/json"}
    body = json.dumps({"elicitation_id": "deposit-nobody-asked"}).encode()
    streamed = httpx.post(webhook, content=iter([body]), headers=headers, timeout=10)
    assert (streamed.status_code, streamed.json()) == (200, {"completed": 0}), streamed.text[:300]
    if server.framework == "django":
        padded = body[:1] + b" " * (3 * 1024 * 1024) + body[1:]
        declared = httpx.post(webhook, content=padded, headers=headers, timeout=30)
        chunks = (padded[i : i + 65536] for i in range(0, len(padded), 65536))
        streamed = httpx.post(webhook, content=chunks, headers=headers, timeout=30)
        for response in (declared, streamed):
            assert response.status_code == 413, response.text[:300]
            assert "too large" in response.json()["error"]


@pytest.mark.slow
def test_a_chunked_body_runserver_cannot_read_is_411(example_server: Callable[..., LiveServer]) -> None:
    """``runserver`` passes a chunked body on undecoded, which Django reads as empty: the client
    is told to send a Content-Length, not that its JSON does not parse."""
    server = example_server("django", "dev", 1, "sqlite")
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": ENVELOPE}}).encode()
    headers = {"Content-Type": "application/json", "Accept": ACCEPT, **modern_headers("tools/list")}
    response = httpx.post(server.url(), content=iter([body]), headers=headers, timeout=10)
    error = jsonrpc_error(response, 411, -32600)
    assert "Content-Length" in error["error"]["message"]
    assert httpx.post(server.url(), content=body, headers=headers, timeout=10).status_code == 200


@pytest.mark.parametrize("bad_id", ["null", "1.5", "true", "[1]", "NaN"])
def test_a_call_with_an_id_the_sdk_refuses_runs_nothing(server: LiveServer, bad_id: str) -> None:
    """``list_products`` is a call the fast path serves: it must not answer (or echo) this id."""
    params = {"name": "list_products", "arguments": {}}
    raw = '{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":%s}'
    modern = (raw % (bad_id, json.dumps({**params, "_meta": ENVELOPE}))).encode()
    error = jsonrpc_error(
        post(server.url(), None, modern_headers("tools/call", "list_products"), raw=modern), 400, -32600
    )
    assert error["id"] is None
    # The legacy wire takes it as a notification, as the SDK does: 202, nothing runs.
    headers = {"Mcp-Session-Id": initialize(server.url()), "MCP-Protocol-Version": "2025-11-25"}
    response = post(server.url(), None, headers, raw=(raw % (bad_id, json.dumps(params))).encode())
    assert (response.status_code, response.content) == (202, b"")


@pytest.mark.slow
@pytest.mark.parametrize("last_event_id", [b"abc." + b"9" * 30, b"abc.\xb2"], ids=["past-int64", "superscript-two"])
def test_malformed_last_event_id(server: LiveServer, last_event_id: bytes) -> None:
    headers: dict[str, Any] = {"Accept": "text/event-stream", "MCP-Protocol-Version": "2025-11-25"}
    headers.update({"Mcp-Session-Id": initialize(server.url()), "Last-Event-ID": last_event_id})
    jsonrpc_error(httpx.get(server.url(), headers=headers, timeout=10), 400, -32600)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["TRACE", "PROPFIND"])
def test_methods_mcp_does_not_use_are_a_json_rpc_405(server: LiveServer, method: str) -> None:
    response = httpx.request(method, server.url(), timeout=10)
    jsonrpc_error(response, 405, -32600)
    assert response.headers["allow"] == "GET, POST, DELETE"
