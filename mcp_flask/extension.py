"""``MCP``: the Flask extension that serves MCP servers at URLs of an application."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from flask import Flask, Response, current_app, has_app_context, request
from mcp_types import INTERNAL_ERROR, INVALID_REQUEST
from sqlalchemy import Engine
from sqlalchemy.exc import ArgumentError, NoSuchModuleError
from werkzeug.exceptions import BadHost, HTTPException, SecurityError
from werkzeug.utils import ImportStringError, import_string

from mcp_common import _sdk
from mcp_common.config import MCPConfig, shared_names
from mcp_common.jsonrpc import dumps, error_body
from mcp_common.permissions import assert_enforced
from mcp_common.schemas import assert_server_schemas
from mcp_flask.conf import apply_defaults, build_config
from mcp_flask.endpoint import FlaskEndpoint
from mcp_flask.store import SQLAlchemyStore, make_engine

if TYPE_CHECKING:
    from flask_sqlalchemy import SQLAlchemy

logger = logging.getLogger("mcp_flask")

EXTENSION_KEY = "mcp"

PrincipalLoader = Callable[[], str | None]
"""Called in the request context of every MCP request: who is calling, as a stable string
(``None`` for anonymous). Sessions, request states and elicitations are bound to it."""


def flask_login_principal() -> str | None:
    """The default principal: Flask-Login's ``current_user`` when it is installed, set up on the
    app and authenticated (``"flask-user:<get_id()>"``), else ``None``."""
    app = current_app
    if not (hasattr(app, "login_manager") or "login_manager" in app.extensions):
        return None
    try:
        # An optional dependency, untyped: imported by name, so neither its absence nor its
        # missing stubs concern type checkers.
        current_user = importlib.import_module("flask_login").current_user
    except ImportError:
        return None
    if current_user is not None and current_user.is_authenticated:
        return f"flask-user:{current_user.get_id()}"
    return None


@dataclass(frozen=True)
class ServerEntry:
    """A server added with :meth:`MCP.add_server`, before any app resolves it."""

    server: Any
    """An ``MCPServer`` (or low-level ``Server``), or a dotted import path to one."""
    url: str
    name: str
    """The Flask endpoint name of its route (``url_for(name)``)."""


@dataclass
class MCPState:
    """What ``init_app`` built for one application: ``app.extensions["mcp"]``."""

    extension: MCP
    config: MCPConfig
    engine: Engine
    store: SQLAlchemyStore
    endpoints: dict[str, FlaskEndpoint] = field(default_factory=dict)
    """One endpoint per server, by URL."""

    def principal(self) -> str | None:
        return self.extension.principal_loader()

    def close(self) -> None:
        """Exit the servers' lifespans in this process, end the endpoints' database threads and
        close the database connections.

        For tests and orderly shutdowns; a request after it starts the lifespans again.
        """
        for endpoint in self.endpoints.values():
            endpoint.shutdown()
        self.store.close()
        self.engine.dispose()


def get_state(app: Flask | None = None) -> MCPState:
    """The extension's state on ``app`` (default: the current app)."""
    if app is None:
        if not has_app_context():
            raise RuntimeError("Working outside of application context: pass the app, or push its context.")
        app = current_app._get_current_object()  # type: ignore[attr-defined]
    state = app.extensions.get(EXTENSION_KEY)
    if not isinstance(state, MCPState):
        raise RuntimeError(
            "The Flask app is not registered with an MCP instance. Did you forget to call 'init_app', "
            "or did you create multiple 'MCP' instances?"
        )
    return state


def refuse_untrusted_host() -> Response | None:
    """A JSON-RPC 421 instead of Flask's HTML 400 when ``TRUSTED_HOSTS`` refuses the Host of a
    request to an MCP URL, or werkzeug cannot route it (``BadHost``: a name IDNA cannot encode,
    a label past 63 characters). Flask records the refusal, then raises it after the
    before-request hooks."""
    refused = request.routing_exception
    if isinstance(refused, SecurityError | BadHost) and request.path in get_state().endpoints:
        body = error_body(INVALID_REQUEST, "Invalid Host header")
        return Response(dumps(body), status=421, content_type="application/json")
    return None


