"""Framework-neutral HTTP request and response: what an adapter translates to and from."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

_DECODER = json.JSONDecoder()
_HEADER_NAMES: dict[str, str] = {}
"""WSGI environ key -> header name (``""``: not a header), for the keys seen first."""
_HEADER_NAMES_MAX = 512


def read_at_most(read: Callable[[int], bytes], most: int, chunk: int = 64 * 1024) -> bytes:
    """Up to ``most`` bytes of a stream that ends where its body ends (a chunked request body
    with no ``Content-Length``), read a piece at a time: never more than ``most`` in memory."""
    pieces: list[bytes] = []
    size = 0
    while size < most:
        piece = read(min(chunk, most - size))
        if not piece:
            break
        pieces.append(piece)
        size += len(piece)
    return b"".join(pieces)


def undecoded_chunks(environ: Mapping[str, Any]) -> bool:
    """Whether a WSGI environ carries a chunked body that its server passed on undecoded.

    With no ``Content-Length`` and no ``wsgi.input_terminated`` (wsgiref, so Django's
    ``runserver``) Django and werkzeug read the body as empty, and the client would be told
    its JSON does not parse. Gunicorn and werkzeug's own server de-chunk the body and say so;
    an ASGI request has no ``wsgi.input``.
    """
    return (
        "wsgi.input" in environ
        and not environ.get("CONTENT_LENGTH")
        and not environ.get("wsgi.input_terminated")
        and "chunked" in str(environ.get("HTTP_TRANSFER_ENCODING", "")).lower()
    )


@dataclass
class HTTPRequest:
    """One HTTP request, as the adapter received it."""

    method: str
    headers: Mapping[str, str]
    """Header names lower-cased."""
    body: bytes = b""
    principal: str | None = None
    """Who is calling, as a stable string (``None`` for anonymous). Sessions, request states and
    elicitations are bound to it."""
    native: Any = None
    """The framework's own request object, exposed to tools as ``ctx.request_context.request``."""
    blocking: bool = False
    """Served by a thread that stays busy while its response streams (WSGI). Such requests do
    not keep a stream open while a tool waits for a human: see ``MCPConfig.wait_retry_ms``."""
    state_ready: bool = False
    """Its 2026-07-28 request-state handle was already redeemed (in the request's thread)."""
    defer_persist: bool = False
    """A JSON ``input_required`` answer is persisted by the caller, in the request's thread."""
    parsed: Any = None
    """The body, already decoded as JSON by an earlier step (``None``: not decoded yet). After a
    2026-07-28 handle was redeemed, the decoded message carries the state in its place."""
    denied: frozenset[str] | None = None
    """Tools this caller may not use (:mod:`mcp_common.permissions`): for this request they
    are not there."""
    endpoint: Any = None
    """The :class:`~mcp_common.endpoint.MCPEndpoint` serving it (set when it starts to)."""
    secure: bool = False
    """It came over HTTPS, as the framework tells (behind a proxy: Django's
    ``SECURE_PROXY_SSL_HEADER``, werkzeug's ``ProxyFix``). Adapters set it when the request
    carries an ``Origin`` header, the one check that reads it."""

    @property
    def owner(self) -> str | None:
        """:attr:`principal` as the rows it owns keep it and are found by (a long one as its
        start and a digest: :func:`~mcp_common.store.storable_key`)."""
        if self.principal is None:
            return None
        from mcp_common.store import MAX_PRINCIPAL, storable_key

        return storable_key(self.principal, MAX_PRINCIPAL)

    def header(self, name: str, default: str | None = None) -> str | None:
        return self.headers.get(name.lower(), default)

    def json(self) -> Any:
        """The body decoded as JSON, decoded once: the steps after the first reuse it.

        Raises ``ValueError`` (or ``RecursionError``) for a body that is not JSON.
        """
        if self.parsed is None:
            body = self.body
            if body[:1] == b"{" and body[1:2] != b"\x00":
                # What ``json.loads`` detects for such a body is UTF-8: decoded as it decodes.
                self.parsed = _DECODER.decode(body.decode("utf-8", "surrogatepass"))
            else:
                self.parsed = json.loads(body)
        return self.parsed


@dataclass
class HTTPResponse:
    """A response: a complete body, or an async stream of body chunks (SSE)."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    stream: AsyncIterator[bytes] | None = None
    home: Any = field(default=None, repr=False, compare=False)
    """Under WSGI, the request's thread lent to the call while it serves the stream
    (:class:`mcp_common.home.HomeThread`; closed when the stream ends)."""

    @property
    def is_stream(self) -> bool:
        return self.stream is not None


def environ_headers(environ: Mapping[str, Any]) -> dict[str, str]:
    """A WSGI environ's request headers, names lower-cased (``HTTP_MCP_SESSION_ID`` ->
    ``mcp-session-id``; ``CONTENT_TYPE`` and ``CONTENT_LENGTH`` included): one pass, no
    framework header object."""
    headers: dict[str, str] = {}
    names = _HEADER_NAMES
    for key, value in environ.items():
        name = names.get(key)
        if name is None:
            if key.startswith("HTTP_"):
                name = key[5:].replace("_", "-").lower()
            elif key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
                name = key.replace("_", "-").lower()
            else:
                name = ""
            if len(names) < _HEADER_NAMES_MAX:  # clients choose header names: keep it bounded
                names[key] = name
        if name and (value or key.startswith("HTTP_")):  # CONTENT_* only when set
            headers[name] = value
    return headers
