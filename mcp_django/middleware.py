"""``MCPMiddleware``: lets the MCP endpoint answer a foreign Host header itself, be reached
without the trailing slash of its mount (``path("mcp/", ...)``, client at ``/mcp``) and turn
away a caller who is not signed in with a JSON-RPC error rather than the login page's redirect;
lets every other view read a chunked request body (see :func:`_read_chunked_body`).

Django's ``CommonMiddleware`` calls ``request.get_host()`` on every request and answers a
Host outside ``ALLOWED_HOSTS`` with an HTML 400 page, before any view runs. An MCP client
must get a JSON-RPC error instead. Put this middleware first in ``MIDDLEWARE``; it only acts
on URLs served by an MCP view, and only on requests whose Host Django would refuse.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from functools import lru_cache
from io import BytesIO, RawIOBase
from typing import Any, NoReturn
from urllib.parse import urlsplit

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.core.exceptions import DisallowedHost, RequestDataTooBig
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import resolve_url
from django.urls import Resolver404, get_resolver
from mcp_types import INTERNAL_ERROR, INVALID_REQUEST

from mcp_common.http import read_at_most
from mcp_common.jsonrpc import dumps, error_body
from mcp_common.security import host_allowed


@lru_cache(maxsize=2048)
def _is_mcp_path(urlconf: str | None, path: str) -> bool | None:
    """Whether ``path`` routes to an MCP view; ``None``: it routes nowhere."""
    try:
        match = get_resolver(urlconf).resolve(path)
    except Resolver404:
        return None
    return bool(getattr(match.func, "mcp_endpoint", False))


_HOST_VERDICTS: dict[tuple[str, str | None], bool] = {}
"""Django's verdict per (Host, X-Forwarded-Host): the same few values come with every request.
Emptied when a setting it depends on changes; bounded, because clients choose the values."""
_HOST_VERDICTS_MAX = 256


def _django_allows(request: HttpRequest) -> bool:
    # Django's own verdict, which CommonMiddleware would otherwise give as HTML: it also refuses
    # what no pattern can save (a_b.example.com under ".example.com", any junk under "*") and
    # looks at X-Forwarded-Host when USE_X_FORWARDED_HOST is on.
    meta = request.META
    host = meta.get("HTTP_HOST")
    key = (host, meta.get("HTTP_X_FORWARDED_HOST")) if isinstance(host, str) else None
    verdict = _HOST_VERDICTS.get(key) if key is not None else None
    if verdict is None:
        try:
            request.get_host()
            verdict = True
        except DisallowedHost:
            verdict = False
        if key is not None and len(_HOST_VERDICTS) < _HOST_VERDICTS_MAX:
            _HOST_VERDICTS[key] = verdict
    return verdict


def forget_host_verdicts() -> None:
    """After ``ALLOWED_HOSTS``, ``DEBUG`` or ``USE_X_FORWARDED_HOST`` changed."""
    _HOST_VERDICTS.clear()


def _urlconf(request: HttpRequest) -> Any:
    return getattr(request, "urlconf", None) or settings.ROOT_URLCONF


def _refusal(request: HttpRequest) -> HttpResponse | None:
    urlconf = _urlconf(request)
    path = request.path_info
    routed = _is_mcp_path(urlconf, path)
    if not routed:
        if routed is not None or path.endswith("/") or not settings.APPEND_SLASH:
            return None
        if not _is_mcp_path(urlconf, path + "/"):
            return None
        # An endpoint mounted as ``path("mcp/", ...)`` and a client pointed at ``/mcp``: Django's
        # APPEND_SLASH would redirect the POST, which no MCP client follows (and under DEBUG
        # raise an HTML error). Served where the redirect would have led.
        request.path_info = path + "/"
        request.path = request.path + "/"
    from mcp_django.conf import mcp_settings
    from mcp_django.views import raw_host

    if host_allowed(raw_host(request), mcp_settings.config.allowed_hosts) and _django_allows(request):
        return None
    try:
        request.get_host()
    except DisallowedHost as exc:
        # What CommonMiddleware's refusal would have logged, on the logger Django uses for it
        # ("You may need to add ... to ALLOWED_HOSTS"): the client is told only "Invalid Host".
        logging.getLogger("django.security.DisallowedHost").error(
            str(exc), extra={"status_code": 421, "request": request}
        )
    response = HttpResponse(
        b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Host header"}}',
        status=421,
        content_type="application/json",
    )
    return response


class _TooLarge(RawIOBase):
    """The stream of a chunked body longer than ``DATA_UPLOAD_MAX_MEMORY_SIZE``: reading it
    fails as ``request.body`` fails for a declared ``Content-Length`` that long. A file object
    (not seekable, so Django 6.1's size check by seeking skips it) whose every read fails."""

    def readable(self) -> bool:
        return True

    def read(self, *args: Any) -> NoReturn:
        raise RequestDataTooBig("Request body exceeded settings.DATA_UPLOAD_MAX_MEMORY_SIZE.")

    readinto = readline = read  # type: ignore[assignment]


def _read_chunked_body(request: HttpRequest) -> None:
    """A chunked body (no ``Content-Length``) that the WSGI server de-chunks and ends at its
    end (``wsgi.input_terminated``: gunicorn), made readable: Django's WSGI request takes a
    body with no length as empty, so a webhook behind a proxy that streams request bodies
    (nginx's ``proxy_request_buffering off``) would read nothing. Read here, at most
    ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (Django's limit for ``request.body``) plus one byte, and
    given the length it has; a longer one fails when read, as a declared one that long does.
    The MCP endpoint reads its own, under ``MAX_BODY_SIZE``."""
    meta = request.META
    if (
        meta.get("CONTENT_LENGTH")
        or not meta.get("wsgi.input_terminated")
        or "chunked" not in str(meta.get("HTTP_TRANSFER_ENCODING", "")).lower()
        or _is_mcp_path(_urlconf(request), request.path_info)
    ):
        return
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    read = meta["wsgi.input"].read
    body = read() if limit is None else read_at_most(read, limit + 1)
    if limit is not None and len(body) > limit:
        request._stream = _TooLarge()  # type: ignore[attr-defined]
        return
    meta["CONTENT_LENGTH"] = str(len(body))
    request._stream = BytesIO(body)  # type: ignore[attr-defined]


_JSON_RPC_TYPES = ("application/json", "text/event-stream")
_TEXT_SHOWN = 500
"""A plain-text refusal's body up to this many bytes is put in the error's message."""


def _answered(request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
    """``response``, or for an MCP URL the JSON-RPC form of what the site's code answered
    instead of the endpoint: a login redirect (:func:`_login_redirect`), or an error page
    (:func:`_error_page`)."""
    status = response.status_code
    if status >= 400:
        return _error_page(request, response)
    if status >= 300:
        return _login_redirect(request, response)
    return response


def _error_page(request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
    """For an MCP URL, a refusal or failure that did not come from the endpoint (a middleware
    after this one raised ``PermissionDenied`` or an error, or answered 429 itself: Django's
    HTML pages, under ``DEBUG`` its traceback) as a JSON-RPC error at the same status, keeping
    its headers (``Retry-After``) and cookies; the official client shows its message."""
    content_type = response.get("Content-Type", "")
    if content_type.startswith(_JSON_RPC_TYPES) or not _is_mcp_path(_urlconf(request), request.path_info):
        return response
    status = response.status_code
    message = response.reason_phrase
    if content_type.startswith("text/plain") and not response.streaming:
        text = response.content[: _TEXT_SHOWN + 1].decode(response.charset, "replace").strip()
        if text and len(text) <= _TEXT_SHOWN:
            message = f"{message}: {text}"
    out = HttpResponse(
        dumps(error_body(INVALID_REQUEST if status < 500 else INTERNAL_ERROR, message)),
        status=status,
        content_type="application/json",
    )
    for name, value in response.items():
        if name.lower() not in ("content-type", "content-length", "content-encoding"):
            out[name] = value
    out.cookies = response.cookies
    if getattr(response, "_has_been_logged", False):
        out._has_been_logged = True  # type: ignore[attr-defined]
    response.close()
    return out


def _login_redirect(request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
    """``response``, or, for the login page's redirect of an MCP request, the JSON-RPC error
    that tells the client it is not signed in (:func:`mcp_django.auth.login_refusal`)."""
    if not 300 <= response.status_code < 400 or "Location" not in response:
        return response
    if not _is_mcp_path(_urlconf(request), request.path_info):
        return response
    if urlsplit(response["Location"]).path != urlsplit(str(resolve_url(settings.LOGIN_URL))).path:
        return response  # another redirect (SECURE_SSL_REDIRECT's): the client may follow it
    from mcp_django.auth import login_refusal
    from mcp_django.conf import mcp_settings
    from mcp_django.views import _plain

    return _plain(login_refusal(request, mcp_settings.authenticators))


class MCPMiddleware:
    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        self._async = iscoroutinefunction(get_response)
        if self._async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if self._async:
            return self.__acall__(request)
        refusal = _refusal(request)
        if refusal is not None:
            return refusal
        _read_chunked_body(request)  # WSGI only: an ASGI request has no wsgi.input
        return _answered(request, self.get_response(request))

    async def __acall__(self, request: HttpRequest) -> Any:
        refusal = _refusal(request)
        if refusal is not None:
            return refusal
        result: Awaitable[Any] = self.get_response(request)
        return _answered(request, await result)
