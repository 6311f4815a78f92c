"""The MCP endpoint as a Django view: request in, response out, nothing else."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from io import BytesIO
from typing import Any, ClassVar, TypeVar

from asgiref.sync import sync_to_async
from django.apps import apps
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.handlers.asgi import ASGIRequest
from django.core.handlers.wsgi import WSGIRequest
from django.http import HttpRequest, HttpResponse, HttpResponseBase, StreamingHttpResponse
from django.utils.decorators import classonlymethod
from django.utils.functional import LazyObject, SimpleLazyObject, empty
from django.views import View
from django.views.decorators.csrf import csrf_exempt
from mcp_types import INTERNAL_ERROR

from mcp_common.endpoint import MCPEndpoint
from mcp_common.http import HTTPRequest, HTTPResponse, environ_headers, read_at_most, undecoded_chunks
from mcp_common.jsonrpc import error_response, length_required
from mcp_common.permissions import run_checks, tool_checks
from mcp_django.auth import authenticate
from mcp_django.conf import mcp_settings
from mcp_django.endpoint import mark_serving_thread
from mcp_django.registry import get_endpoint
from mcp_django.tenants import in_tenant, request_tenant

logger = logging.getLogger("mcp_django")

R = TypeVar("R", bound=HttpResponseBase)


def principal_of(request: HttpRequest) -> str | None:
    """The authenticated Django user as a stable principal string, or ``None``; under
    django-tenants, the tenant's (:mod:`mcp_django.tenants`)."""
    return in_tenant(request_tenant(request), _principal(getattr(request, "user", None)))


async def aprincipal_of(request: HttpRequest) -> str | None:
    """:func:`principal_of` on the event loop, where Django refuses synchronous queries.

    ``request.user`` as ``AuthenticationMiddleware`` leaves it is a lazy object that reads the
    session and the user from the database when first used: ``request.auser()`` is its async
    twin. A user the application's own middleware put in its place (``AnonymousUser`` for a
    suspended account, the user of a bearer token) is the application's decision and is used
    as it is; one that is itself lazy and not yet loaded is loaded in a thread.
    """
    user = getattr(request, "user", None)
    if isinstance(user, LazyObject) and user._wrapped is empty:
        if _is_django_lazy_user(user) and hasattr(request, "auser"):
            user = await request.auser()
        else:
            return await sync_to_async(principal_of)(request)
    return in_tenant(request_tenant(request), _principal(user))


def _is_django_lazy_user(user: LazyObject) -> bool:
    # AuthenticationMiddleware's SimpleLazyObject(lambda: get_user(request)), looked up in the
    # instance's __dict__ because any other attribute would load the user. Were Django to build
    # it differently, the user would be loaded in a thread instead: slower, still right.
    setup = user.__dict__.get("_setupfunc") if isinstance(user, SimpleLazyObject) else None
    return getattr(setup, "__module__", None) == "django.contrib.auth.middleware"


USER_PRINCIPAL = "django-user:"
"""The principal of an authenticated Django user: this prefix and the user's primary key."""


def _principal(user: Any) -> str | None:
    if user is not None and getattr(user, "is_authenticated", False):
        return f"{USER_PRINCIPAL}{user.pk}"
    return None


def raw_host(request: HttpRequest) -> str:
    """The host Django's ``get_host()`` validates, unvalidated: ``X-Forwarded-Host`` when
    ``USE_X_FORWARDED_HOST`` is on and a proxy sent one (the ``Host`` header then names the app
    server behind it), else the Host header, else what Django falls back to (HTTP/1.0, test
    client).

    Only a missing header falls back: an empty one is what was sent, and is refused.
    """
    meta = request.META
    if settings.USE_X_FORWARDED_HOST and "HTTP_X_FORWARDED_HOST" in meta:
        return str(meta["HTTP_X_FORWARDED_HOST"])
    if "HTTP_HOST" in meta:
        return str(meta["HTTP_HOST"])
    name, port = str(meta.get("SERVER_NAME", "")), str(meta.get("SERVER_PORT", ""))
    default = "443" if request.is_secure() else "80"
    return name if not port or port == default else f"{name}:{port}"


def _headers(request: HttpRequest) -> dict[str, str]:
    headers = environ_headers(request.META)
    headers["host"] = raw_host(request)
    return headers


