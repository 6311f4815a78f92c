"""A browser-based MCP client on another origin: a page served from one loopback port whose
``fetch`` calls the MCP endpoint on another, in headless Chromium (see :mod:`tests.browser`).
The Django and Flask tests serve the endpoint behind the framework's standard CORS package and
check what the page could do."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MCP_HEADERS = ["mcp-session-id", "mcp-protocol-version", "mcp-method", "mcp-name", "last-event-id"]
"""The request headers an MCP client sends besides ``Content-Type`` and ``Accept``."""

CLIENT = r"""
async (url) => {
  const seen = {};
  const post = (body, headers = {}) => fetch(url, {
    method: "POST",
    headers: {"Content-Type": "application/json", "Accept": "application/json, text/event-stream", ...headers},
    body: JSON.stringify(body),
  });
  // The JSON-RPC messages of a JSON or SSE answer.
  const messages = (type, text) => type.startsWith("text/event-stream")
    ? text.split("\n").filter(line => line.startsWith("data:") && line.slice(5).trim())
        .map(line => JSON.parse(line.slice(5)))
    : (text ? [JSON.parse(text)] : []);
  const read = async response => messages(response.headers.get("content-type") || "", await response.text());
  try {
    // Legacy wire: a session, its id read from the response header.
    let response = await post({jsonrpc: "2.0", id: 1, method: "initialize", params: {
      protocolVersion: "2025-11-25", capabilities: {}, clientInfo: {name: "browser", version: "1"}}});
    seen.initialize = response.status;
    const session = response.headers.get("mcp-session-id");
    seen.session = session;
    seen.server = (await read(response)).at(-1).result.serverInfo.name;
    const legacy = {"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"};
    response = await post({jsonrpc: "2.0", method: "notifications/initialized"}, legacy);
    seen.initialized = response.status;
    response = await post({jsonrpc: "2.0", id: 2, method: "tools/list"}, legacy);
    seen.tools = (await read(response)).at(-1).result.tools.map(tool => tool.name).sort();
    response = await post({jsonrpc: "2.0", id: 3, method: "tools/call",
                           params: {name: "list_products", arguments: {}}}, legacy);
    seen.products = (await read(response)).at(-1).result.structuredContent;
    // An SSE answer (a progress token makes the call stream), read as it streams.
    response = await post({jsonrpc: "2.0", id: 4, method: "tools/call",
                           params: {name: "greet", arguments: {name: "Ada"}, _meta: {progressToken: "p1"}}}, legacy);
    seen.sse_type = response.headers.get("content-type");
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let text = "";
    seen.sse_chunks = 0;
    for (;;) {
      const {done, value} = await reader.read();
      if (done) break;
      seen.sse_chunks += 1;
      text += decoder.decode(value, {stream: true});
    }
    const frames = messages("text/event-stream", text);
    seen.sse_methods = frames.map(frame => frame.method || "result");
    seen.sse_result = frames.at(-1).result.content[0].text;
    const ids = text.split("\n").filter(line => line.startsWith("id:")).map(line => line.slice(3).trim());
    seen.event_ids = ids.length;
    // Resuming the stream after its first event (Last-Event-ID): what a reconnecting client does.
    response = await fetch(url, {headers: {...legacy, "Accept": "text/event-stream", "Last-Event-ID": ids[0]}});
    seen.resumed = response.status;
    seen.resumed_methods = (await read(response)).map(frame => frame.method || "result");
    response = await fetch(url, {method: "DELETE", headers: legacy});
    seen.deleted = response.status;

    // 2026-07-28: a question (input_required), answered by a retry with requestState.
    const meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": {elicitation: {form: {}}}};
    const modern = {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "add_to_cart"};
    const call = {name: "add_to_cart", arguments: {product: "tea"}, _meta: meta};
    response = await post({jsonrpc: "2.0", id: 5, method: "tools/call", params: call}, modern);
    let result = (await read(response)).at(-1).result;
    seen.asked = result.resultType;
    const [[key, question]] = Object.entries(result.inputRequests);
    seen.question = question.params.message;
    response = await post({jsonrpc: "2.0", id: 6, method: "tools/call", params: {
      ...call, inputResponses: {[key]: {action: "accept", content: {quantity: 2}}}, requestState: result.requestState}},
      modern);
    seen.answered = (await read(response)).at(-1).result.content[0].text;
  } catch (error) {
    seen.error = String(error);
  }
  return seen;
}
"""

REFUSED = r"""
async (url) => {
  try {
    const response = await fetch(url, {
      method: "POST",
      headers: {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"},
      body: JSON.stringify({jsonrpc: "2.0", id: 1, method: "initialize", params: {
        protocolVersion: "2025-11-25", capabilities: {}, clientInfo: {name: "browser", version: "1"}}}),
    });
    return {status: response.status, session: response.headers.get("mcp-session-id"), body: await response.json()};
  } catch (error) {
    return {error: String(error)};
  }
}
"""


class _Page(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"<!doctype html><title>MCP browser client</title><p>A page on another origin.</p>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def page_origin() -> Iterator[str]:
    """The origin (``http://127.0.0.1:<port>``) of a page served on a loopback port of its own."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _drive(executable: str, origin: str, script: str, url: str) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.goto(f"{origin}/")
            return page.evaluate(script, url)
        finally:
            browser.close()


def run_in_browser(executable: str, origin: str, script: str, url: str) -> dict[str, Any]:
    """``script`` (one of the above) run by a page of ``origin`` against the MCP ``url``; on a
    thread of its own (Playwright's sync API keeps an event loop in the thread that drives it,
    where Django would refuse ORM calls)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(_drive, executable, origin, script, url).result(timeout=120)


def assert_client_worked(seen: dict[str, Any]) -> None:
    """What :data:`CLIENT` saw against the example servers' ``/mcp`` (the demo shop)."""
    assert "error" not in seen, json.dumps(seen)
    assert (seen["initialize"], seen["initialized"]) == (200, 202)
    assert seen["session"] and seen["server"] == "Demo"
    assert {"add_to_cart", "greet", "list_products"} <= set(seen["tools"])
    assert seen["products"] == {"tea": 4.5, "coffee": 6.0, "biscuits": 2.25}
    # The SSE answer, read as it streamed: the progress notification, then the result.
    assert seen["sse_type"].startswith("text/event-stream")
    assert seen["sse_methods"] == ["notifications/progress", "result"]
    assert seen["sse_result"] == "Hello, Ada!"
    assert seen["resumed"] == 200 and seen["resumed_methods"][-1] == "result", seen
    assert seen["deleted"] == 200
    # 2026-07-28: the question, then the answer in the retry with its requestState.
    assert seen["asked"] == "input_required"
    assert seen["question"] == "How many tea would you like?"
    assert seen["answered"] == "Added 2 x tea (9.00 EUR)."
