"""The endpoint as Django serves it: every tool runs with the MCP request's Django state.

Django's handler sets some state for the thread that serves a request: the script prefix
(``reverse()`` under a sub-path deployment), the URLconf a middleware chose
(``request.urlconf``) and the language (``LocaleMiddleware``). A tool may run elsewhere: on a
worker thread of the SDK's, on the endpoint's event loop, after the response began (a legacy
call waiting for an answer). :meth:`DjangoEndpoint.tool_context` gives it the same state there,
so ``reverse()`` and ``gettext`` in a tool answer the same on every path.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from django.core.handlers.wsgi import get_script_name
from django.http import HttpRequest
from django.urls import get_script_prefix, get_urlconf, set_script_prefix, set_urlconf
from django.utils import translation

from mcp_common import MCPEndpoint, current_request


@contextlib.contextmanager
def request_state(request: HttpRequest) -> Iterator[None]:
    """Django's per-request state as ``request`` had it, restored afterwards."""
    prefix, urlconf = get_script_prefix(), get_urlconf()
    set_script_prefix(get_script_name(request.META))
    if getattr(request, "urlconf", None) is not None:
        set_urlconf(request.urlconf)
    language = getattr(request, "LANGUAGE_CODE", None)
    try:
        with translation.override(language) if language else contextlib.nullcontext():
            yield
    finally:
        set_script_prefix(prefix)
        set_urlconf(urlconf)


def serving_request() -> HttpRequest | None:
    """The Django request whose MCP message is being served, if any."""
    current = current_request.get()
    native = current.native if current is not None else None
    return native if isinstance(native, HttpRequest) else None


def mark_serving_thread(request: HttpRequest) -> None:
    """Record that the current thread serves ``request`` with Django's state for it (set by
    Django's handler): a tool that runs on it needs nothing more (``tool_context``). The thread
    itself, not its id: the next thread started after it ends often gets the same id."""
    request._mcp_thread = threading.current_thread()  # type: ignore[attr-defined]


_NOTHING_TO_DO = contextlib.nullcontext()


class DjangoEndpoint(MCPEndpoint):
    """An ``MCPEndpoint`` whose tools run with the serving Django request's state."""

    def __init__(self, server: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(server, *args, **kwargs)
        # Built as it first serves a request: the URLconf is loaded, which the view tools'
        # arguments depend on (a URL's extra options are none of the caller's).
        from mcp_django.expose import settle_view_tools

        settle_view_tools(server)

    def tool_context(self) -> contextlib.AbstractContextManager[Any]:
        request = serving_request()
        if request is None or request.__dict__.get("_mcp_thread") is threading.current_thread():
            return _NOTHING_TO_DO
        wanted = request.__dict__.get("_mcp_django_state")
        if wanted is None:
            prefix = get_script_name(request.META)
            wanted = request._mcp_django_state = (  # type: ignore[attr-defined]
                prefix if prefix.endswith("/") else prefix + "/",  # as set_script_prefix() keeps it
                getattr(request, "urlconf", None),
                getattr(request, "LANGUAGE_CODE", None),
            )
        prefix, urlconf, language = wanted
        if (
            get_script_prefix() == prefix
            and get_urlconf() == urlconf
            and (language is None or translation.get_language() == language)
        ):
            # The thread already has it (the request's own thread, the usual case for a sync
            # tool under WSGI): a tool call costs a few lookups, not three assignments and a
            # translation override entered and left.
            return _NOTHING_TO_DO
        return request_state(request)
