"""The core's ``MCPEndpoint``, serving tools inside the Flask application context.

Tools run on the core's event-loop thread, where Flask has no context. An MCP tool of a Flask
application expects what a view has: ``current_app``, Flask-SQLAlchemy's ``db.session``,
``app.logger``. :class:`AppContextMiddleware` pushes the serving application's context around
every MCP request handler, so each tool call gets its own context (and its own ``db.session``,
removed at teardown as after a view).
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import logging
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from flask import Flask, current_app, has_app_context, has_request_context
from flask.ctx import RequestContext
from flask.globals import _cv_request, request_ctx
from flask.sessions import SecureCookieSession
from mcp.server.context import CallNext, HandlerResult, ServerMiddleware, ServerRequestContext

from mcp_common import _sdk
from mcp_common.config import MCPConfig
from mcp_common.endpoint import MCPEndpoint
from mcp_common.http import HTTPRequest, HTTPResponse
from mcp_flask.elicitation import refuse_if_the_app_holds_the_write_lock

if TYPE_CHECKING:
    from mcp_flask.store import SQLAlchemyStore

logger = logging.getLogger("mcp_flask")

serving_app: contextvars.ContextVar[Flask | None] = contextvars.ContextVar("mcp_flask_serving_app", default=None)
"""The Flask application whose endpoint is serving the current MCP request (on the loop thread)."""


class AppContextMiddleware(ServerMiddleware[Any]):
    """SDK server middleware: run each MCP request handler in the serving app's context.

    One server object may be served by several applications; the application is the one that
    received the HTTP request (:data:`serving_app`), not one fixed at install time.
    """

    fast_path_safe = True
    """The core's fast path runs tools inside ``FlaskEndpoint.tool_context()``: the same context."""

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        app = serving_app.get()
        if app is None:
            return await call_next(ctx)
        with app.app_context(), handler_request_context(app):
            return await call_next(ctx)


_handler_request: contextvars.ContextVar[RequestContext | None] = contextvars.ContextVar(
    "mcp_flask_handler_request", default=None
)
"""The request context a handler runs in (:func:`handler_request_context`), shared by the tasks it starts."""


def _detach(outer: RequestContext) -> RequestContext:
    # The view's request, session object and after_this_request list, under a context object
    # of its own (never pushed: Flask's push and pop are the view's).
    detached = copy.copy(outer)
    detached._cv_tokens = []  # type: ignore[attr-defined]
    return detached


@contextlib.contextmanager
def handler_request_context(app: Flask) -> Iterator[None]:
    """Around one MCP request handler on the event loop: ``flask.request`` and ``flask.session``
    are the view's, through a request context object of the handler's own. When the response
    starts streaming, :meth:`FlaskEndpoint.response_started` swaps that object's session for a
    copy: at once for the handler and every task it started (whichever of them notified),
    while Flask saves the view's session object, which no handler writes any more."""
    outer = request_ctx._get_current_object() if has_request_context() else None  # type: ignore[attr-defined]
    if outer is None or outer.app is not app or _handler_request.get() is not None:
        yield
        return
    detached = _detach(outer)
    request_token = _cv_request.set(detached)
    handler_token = _handler_request.set(detached)
    try:
        yield
    finally:
        _handler_request.reset(handler_token)
        _cv_request.reset(request_token)


def install_app_context(server: Any) -> None:
    """Put :class:`AppContextMiddleware` outermost on ``server`` (once per server)."""
    chain = _sdk.lowlevel_server(server).middleware
    if not any(isinstance(middleware, AppContextMiddleware) for middleware in chain):
        chain.insert(0, AppContextMiddleware())


class StreamedSession(SecureCookieSession):
    """``flask.session`` for a handler whose response has started streaming (SSE).

    The session cookie went out with the response's headers: Flask saved the session as the
    handler had left it until then. From there on the handler reads and writes a copy, which
    nobody saves; its first change logs a warning naming the handler.
    """

    def __init__(self, saved: Mapping[str, Any], handler: str) -> None:
        super().__init__(saved)
        self.handler = handler
        self.warned = False

        def on_update(session: StreamedSession) -> None:
            session.modified = session.accessed = True
            if not session.warned:
                session.warned = True
                logger.warning(
                    "MCP handler %r changed flask.session after its response had started streaming "
                    "(SSE): the change is not saved in the client's session cookie. On the 2026-07-28 "
                    "era, change it before the handler's first notification (progress, log); a legacy "
                    "call on the SDK's path streams from its start (MCP_JSON_RESPONSE answers with JSON).",
                    session.handler,
                )

        self.on_update = on_update


class FlaskEndpoint(MCPEndpoint):
    """An ``MCPEndpoint`` bound to the Flask application that serves it."""

    def __init__(self, app: Flask, server: Any, config: MCPConfig, store: SQLAlchemyStore) -> None:
        super().__init__(server, config, store)
        self.app = app
        self.engine = store.engine
        self.sqlite = store.engine.dialect.name == "sqlite"
        install_app_context(server)

    def lifespan_context(self) -> contextlib.AbstractContextManager[Any]:
        # The server's lifespan may use the app's extensions (a database session), as a CLI
        # command would: an application context of its own, no request's.
        return self.app.app_context()

    def tool_context(self) -> contextlib.AbstractContextManager[Any]:
        # A sync tool on the fast path runs in the view's own thread, inside the request's
        # application context already: it uses that one, like any view code. Elsewhere (an
        # async tool on the event loop) it gets its own, as on the SDK's path.
        if has_app_context() and current_app._get_current_object() is self.app:  # type: ignore[attr-defined]
            return contextlib.nullcontext()
        return self.app.app_context()

    def before_sending(self, what: str) -> None:
        # A legacy message (a question, a progress or log notification) or a 2026-07-28
        # question is written on the store's connection: an uncommitted write of the handler's
        # own ``db.session`` to the same SQLite file would make that write wait 20 s and fail
        # with "database is locked" (and a question that waited would keep every other writer
        # out while the user thinks).
        # Costs an attribute test per message on other databases.
        if self.sqlite:
            refuse_if_the_app_holds_the_write_lock(self.engine, f"sending {what} to the client", "send it")

    def response_started(self, request: HTTPRequest, handler: str) -> None:
        # Flask saves the view's session into the response after the view returns, while the
        # handler runs on here: from now on the handler and its tasks read and write a copy,
        # so what Flask saves is what the handler left before the stream started, with no race
        # between the two threads.
        detached = _handler_request.get()
        if detached is None:
            # A legacy call, before its handler runs: in the call's own task, whose context ends
            # with it (nothing to pop, and Flask's teardown_request functions run once, the view's).
            if not has_request_context():
                return
            outer = request_ctx._get_current_object()  # type: ignore[attr-defined]
            if outer.request is not request.native:
                return
            detached = _detach(outer)
            _cv_request.set(detached)
            _handler_request.set(detached)
        elif detached.request is not request.native:
            return
        # The session object itself: Flask 3.1.3 keeps it as ``_session`` behind a ``session``
        # property (which marks it accessed), earlier releases as a plain ``session``.
        attribute = "_session" if "_session" in vars(detached) else "session"
        saved = getattr(detached, attribute)
        if saved is not None and not isinstance(saved, StreamedSession):
            setattr(detached, attribute, StreamedSession(saved, handler))

    async def handle_async(self, request: HTTPRequest) -> HTTPResponse:
        # Tasks started while serving (a legacy tool call outlives this coroutine) copy the
        # context here, so they see the app too.
        token = serving_app.set(self.app)
        try:
            return await super().handle_async(request)
        finally:
            serving_app.reset(token)