def answer_http_error(exc: HTTPException) -> Any:
    """A JSON-RPC error instead of werkzeug's HTML page for an ``HTTPException`` raised before an
    MCP view runs (Flask-Limiter's 429, an ``abort()`` in a ``before_request`` hook), with its
    status and headers (the limiter's ``Retry-After``); the official client shows its message.

    Registered for ``HTTPException`` only when the app has no handler of its own for it. Any
    other request is answered as it would have been without this handler: by the app's own
    handler for a base class (``Exception``), else by werkzeug's page. A response the
    exception carries (Flask-Limiter's ``on_breach``) is the app's choice and is kept.
    """
    if exc.response is None and exc.code is not None and request.path in get_state().endpoints:
        message = f"{exc.name}: {exc.description}" if exc.description else exc.name
        code = INVALID_REQUEST if exc.code < 500 else INTERNAL_ERROR
        out = Response(dumps(error_body(code, message)), status=exc.code, content_type="application/json")
        for name, value in exc.get_headers():
            if name.lower() != "content-type":
                out.headers.add(name, value)
        return out
    mro = type(exc).__mro__
    handlers = current_app.error_handler_spec[None][None]
    for cls in mro[mro.index(HTTPException) + 1 :]:
        handler = handlers.get(cls)
        if handler is not None:
            return current_app.ensure_sync(handler)(exc)
    return exc


def resolve_server(server: Any) -> Any:
    """An ``MCPServer`` from an object or a dotted import path; a ``TypeError`` otherwise."""
    if isinstance(server, str):
        try:
            server = import_string(server)
        except ImportStringError as exc:
            raise ValueError(f"MCP server {server!r} could not be imported: {exc.exception}") from exc
    _sdk.lowlevel_server(server)  # raises TypeError naming what it got instead
    return server


def engine_from_config(config: Mapping[str, Any]) -> Engine:
    """The engine of ``MCP_DATABASE_URI`` with ``MCP_ENGINE_OPTIONS``; what SQLAlchemy refuses
    (an option it does not take or of the wrong type, a database or driver it cannot load) is
    a ``ValueError`` naming the key, with SQLAlchemy's message."""
    uri, options = config["MCP_DATABASE_URI"], config["MCP_ENGINE_OPTIONS"]
    try:
        return make_engine(uri, options)
    except (NoSuchModuleError, ImportError) as exc:
        raise ValueError(f"MCP_DATABASE_URI names a database or driver that cannot be loaded: {exc}") from exc
    except (ArgumentError, TypeError, ValueError) as exc:
        key = "MCP_ENGINE_OPTIONS" if options else "MCP_DATABASE_URI"
        raise ValueError(f"{key} is refused by sqlalchemy.create_engine(): {exc}") from exc


def _endpoint_name(url: str) -> str:
    return url.strip("/").replace("/", "_").replace(".", "_") or "mcp_root"


