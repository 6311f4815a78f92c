"""The MCP endpoint as a Flask view: request in, response out, nothing else."""

from __future__ import annotations

import logging
from typing import ClassVar

from flask import Request, Response, current_app, request
from flask.views import View
from mcp_types import INTERNAL_ERROR, INVALID_REQUEST
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from mcp_common.endpoint import MCPEndpoint
from mcp_common.http import HTTPRequest, HTTPResponse, environ_headers, read_at_most, undecoded_chunks
from mcp_common.jsonrpc import error_response, length_required
from mcp_common.permissions import run_checks, tool_checks
from mcp_flask.extension import get_state

logger = logging.getLogger("mcp_flask")


class MCPView(View):
    """Serves MCP Streamable HTTP (both protocol eras) for the server added at ``url``.

    :class:`mcp_flask.MCP` registers one per server under a rule for every method: each
    reaches the core, which answers the ones MCP does not use with a JSON-RPC 405, never an
    HTML page.
    """

    init_every_request: ClassVar[bool] = False

    def __init__(self, url: str) -> None:
        self.url = url

    def dispatch_request(self) -> Response:
        try:
            state = get_state(current_app)
            endpoint = state.endpoints[self.url]
            translated = self.translate_request(endpoint, None)
            if isinstance(translated, HTTPResponse):
                return self.translate_response(endpoint, translated)
            try:
                # The principal loader (Flask-Login's user loader) and permission checks may
                # query the database: a failure there (an outage, an exhausted connection
                # pool) is answered as one in the endpoint.
                translated.principal = state.principal()
                checks = tool_checks(endpoint.server, translated)
                if checks:
                    translated.denied = run_checks(checks, translated.native)
            except Exception:
                return self.translate_response(endpoint, endpoint.failed(translated))
            return self.translate_response(endpoint, endpoint.handle(translated), translated.native)
        except Exception:
            # The core never raises; this catches the adapter's own bugs and a failing
            # principal loader. The client gets JSON-RPC, the log gets the traceback.
            logger.exception("MCP view for %r failed", self.url)
            return self.translate_response(None, error_response(500, INTERNAL_ERROR, "Internal server error"))

    # -- what the Flask adapter translates ---------------------------------------------------

    def translate_request(self, endpoint: MCPEndpoint, principal: str | None) -> HTTPRequest | HTTPResponse:
        body = read_body(endpoint.config.max_body_size)
        if isinstance(body, HTTPResponse):
            return body
        headers = environ_headers(request.environ)
        if "host" not in headers:
            # HTTP/1.0 sends no Host header: werkzeug falls back to SERVER_NAME:SERVER_PORT.
            headers["host"] = request.host
        return HTTPRequest(
            method=request.method,
            headers=headers,
            body=body,
            principal=principal,
            native=request._get_current_object(),  # type: ignore[attr-defined]
            secure="origin" in headers and request.is_secure,
        )

    def translate_response(
        self, endpoint: MCPEndpoint | None, response: HTTPResponse, native: Request | None = None
    ) -> Response:
        if response.stream is None:
            content_type = response.headers.get("Content-Type")
            out = Response(response.body, status=response.status, content_type=content_type)
            if content_type is None:
                # An empty 202/405 says nothing about its (absent) body.
                del out.headers["Content-Type"]
            for name, value in response.headers.items():
                if name != "Content-Type":
                    out.headers[name] = value
            return out
        assert endpoint is not None
        if native is not None:
            # Flask-Compress (an after_request hook, as its kin are) compresses a stream of a
            # type in COMPRESS_MIMETYPES for a client that accepts it (httpx, so the official
            # client, always does), holding every frame in its compressor until the stream
            # ends: a legacy call's question would reach the client only once the call stops
            # waiting for it. An SSE answer goes out as it is written, as the SDK's own server
            # sends it. The core has its copy of the headers.
            native.environ.pop("HTTP_ACCEPT_ENCODING", None)
        # Passed straight through to the WSGI server, which calls the iterator's close() when
        # the client goes away: that ends the async stream (and, in the 2026-07-28 era, cancels
        # the call). No stream_with_context: the core needs no request context, and the
        # request context would be held open for the whole stream.
        out = Response(endpoint.iter_body(response), status=response.status, direct_passthrough=True)
        out.headers.update(response.headers)
        return out


def _too_large(limit: int) -> HTTPResponse:
    return error_response(413, INVALID_REQUEST, f"Request body too large (limit {limit} bytes)")


def read_body(limit: int) -> bytes | HTTPResponse:
    """The request body, or a refusal; never reads more than ``limit + 1`` bytes.

    A declared ``Content-Length`` over the limit is refused before a byte is read; a chunked
    body is read in pieces and refused as soon as it passes the limit.
    """
    environ = request.environ
    if undecoded_chunks(environ):
        return length_required()
    raw = environ.get("CONTENT_LENGTH")
    if raw and raw.isdigit() and raw.isascii() and "HTTP_TRANSFER_ENCODING" not in environ:
        declared: int | None = int(raw)  # the usual request, read as werkzeug reads it
    else:
        declared = request.content_length
    if declared is not None and declared > limit:
        return _too_large(limit)
    try:
        if declared is not None:
            return request.get_data(cache=True)
        body = read_at_most(request.stream.read, limit + 1)
        return _too_large(limit) if len(body) > limit else body
    except RequestEntityTooLarge:
        # The application's MAX_CONTENT_LENGTH is lower than MCP_MAX_BODY_SIZE.
        return _too_large(request.max_content_length or limit)
    except HTTPException as exc:
        # A client that disconnected mid-body, a malformed chunk: werkzeug's 400.
        return error_response(exc.code or 400, INVALID_REQUEST, exc.name)
