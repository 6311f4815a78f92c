"""Small JSON-RPC and HTTP helpers shared by both protocol eras."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import ERROR_CODE_HTTP_STATUS
from mcp_types import INVALID_REQUEST, REQUEST_TIMEOUT

from mcp_common.http import HTTPResponse

JSON = "application/json"
SSE = "text/event-stream"

SSE_HEADERS = {
    "Content-Type": SSE,
    "Cache-Control": "no-cache, no-transform",
    "X-Accel-Buffering": "no",
}


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
_ASCII_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


def dumps(value: Any) -> str:
    """Compact JSON, non-ASCII kept as is (one encoder for the process: ``json.dumps`` with
    options builds a new one per call).

    Always encodable as UTF-8: a lone surrogate (JSON text may carry ``"\\ud800"``, and a tool
    may echo it back) is written as an escape, as is all non-ASCII text of that value.

    Always JSON: ``NaN`` and the infinities, which are not (a request body may carry them,
    as ``json.loads`` and the SDK read them, and a tool may report one as its progress), are
    written as ``null``, as pydantic and so the SDK's own transport write them.
    """
    try:
        text = _ENCODER.encode(value)
    except ValueError:
        value = _finite(value)
        text = _ENCODER.encode(value)
    if text.isascii() or utf8_safe(text):
        return text
    return _ASCII_ENCODER.encode(value)


def _finite(value: Any) -> Any:
    """``value`` with every float that JSON cannot write (``NaN``, the infinities) as ``None``."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


def utf8_safe(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8 (it holds no lone surrogate)."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def error_body(code: int, message: str, request_id: Any = None, data: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def json_response(
    body: Mapping[str, Any] | None, status: int = 200, headers: Mapping[str, str] | None = None
) -> HTTPResponse:
    out = {"Content-Type": JSON} if body is not None else {}
    out.update(headers or {})
    return HTTPResponse(status, out, dumps(body).encode() if body is not None else b"")


def error_response(
    status: int,
    code: int,
    message: str,
    request_id: Any = None,
    data: Any = None,
    headers: Mapping[str, str] | None = None,
) -> HTTPResponse:
    """A JSON-RPC error with an explicit HTTP status (transport-level refusals)."""
    return json_response(error_body(code, message, request_id, data), status, headers)


def method_not_allowed(method: str, allow: str) -> HTTPResponse:
    """The answer to an HTTP method the era does not serve (``allow``: the ones it does).
    ``OPTIONS`` gets 204 with ``Allow``: a browser's CORS preflight needs a 2xx, and a CORS
    package that only adds its headers to the view's answer (Flask-CORS) relies on the view for
    it. Others get a JSON-RPC 405."""
    if method == "OPTIONS":
        return HTTPResponse(204, {"Allow": allow})
    return error_response(405, INVALID_REQUEST, "Method Not Allowed", headers={"Allow": allow})


def length_required() -> HTTPResponse:
    """The answer to a chunked body the WSGI server could not de-chunk
    (:func:`mcp_common.http.undecoded_chunks`)."""
    return error_response(
        411, INVALID_REQUEST, "Length Required: this server cannot read a chunked body; send a Content-Length"
    )


def status_for(code: int, default: int = 200) -> int:
    """The HTTP status the SDK's table assigns to a JSON-RPC error code."""
    return ERROR_CODE_HTTP_STATUS.get(code, default)


def sse_frame(data: str, event_id: str | None = None, retry_ms: int | None = None, event: str = "message") -> bytes:
    lines = []
    if event_id is not None:
        lines.append(f"id: {event_id}")
    if retry_ms is not None:
        lines.append(f"retry: {retry_ms}")
    if data:
        lines.append(f"event: {event}")
    lines.append(f"data: {data}")
    return ("\n".join(lines) + "\n\n").encode()


_ACCEPTS: dict[str, tuple[bool, bool]] = {}


def accepts(headers: Mapping[str, str]) -> tuple[bool, bool]:
    """Whether the Accept header admits JSON, and SSE (wildcards count, as in the SDK).

    Clients send one Accept value on every request: the answers for the most recent few
    hundred values are kept.
    """
    accept = headers.get("accept", "")
    known = _ACCEPTS.get(accept)
    if known is not None:
        return known
    kinds = [part.split(";")[0].strip().lower() for part in accept.split(",")]
    has_json = any(k in (JSON, "application/*", "*/*") for k in kinds)
    has_sse = any(k in (SSE, "text/*", "*/*") for k in kinds)
    if len(_ACCEPTS) >= 256:
        _ACCEPTS.clear()
    _ACCEPTS[accept] = (has_json, has_sse)
    return has_json, has_sse


def is_json_content(headers: Mapping[str, str]) -> bool:
    return headers.get("content-type", "").split(";")[0].strip().lower() == JSON


def request_cancelled() -> MCPError:
    """The error a call in flight ends with when it is cancelled (the endpoint closed, the
    session ended, the client cancelled it), on either wire."""
    return MCPError(code=REQUEST_TIMEOUT, message="Request cancelled")