class MCP:
    """Serve MCP servers (the official SDK's ``MCPServer``) from a Flask application.

    One server at ``/mcp``::

        mcp = MCP(app, server=my_server)

    Several servers, with the application-factory pattern::

        mcp = MCP(servers={"/mcp": shop, "/mcp/files": files})
        mcp.add_server("myapp.tools.admin_server", "/mcp/admin")   # or one at a time

        def create_app():
            app = Flask(__name__)
            app.config.from_object(...)
            mcp.init_app(app)
            return app

    A server is an object or a dotted import path to one. Servers are added before
    ``init_app``; each application then gets one endpoint per server, with an exact-path route
    (no trailing-slash redirect: MCP clients do not follow a redirected POST).
    Configuration is read from ``MCP_*`` keys (:mod:`mcp_flask.conf`) once, in ``init_app``.
    Legacy sessions live in the database at ``MCP_DATABASE_URI``: create its tables with
    ``flask mcp migrate`` or :meth:`MCP.migrate` before serving.

    Tools run inside the serving application's context (``current_app``, Flask-SQLAlchemy's
    ``db.session``) and see the MCP request's (``flask.request``, also
    ``ctx.request_context.request``, and ``flask.session``, saved in the response unless it
    had started streaming as SSE: see the README). The MCP routes are exempted from Flask-WTF's
    ``CSRFProtect``, set up before this extension or after it (MCP clients send no CSRF token).
    An ``HTTPException`` raised before an MCP view runs (Flask-Limiter's 429) is answered in
    JSON-RPC when the app has no ``HTTPException`` handler of its own (:func:`answer_http_error`).

    :param app: the application, for the non-factory pattern.
    :param server: a server to serve at ``url``.
    :param url: where ``server`` is served.
    :param servers: URL -> server, for several at once.
    :param db: the application's Flask-SQLAlchemy instance. Its database becomes the default
        ``MCP_DATABASE_URI`` (Flask-SQLAlchemy registered on the app has the same effect).
    :param principal_loader: who is calling (see :data:`PrincipalLoader`); default
        :func:`flask_login_principal`. It can also be assigned later:
        ``mcp.principal_loader = fn``.
    """

    def __init__(
        self,
        app: Flask | None = None,
        *,
        server: Any = None,
        url: str = "/mcp",
        servers: Mapping[str, Any] | None = None,
        db: SQLAlchemy | None = None,
        principal_loader: PrincipalLoader | None = None,
    ) -> None:
        self.db = db
        self.principal_loader: PrincipalLoader = principal_loader or flask_login_principal
        self._servers: dict[str, ServerEntry] = {}
        self._apps_initialized = 0
        if server is not None:
            self.add_server(server, url)
        for server_url, each in (servers or {}).items():
            self.add_server(each, server_url)
        if app is not None:
            self.init_app(app)

    @property
    def servers(self) -> Mapping[str, ServerEntry]:
        """The servers added so far, by URL."""
        return dict(self._servers)

    def add_server(self, server: Any, url: str = "/mcp", *, name: str | None = None) -> None:
        """Serve ``server`` (an ``MCPServer`` or a dotted path to one) at ``url``.

        ``name`` is the Flask endpoint name of the route (default: from the URL, ``/mcp/files``
        -> ``mcp_files``). Call it before ``init_app``.
        """
        if self._apps_initialized:
            raise RuntimeError(
                "add_server() was called after init_app(): the server would be missing from the apps "
                "already initialized. Add every server before calling init_app()."
            )
        if not isinstance(url, str) or not url.startswith("/") or (url != "/" and url.endswith("/")):
            raise ValueError(f"An MCP URL starts with '/' and does not end with one, got {url!r}.")
        if url in self._servers:
            raise ValueError(f"A server is already added at {url!r}.")
        if server is None:
            raise ValueError(f"No server given for {url!r}.")
        if not isinstance(server, str):
            resolve_server(server)  # fail here, not in init_app, for an object of the wrong type
        self._servers[url] = ServerEntry(server, url, name or _endpoint_name(url))

    def init_app(self, app: Flask) -> None:
        """Read the ``MCP_*`` configuration, build one endpoint per server and add their routes
        and the ``flask mcp`` commands. Call it once per application.

        Raises :class:`mcp_common.schemas.ElicitationSchemaError` (a ``TypeError``) when a
        server's tool asks with an elicitation model the MCP spec does not accept (a nested
        model, a list of models...), with the SDK's own message.
        """
        if EXTENSION_KEY in app.extensions:
            raise RuntimeError(
                "An 'MCP' instance has already been registered on this Flask app. Import and use that "
                "instance instead; to serve more servers, call add_server() on it before init_app()."
            )
        if not self._servers:
            raise RuntimeError(
                "No MCP server to serve: pass MCP(server=...) or MCP(servers={...}), or call "
                "add_server() before init_app()."
            )
        uses_flask_sqlalchemy = self.db is not None or "sqlalchemy" in app.extensions
        apply_defaults(app, uses_flask_sqlalchemy=uses_flask_sqlalchemy)
        config = build_config(app)
        servers = {url: resolve_server(entry.server) for url, entry in self._servers.items()}
        clashes = shared_names(list(servers.items()))
        if clashes:
            raise ValueError(clashes[0])
        for url, served in servers.items():
            # A nested elicitation model fails here, at start-up, not in front of a user mid-call.
            assert_server_schemas(served, label=f"MCP server at {url!r}")
            assert_enforced(served, label=f"MCP server at {url!r}")
        engine = engine_from_config(app.config)
        store = SQLAlchemyStore(engine, checkpoint_interval=config.sqlite_checkpoint_interval)
        state = MCPState(extension=self, config=config, engine=engine, store=store)

        from werkzeug.routing import Rule

        from mcp_flask.cli import mcp_cli
        from mcp_flask.views import MCPView

        views: dict[str, Any] = {}
        for url, entry in self._servers.items():
            state.endpoints[url] = FlaskEndpoint(app, servers[url], config, store)
            view = MCPView.as_view(entry.name, url=url)
            if app.view_functions.get(entry.name, view) is not view:
                raise AssertionError(
                    f"View function mapping is overwriting an existing endpoint function: {entry.name}"
                )
            # A rule for every method (a Flask rule lists its methods, and any other would get
            # werkzeug's HTML 405 page): the core answers the ones MCP does not use with a
            # JSON-RPC 405, and OPTIONS (a CORS preflight, which Flask-CORS decorates) with 204 and
            # the methods it serves (Flask's own answer would advertise methods it refuses).
            app.url_map.add(Rule(url, endpoint=entry.name, methods=None))
            app.view_functions[entry.name] = view
            views[entry.name] = view

        def exempt_from_csrf(endpoint: str | None, _values: Any) -> None:
            # Flask-WTF's CSRFProtect would refuse every MCP POST with its HTML 400: clients
            # send no CSRF token. Told on the MCP URLs' requests, before any before_request
            # function (its check is one), so that it holds whether CSRFProtect was set up
            # before this extension or after it (an app factory's order is its own).
            view = views.get(endpoint or "")
            if view is not None:
                csrf = app.extensions.get("csrf")
                if csrf is not None and hasattr(csrf, "exempt"):
                    csrf.exempt(view)

        app.url_value_preprocessors.setdefault(None, []).append(exempt_from_csrf)
        # First of all before-request hooks: nothing of the app's runs on a request it would refuse.
        app.before_request_funcs.setdefault(None, []).insert(0, refuse_untrusted_host)
        if HTTPException not in app.error_handler_spec[None][None]:
            # Only when the exception is raised: nothing runs on a request that raises none.
            app.register_error_handler(HTTPException, answer_http_error)
        app.extensions[EXTENSION_KEY] = state
        app.cli.add_command(mcp_cli)
        self._apps_initialized += 1

    # -- per-application access --------------------------------------------------------------

    def endpoint(self, url: str = "/mcp", app: Flask | None = None) -> FlaskEndpoint:
        """The endpoint serving ``url`` on ``app`` (default: the current app)."""
        state = get_state(app)
        try:
            return state.endpoints[url]
        except KeyError:
            raise KeyError(f"No MCP server at {url!r}; served: {', '.join(state.endpoints)}") from None

    def store(self, app: Flask | None = None) -> SQLAlchemyStore:
        """The session store of ``app`` (default: the current app)."""
        return get_state(app).store

    @staticmethod
    def migrate(app: Flask | None = None, revision: str = "head") -> None:
        """Create or upgrade the extension's tables in ``app``'s ``MCP_DATABASE_URI``.

        Idempotent; what ``flask mcp migrate`` runs. Works on the class (``MCP.migrate(app)``)
        and on an instance.
        """
        from mcp_flask.migrations import migrate

        migrate(get_state(app).engine, revision)