def _read(request: HttpRequest, limit: int) -> bytes | HTTPResponse:
    """The body, read once and at most one byte past ``limit``; 413 when it is over.

    Not ``request.body``: that enforces ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (Django's limit for form
    data, 2.5 MB by default, below ours), and under ASGI it refuses a chunked body only after
    moving the spooled stream to its end, where nothing is left to read.
    """
    meta = request.META
    if undecoded_chunks(meta):
        return length_required()
    try:
        declared = int(meta.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    if declared <= limit:
        if not meta.get("CONTENT_LENGTH") and meta.get("wsgi.input_terminated"):
            # A chunked body under a WSGI server that ends the stream at the body's end
            # (gunicorn): Django's request would read no length as an empty body.
            body = read_at_most(meta["wsgi.input"].read, limit + 1)
        else:
            body = request.read(limit + 1)
        if len(body) <= limit:
            # Kept as request.body keeps it: a tool may still read ctx.request_context.request.body.
            request._body, request._stream = body, BytesIO(body)
            return body
    return error_response(413, -32600, f"Request body too large (limit {limit} bytes)")


class _Base(View):
    server: ClassVar[Any] = None
    """An ``MCPServer``, a dotted path to one, or ``None`` for ``settings.MCP["SERVER"]``."""

    http_method_names: ClassVar[list[str]] = ["get", "post", "delete", "put", "patch", "head", "options"]

    @classonlymethod
    def as_view(cls, **initkwargs: Any) -> Any:
        # Routed without the app, the URLconf would load and every request fail on the models
        # with Django's HTML 500 page; its system checks, registered by the app, never run.
        if apps.apps_ready and not apps.is_installed("mcp_django"):
            raise ImproperlyConfigured(
                'The MCP endpoint keeps its sessions and questions in mcp_django\'s tables: add "mcp_django" '
                'to INSTALLED_APPS, then run "manage.py migrate".'
            )
        view = csrf_exempt(super().as_view(**initkwargs))
        view.mcp_endpoint = True  # found by MCPMiddleware
        return view

    def _translate_in(self, endpoint: MCPEndpoint, request: HttpRequest) -> HTTPRequest | HTTPResponse:
        """The request without its principal, which each view finds its own way."""
        body = _read(request, endpoint.config.max_body_size)
        if isinstance(body, HTTPResponse):
            return body
        headers = _headers(request)
        try:
            secure = "origin" in headers and request.is_secure()
        except ImproperlyConfigured:
            # A malformed SECURE_PROXY_SSL_HEADER: which scheme the request came over is unknown,
            # and the Origin check needs it. Said to the log, not as Django's HTML error page.
            logger.exception("The Origin of an MCP request could not be checked")
            return error_response(500, INTERNAL_ERROR, "Internal server error")
        return HTTPRequest(method=request.method or "GET", headers=headers, body=body, native=request, secure=secure)


def _plain(response: HTTPResponse) -> HttpResponse:
    content_type = response.headers.get("Content-Type")
    out = HttpResponse(response.body, status=response.status, content_type=content_type)
    if content_type is None:
        del out["Content-Type"]
    for name, value in response.headers.items():
        if name != "Content-Type":
            out[name] = value
    # A known length lets the server send one plain response instead of a chunked one.
    out["Content-Length"] = str(len(response.body))
    return _logged(out)


def _logged(out: R) -> R:
    # The endpoint (or this view) logged its 5xx with the traceback: django.request would log
    # the same failure again, without it ("Internal Server Error: /mcp"), as a second ERROR.
    # Its 4xx answers are left to django.request, as any view's are.
    if out.status_code >= 500:
        out._has_been_logged = True  # type: ignore[attr-defined]  # read by django.utils.log.log_response
    return out


class MCPView(_Base):
    """Serves MCP Streamable HTTP (both protocol eras) under WSGI (runserver, gunicorn)."""

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        return _serve_sync(self, request)


def _serve_sync(view: _Base, request: HttpRequest) -> HttpResponseBase:
    """A request served on its own (WSGI) thread, streams included."""
    endpoint = get_endpoint(view.server)
    authenticators = mcp_settings.authenticators
    if authenticators:
        refusal = authenticate(request, authenticators)
        if refusal is not None:
            return _plain(refusal)
    translated = view._translate_in(endpoint, request)
    if isinstance(translated, HTTPResponse):
        return _plain(translated)
    try:
        # Reading the user (its session) and permission checks query the database: a failure
        # there (an outage, an exhausted connection pool) is answered as one in the endpoint.
        translated.principal = principal_of(request)
        checks = tool_checks(endpoint.server, translated)
        if checks:
            translated.denied = run_checks(checks, request)
    except Exception:
        return _plain(endpoint.failed(translated))
    # Django's handler set this thread's request state (script prefix, URLconf, language):
    # a tool that runs on it needs nothing more (DjangoEndpoint.tool_context).
    mark_serving_thread(request)
    body = endpoint.iter_body
    if isinstance(request, ASGIRequest):  # uvicorn serving a project without ASGI_APPLICATION
        return _out(request, endpoint.handle(translated), lambda response: _FrameByFrame(body(response)))
    return _out(request, endpoint.handle(translated), body)


class _FrameByFrame:
    """The sync view's stream under ASGI, as Django's ASGI handler must get it to send each
    frame as it comes: an async iterator. Given the blocking iterator itself, Django reads it
    whole before sending any of it (with a warning), so a tool's progress and log reached the
    client only with its result. Each frame is read on the request's thread, where Django
    would have read the whole stream; closing closes the stream, as Django would have."""

    def __init__(self, frames: Iterator[bytes]) -> None:
        self._frames = frames
        self._read = sync_to_async(_next_frame, thread_sensitive=True)

    def __aiter__(self) -> _FrameByFrame:
        return self

    async def __anext__(self) -> bytes:
        frame = await self._read(self._frames)
        if frame is None:
            raise StopAsyncIteration
        return frame

    def close(self) -> None:
        close = getattr(self._frames, "close", None)
        if close is not None:
            close()


def _next_frame(frames: Iterator[bytes]) -> bytes | None:
    return next(frames, None)


def _out(request: HttpRequest, response: HTTPResponse, body: Callable[[HTTPResponse], Any]) -> HttpResponseBase:
    """Django's response for the endpoint's: plain, or streamed from ``body(response)``."""
    if response.stream is None:
        return _plain(response)
    if "HTTP_ACCEPT_ENCODING" in request.META:
        # GZipMiddleware (and its kin, which read the same header) would compress the stream:
        # under WSGI holding every frame back until the stream ends, under ASGI as one gzip
        # member per frame, of which clients decode only the first. An SSE answer goes out
        # as it is written, as the SDK's own server sends it. ``request.headers`` keeps the
        # header for the tools that read it.
        request.headers  # noqa: B018 (cached from META before the header leaves it)
        del request.META["HTTP_ACCEPT_ENCODING"]
    streaming = StreamingHttpResponse(body(response), status=response.status)
    for name, value in response.headers.items():
        streaming[name] = value
    return _logged(streaming)


class AsyncMCPView(_Base):
    """Serves MCP Streamable HTTP under ASGI (uvicorn) without a thread per request."""

    view_is_async = True

    async def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:  # type: ignore[override]
        if isinstance(request, WSGIRequest):
            # A WSGI server (runserver, gunicorn; ``ASYNC_VIEW = True``, or an ASGI_APPLICATION
            # it ignores): Django would read this view's streamed answer whole before sending
            # any of it, so a legacy call's question to its client would never leave. Served
            # the sync view's way, on the server's thread (which Django keeps waiting for this).
            return await sync_to_async(_serve_sync, thread_sensitive=True)(self, request)
        # Resolving the endpoint touches no database (a dict lookup after the first request),
        # so it runs right here rather than as a hop to a thread.
        endpoint = get_endpoint(self.server)
        authenticators = mcp_settings.authenticators
        if authenticators:
            # Authentication classes read the database: in a thread, as Django runs sync code.
            refusal = await sync_to_async(authenticate)(request, authenticators)
            if refusal is not None:
                return _plain(refusal)
        translated = self._translate_in(endpoint, request)
        if isinstance(translated, HTTPResponse):
            return _plain(translated)
        try:
            translated.principal = await aprincipal_of(request)
            checks = tool_checks(endpoint.server, translated)
            if checks:
                # Permission checks read the database: in a thread, as Django runs sync code.
                translated.denied = await sync_to_async(run_checks)(checks, request)
        except Exception:  # as in the sync view
            return _plain(endpoint.failed(translated))
        return _out(request, await endpoint.handle_from_other_loop(translated), endpoint.aiter_body)


def default_view(**initkwargs: Any) -> Any:
    """``MCPView`` or ``AsyncMCPView``, by ``MCP["ASYNC_VIEW"]`` (default: async under ASGI)."""
    use_async = mcp_settings.ASYNC_VIEW
    if use_async is None:
        use_async = bool(getattr(settings, "ASGI_APPLICATION", None))
    return (AsyncMCPView if use_async else MCPView).as_view(**initkwargs)
