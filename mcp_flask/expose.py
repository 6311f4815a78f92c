"""A Flask application's existing views and SQLAlchemy models as tools.

    import mcp_flask

    @mcp_flask.view_tool(mcp, arguments={"q": (str | None, None)})
    @app.get("/orders/<int:order_id>")
    @login_required
    def order_detail(order_id: int): ...                  # a tool named order_detail(order_id, q)

    mcp_flask.model_tools(mcp, Product, fields=["id", "name", "price"], filters=["category"],
                          search=["name"])                # list_products(...) and get_product(id)

A view tool calls the view in a request context of its own, built from the MCP request: the
same headers (``Cookie``, ``Authorization``, ``Host``...) and client address, so Flask-Login's
``current_user`` is the caller; the view's own URL when it is routed; the tool's path arguments
as the view's keyword arguments and its other arguments as the query string (GET, HEAD, DELETE)
or a JSON body (POST, PUT, PATCH). The view runs as Flask's dispatch would run it, minus
routing: the ``before_request`` functions of the app and of the view's blueprint run first (a
blueprint's guard applies to its views called as tools too; one that answers answers for the
view), then the view with its own decorators (``login_required``) and those its URL wraps it in,
then the ``after_request`` functions. Changes to the Flask session are not sent back to the
client, and CSRF is not enforced (Flask-WTF's ``CSRFProtect`` check is skipped). What the view
answers becomes the tool's result: JSON as structured content, HTML as its text, a redirect,
``abort()`` or a 4xx as a tool error naming it, and a crash as "500 Internal Server Error" with
the traceback in the log. Flask's error handlers do not run: their pages are for browsers.

Model tools read a model through ``query()``, a ``select()`` that defaults to every row and can
be narrowed per caller (``query=lambda: select(Order).where(Order.owner_id == current_user.id)``);
it runs in the same kind of request context as a view. Flask has no model permissions: the tools
are offered to everyone unless ``permission`` says otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
import inspect
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal, TypeVar, overload
from urllib.parse import unquote, urlencode

import sqlalchemy as sa
from flask import Flask, Response, current_app, g, request, url_for
from flask.views import View
from mcp.types import CallToolResult
from pydantic import BaseModel
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import Mapper, Session, lazyload, scoped_session, undefer
from werkzeug.exceptions import HTTPException, MethodNotAllowed, NotFound
from werkzeug.http import HTTP_STATUS_CODES
from werkzeug.routing import BuildError
from werkzeug.test import EnvironBuilder

from mcp_common import current_request
from mcp_common.expose import (
    BODY_METHODS,
    JSONValue,
    ViewResponse,
    add_canonical_json,
    add_tool,
    canonical_json,
    check_model_options,
    default_names,
    describe_view,
    error,
    failed,
    get_tool,
    html_to_text,
    json_value,
    known_count,
    list_tool,
    object_result,
    page_result,
    path_parameters,
    pluralize,
    query_pairs,
    read_as_url_text,
    register_tool,
    require_server,
    share_permission,
    shown_window,
    snake_case,
    tool_function,
    view_result,
    wraps,
)
from mcp_flask.permissions import permission_required

V = TypeVar("V", bound=Callable[..., Any])
M = TypeVar("M", bound=type)

_NOT_COPIED = frozenset({"content-length", "content-type", "host"})
_COPIED_ENVIRON = ("REMOTE_ADDR", "REMOTE_PORT", "REMOTE_USER", "AUTH_TYPE", "SERVER_PROTOCOL")
"""What the server or a WSGI middleware says about the caller, besides its headers."""


@overload
def view_tool(
    server: Any,
    view: V,
    *,
    name: str | None = None,
    description: str | None = None,
    method: str = "GET",
    arguments: Mapping[str, Any] | type[BaseModel] | None = None,
    path_arguments: Mapping[str, Any] | None = None,
    title: str | None = None,
) -> V: ...


@overload
def view_tool(
    server: Any,
    view: None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    method: str = "GET",
    arguments: Mapping[str, Any] | type[BaseModel] | None = None,
    path_arguments: Mapping[str, Any] | None = None,
    title: str | None = None,
) -> Callable[[V], V]: ...


def view_tool(
    server: Any,
    view: V | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    method: str = "GET",
    arguments: Mapping[str, Any] | type[BaseModel] | None = None,
    path_arguments: Mapping[str, Any] | None = None,
    title: str | None = None,
) -> Any:
    """Register ``view`` as a tool of ``server``; as a decorator without ``view``.

    ``view`` is a view function (put the decorator above or below ``@app.get(...)``, which
    returns the function) or a ``flask.views.View`` subclass (served through ``as_view``).
    ``name`` defaults to the function's name (a class: its name in snake case), ``description``
    to its docstring. The tool's arguments are the view's own parameters (its URL's variables,
    typed by their annotations; for a class, those of its handler for ``method``) or
    ``path_arguments`` (names to types), and ``arguments`` (names to a type or a
    ``(type, default)`` pair, or a Pydantic model), sent as the query string or a JSON body
    depending on ``method``. The view is returned unchanged.
    """
    require_server(server, "mcp_flask")

    http_method = method.upper()

    def register(view: V) -> V:
        view_class: type[View] | None = view if isinstance(view, type) and issubclass(view, View) else None
        if view_class is None and isinstance(view, type):
            raise TypeError(f"view_tool(): {view!r} is neither a view function nor a flask.views.View subclass")

        def own_parameters() -> dict[str, inspect.Parameter]:
            if view_class is not None:
                handler = getattr(view_class, http_method.lower(), None) or view_class.dispatch_request
                return path_parameters(handler, skip=1)  # after ``self``
            return path_parameters(view, skip=0)  # a Flask view takes no request

        tool_name, spec, doc = describe_view(
            view, view_class, name, description, arguments, path_arguments, own_parameters
        )
        function = view_class.as_view(tool_name) if view_class is not None else view

        def start(values: dict[str, Any]) -> tuple[_CallerRequest, Callable[..., Any]]:
            path_args, rest = spec.split(values)
            routed = _view_route(view, function, path_args, http_method)
            if isinstance(routed, tuple):
                path, callee, path_args = routed
                return _CallerRequest(tool_name, path, http_method, rest, path_args, True), callee
            return _CallerRequest(tool_name, routed, http_method, rest, path_args, False), function

        if inspect.iscoroutinefunction(function):
            # Awaited on the tool's own loop: ``ensure_sync`` would start a loop inside a loop.
            async def call_async(values: dict[str, Any]) -> CallToolResult:
                try:
                    caller, callee = start(values)
                except Exception:  # a converter failing on the URL's values: a crash, as in the view
                    return failed(tool_name)
                with caller:
                    if caller.answer is None:
                        try:
                            if inspect.iscoroutinefunction(callee):
                                caller.respond(await callee(**caller.view_args))
                            else:
                                # A synchronous wrapper of the URL's (Flask-Login's
                                # ``login_required``) runs the view with ``ensure_sync``: on
                                # a thread, where no loop runs, with this context.
                                run = functools.partial(current_app.ensure_sync(callee), **caller.view_args)
                                caller.respond(await asyncio.to_thread(run))
                        except Exception as exc:
                            caller.refuse(exc)
                return caller.result()

            fn = tool_function(tool_name, doc, spec, call_async)
        else:

            def call(values: dict[str, Any]) -> CallToolResult:
                try:
                    caller, callee = start(values)
                except Exception:  # a converter failing on the URL's values: a crash, as in the view
                    return failed(tool_name)
                with caller:
                    if caller.answer is None:
                        try:
                            caller.respond(current_app.ensure_sync(callee)(**caller.view_args))
                        except Exception as exc:
                            caller.refuse(exc)
                return caller.result()

            fn = tool_function(tool_name, doc, spec, call)
        # ``@mcp_flask.permission_required`` on the view, above or below this decorator, hides the tool.
        share_permission(view, fn)
        register_tool(server, fn, tool_name, doc, title)
        return view

    return register(view) if view is not None else register


class _CallerRequest:
    """One tool call as a request of the caller's: its context, the hooks around it, its answer.

    Entering pushes a request context for ``path`` (an ``HTTPException``: a view whose URL
    cannot be built, refused with it) and runs the ``before_request`` functions; one that answers sets :attr:`answer`.
    :meth:`respond` and :meth:`refuse` record the view's answer, converted while the context is
    still there (a streamed body may need it).
    """

    def __init__(
        self,
        tool_name: str,
        path: str | HTTPException,
        method: str,
        rest: Mapping[str, Any],
        view_args: dict[str, Any] | None = None,
        routed: bool = False,
    ) -> None:
        self.tool_name = tool_name
        self.path = path
        self.method = method
        self.rest = rest
        self.view_args = view_args or {}
        """What the view is called with: at its own URL, what routing gave it, as the URL's
        ``url_value_preprocessor`` functions leave it (one may pop a value into ``g``)."""
        self.routed = routed
        self.answer: CallToolResult | None = None
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> _CallerRequest:
        if isinstance(self.path, HTTPException):
            # Not called: its URL cannot be built (its blueprint's hooks could not apply either).
            self.refuse(self.path)
            return self
        app: Flask = current_app._get_current_object()  # type: ignore[attr-defined]
        try:
            self._stack.enter_context(_caller_context(app, self.path, self.method, self.rest))
            early = _preprocess_request(app, self._stack)
            if self.routed and request.view_args is not None:
                self.view_args = dict(request.view_args)
        except Exception as exc:
            self.refuse(exc)
            return self
        if early is not None:
            self.respond(early)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._stack.close()

    def respond(self, rv: Any) -> None:
        try:
            response = current_app.process_response(current_app.make_response(rv))
            self.answer = view_result(_view_response(response), html_to_text, _login_url(), _signed_in(), _own_path())
        except Exception as exc:
            self.refuse(exc)

    def refuse(self, exc: Exception) -> None:
        """What Flask would answer for an exception the view (or a hook) raised."""
        if isinstance(exc, HTTPException):
            if exc.response is not None:  # abort(response)
                self.answer = view_result(
                    _view_response(exc.response), html_to_text, _login_url(), _signed_in(), _own_path()
                )
                return
            code = exc.code or 500
            location = getattr(exc, "new_url", None)  # a routing redirect
            # ``abort(409, "The till is closed.")``: Flask's error page tells the client why (a
            # 5xx's is not passed on); the class's own stock sentence says nothing more.
            told = exc.description if exc.description != type(exc).description else None
            body = told.encode() if isinstance(told, str) else b""
            self.answer = view_result(ViewResponse(code, "text/plain", body, location=location, reason=exc.name))
            return
        self.answer = failed(self.tool_name)

    def result(self) -> CallToolResult:
        assert self.answer is not None
        return self.answer


def _preprocess_request(app: Flask, stack: contextlib.ExitStack) -> Any:
    """``app.preprocess_request()`` for a view tool's request, less Flask-WTF's CSRF check.

    ``CSRFProtect`` refuses a POST (PUT, PATCH, DELETE) without its form's token, which no MCP
    client has: this request is the MCP request's, which the endpoint checked (its ``Origin``;
    it takes only JSON, which a cross-site form cannot send), as Django's view tools leave CSRF
    unenforced. ``g.csrf_valid`` is what ``CSRFProtect`` sets on a request it let through: a
    ``FlaskForm`` the view validates then skips its own token check, with ``CSRFProtect`` or
    without (until ``stack`` closes: ``g`` is the MCP request's application context's).
    """
    names = (None, *reversed(request.blueprints))
    for name in names:
        for url_func in app.url_value_preprocessors.get(name, ()):
            url_func(request.endpoint, request.view_args)
    for name in names:
        for before_func in app.before_request_funcs.get(name, ()):
            if getattr(before_func, "__module__", None) == "flask_wtf.csrf":
                continue
            rv = app.ensure_sync(before_func)()
            if rv is not None:
                return rv
    if not g.get("csrf_valid"):
        g.csrf_valid = True
        stack.callback(g.pop, "csrf_valid", None)
    return None


def _outer_request() -> Any:
    current = current_request.get()
    return current.native if current is not None else None


def _mcp_path() -> str:
    outer = _outer_request()
    return outer.path if outer is not None else "/"


def _view_route(
    view: Callable[..., Any], own: Callable[..., Any], path_args: dict[str, Any], method: str
) -> tuple[str, Callable[..., Any], dict[str, Any]] | str | HTTPException:
    """The view's URL path for these arguments, what the app runs there and with what (the
    arguments as its URL's converters make them, a text read as from a browser's URL: see
    :func:`read_as_url_text`): the URL's own
    function where it wraps the view (``add_url_rule("/ledger", view_func=login_required(ledger))``
    with the tool of the bare ``ledger``) or is a decorated ``as_view()`` of the class the tool
    was given, so that the checks a browser passes there apply to the tool too; else ``own``,
    the tool's. The MCP request's path for a view with no route. For a routed view whose URL
    cannot be built, what a browser would get for it: ``MethodNotAllowed`` when its routes admit
    these arguments for another method only, else ``NotFound`` (a value its converters refuse)."""
    app = current_app
    view_class = view if isinstance(view, type) else None
    endpoints = [
        endpoint
        for endpoint, function in app.view_functions.items()
        if wraps(function, view) or (view_class is not None and getattr(function, "view_class", None) is view_class)
    ]
    if not endpoints:
        return _mcp_path()
    adapter = app.url_map.bind("localhost")
    for endpoint in endpoints:
        try:
            read = read_as_url_text(
                path_args, [item for rule in app.url_map.iter_rules(endpoint) for item in rule._converters.items()]
            )
        except HTTPException as exc:
            return exc  # the converter answers for its URL (``first_or_404``), as it would a browser
        if read is None:
            continue  # a text no converter of its URLs admits
        try:
            path = adapter.build(endpoint, read, method=method)
            # Building does not check a value against its converter ("a/b" or "../x" for a
            # one-segment variable): the URL must route back to the view with these values.
            matched, values = adapter.match(unquote(path.split("?", 1)[0]), method=method)
        except (BuildError, HTTPException):
            continue
        if matched == endpoint and all(read[key] == value for key, value in values.items() if key in read):
            routed = app.view_functions[endpoint]
            return path, (own if routed is view else routed), read
    rules = [rule for endpoint in endpoints for rule in app.url_map.iter_rules(endpoint)]
    if not any(rule.methods is None or method in rule.methods for rule in rules):
        return MethodNotAllowed([m for rule in rules for m in rule.methods or ()])
    return NotFound()


@contextlib.contextmanager
def _caller_context(app: Flask, path: str, method: str, rest: Mapping[str, Any]) -> Iterator[None]:
    """A request context of ``app`` for ``path``, as the caller of the MCP request."""
    outer = _outer_request()
    body = app.json.dumps(rest).encode() if method in BODY_METHODS else None
    base = "http://localhost/"
    headers: list[tuple[str, str]] = []
    environ_base: dict[str, Any] = {}
    if outer is not None:
        base = outer.host_url.rstrip("/") + outer.script_root + "/"
        headers = [(k, v) for k, v in outer.headers.items() if k.lower() not in _NOT_COPIED]
        environ_base = {key: outer.environ[key] for key in _COPIED_ENVIRON if key in outer.environ}
    builder = EnvironBuilder(
        path=path,
        base_url=base,
        method=method,
        headers=headers,
        query_string=None if method in BODY_METHODS else urlencode(query_pairs(rest)),
        data=body,
        content_type="application/json" if body is not None else None,
        environ_base=environ_base,
    )
    try:
        environ = builder.get_environ()
    finally:
        builder.close()
    # Inside the tool's application context: Flask-SQLAlchemy's session is the tool's, and a
    # user Flask-Login already loaded for this context (``g._login_user``) is the one the view sees.
    with app.request_context(environ):
        yield


def _own_path() -> str:
    """The path the view is called at, as a guard gives it for the way back (``request.url``)."""
    return request.script_root + request.path


def _login_url() -> str | None:
    """Where Flask-Login sends callers who are not signed in, for the request being served."""
    manager = getattr(current_app, "login_manager", None)
    if manager is None:
        return None
    login_view = manager.blueprint_login_views.get(request.blueprint) or manager.login_view
    if not login_view:
        return None
    if login_view.startswith(("https://", "http://", "/")):
        return str(login_view)
    try:
        return url_for(login_view)
    except BuildError:
        return None


def _signed_in() -> bool:
    """Whether Flask-Login's ``current_user`` (the view's caller) is signed in."""
    if getattr(current_app, "login_manager", None) is None:
        return False
    from flask_login import current_user

    return bool(current_user.is_authenticated)


def _view_response(response: Response) -> ViewResponse:
    # ``send_file`` answers in passthrough mode, for the WSGI server's file wrapper: read it here.
    response.direct_passthrough = False
    try:
        body = response.get_data()
    finally:
        response.close()
    return ViewResponse(
        status=response.status_code,
        content_type=response.headers.get("Content-Type", ""),
        body=body,
        location=response.headers.get("Location"),
        reason=HTTP_STATUS_CODES.get(response.status_code, ""),
        charset=response.mimetype_params.get("charset", "utf-8"),
    )


# -- models ------------------------------------------------------------------------------------


def model_tools(
    server: Any,
    model: M | None = None,
    *,
    fields: Sequence[str] | Literal["__all__"],
    filters: Sequence[str] = (),
    search: Sequence[str] = (),
    ordering: Sequence[str] | None = None,
    page_size: int = 20,
    max_page_size: int = 100,
    actions: Sequence[str] = ("list", "get"),
    query: Callable[[], sa.Select[Any]] | None = None,
    permission: Callable[[], bool] | None = None,
    names: Mapping[str, str] | None = None,
    session: Callable[[], Session | scoped_session[Any]] | None = None,
) -> Any:
    """Register read tools for the SQLAlchemy model ``model``: ``list_<plural>`` (filters,
    search, pages) and ``get_<name>`` (by primary key); as a class decorator without ``model``.

    ``fields`` must be named (or ``"__all__"``): a model's columns are not all for every
    caller. ``filters`` are columns the list tool filters on by exact value; ``search`` are text
    columns a ``search`` argument matches (case-insensitive, any of them). ``ordering`` names
    columns, ``-name`` for descending (default: the primary key, which is always appended so
    pages never overlap). ``query()`` returns the ``select()`` of the model a caller may read
    (default: ``select(model)``); it runs in a request context like a view's, so
    ``current_user`` is the caller. ``permission``: a check as for
    :func:`mcp_flask.permission_required`, or ``None`` (the default) for everyone. ``names``
    overrides the tools' names (``{"list": ..., "get": ...}``; default from the class name,
    ``OrderItem`` → ``list_order_items``, ``get_order_item``). ``session()`` returns the
    SQLAlchemy session (or a ``scoped_session``) to read with (default: Flask-SQLAlchemy's
    ``db.session``). The model is returned unchanged.
    """

    def register(model: M) -> M:
        owner = f"model_tools({getattr(model, '__name__', model)!r})"
        try:
            mapper: Mapper[Any] = sa.inspect(model)
        except sa.exc.NoInspectionAvailable:
            raise TypeError(f"{owner}: not a SQLAlchemy mapped class") from None
        columns = {prop.key: getattr(model, prop.key) for prop in mapper.column_attrs}
        check_model_options(owner, actions, fields, page_size, max_page_size, ValueError, "columns")
        if fields == "__all__":
            shown = list(columns)
        else:
            shown = list(fields)
            for name in shown:
                _column(columns, name, owner, "fields")
        filtered = {name: _column(columns, name, owner, "filters") for name in filters}
        searched = [_column(columns, name, owner, "search") for name in search]
        for column in searched:
            if not isinstance(column.type, sa.String) or isinstance(column.type, sa.Enum):
                raise ValueError(f"{owner}: search column {column.key!r} is not a text column")
        if len(mapper.primary_key) != 1 and "get" in actions:
            raise ValueError(f'{owner}: get needs a single-column primary key; use actions=("list",)')
        keys = [mapper.get_property_by_column(column).key for column in mapper.primary_key]
        order = []
        for item in ordering or ():
            name = item.removeprefix("-")
            column = _column(columns, name, owner, "ordering")
            order.append(column.desc() if item.startswith("-") else column.asc())
        named = {item.removeprefix("-") for item in ordering or ()}
        order.extend(columns[key].asc() for key in keys if key not in named)  # pages must not overlap
        singular = snake_case(model.__name__).replace("_", " ")
        tool_names = default_names(singular, pluralize(singular), names, actions, owner)
        guard = permission_required(permission) if permission is not None else None

        # A column mapped deferred=True that the tool shows is read with its row, not by a
        # query of its own per row.
        deferred = [undefer(columns[name]) for name in shown if mapper.column_attrs[name].deferred]

        def rows() -> sa.Select[Any]:
            statement = query() if query is not None else sa.select(model)
            return statement.options(*deferred) if deferred else statement

        # SQLite keeps no offset: an aware column reads back naive there (it is aware on
        # PostgreSQL, and under Django on every backend). Its wall time is read as UTC.
        aware = {name for name in shown if isinstance(columns[name].type, sa.DateTime) and columns[name].type.timezone}

        def serialize(obj: Any) -> dict[str, Any]:
            row: dict[str, Any] = {}
            for name in shown:
                value = getattr(obj, name)
                if name in aware and isinstance(value, dt.datetime) and value.tzinfo is None:
                    value = value.replace(tzinfo=dt.UTC)
                row[name] = json_value(value)
            return row

        def as_caller(action: str, read: Callable[[Session, dict[str, Any]], CallToolResult]) -> Callable[..., Any]:
            def call(values: dict[str, Any]) -> CallToolResult:
                # ``query()`` and the hooks see the caller as a view would (``current_user``, ``g``).
                with _CallerRequest(tool_names[action], _mcp_path(), "GET", {}) as caller:
                    if caller.answer is None:
                        try:
                            return _read(_session(session, owner), read, values)
                        except Exception:
                            # The client gets no database detail; the log gets the traceback.
                            return failed(tool_names[action], "the query")
                return caller.result()

            return call

        if "list" in actions:

            def list_rows(db: Session, values: dict[str, Any]) -> CallToolResult:
                statement = rows()
                page, size = values["page"], values["page_size"]
                dialect = db.get_bind(mapper).dialect  # the model's database (a bind of its own)
                for name, column in filtered.items():
                    if values.get(name) is not None:
                        if _beyond(column, values[name], dialect.name):
                            return page_result([], 0, page, size)
                        statement = statement.where(_matches(column, values[name], dialect))
                        if dialect.name == "sqlite" and isinstance(column.type, sa.JSON):
                            _add_canonical_json(db, mapper)
                text = values.get("search")
                if text:
                    pattern = "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
                    statement = statement.where(sa.or_(*(column.ilike(pattern, escape="\\") for column in searched)))
                # unique(): SQLAlchemy hands out no rows of a joined eager collection without it.
                chunk = db.scalars(statement.order_by(*order).limit(size).offset((page - 1) * size)).unique().all()
                count = None if _joins(statement) else known_count(page, size, len(chunk))
                if count is None:
                    count = db.scalar(sa.select(sa.func.count()).select_from(statement.order_by(None).subquery())) or 0
                return page_result([serialize(obj) for obj in chunk], count, page, size)

            filter_types = {name: _annotation(column) for name, column in filtered.items()}
            spec, described = list_tool(filter_types, search, page_size, max_page_size, pluralize(singular), owner)
            add_tool(server, tool_names["list"], described, spec, as_caller("list", list_rows), guard)

        if "get" in actions:
            key = keys[0]
            pk = columns[key]

            def get_row(db: Session, values: dict[str, Any]) -> CallToolResult:
                beyond = _beyond(pk, values[key], db.get_bind(mapper).dialect.name)
                obj = None if beyond else db.scalars(rows().where(pk == values[key]).limit(1)).unique().first()
                if obj is None:
                    return error(f"No {singular} with {key} {values[key]}.")
                return object_result(serialize(obj))

            spec, described = get_tool(key, _annotation(pk), singular, owner)
            add_tool(server, tool_names["get"], described, spec, as_caller("get", get_row), guard)
        return model

    return register(model) if model is not None else register


def _column(columns: Mapping[str, Any], name: str, owner: str, option: str) -> Any:
    if name not in columns:
        raise ValueError(f"{owner}: {option} names {name!r}, which is not a column of the model")
    return columns[name]


def _read(
    db: Session | scoped_session[Any], read: Callable[[Session, dict[str, Any]], CallToolResult], values: dict[str, Any]
) -> CallToolResult:
    """``read(db, values)`` (a ``scoped_session``'s own session), ending the transaction the
    read began, if it began one: its connection goes back to the pool now, not when the session
    is collected (a session made per call, ``session=lambda: Session(engine)``, would hold it
    until then). A transaction the session already had is left to its owner."""
    own = db() if isinstance(db, scoped_session) else db  # Flask-SQLAlchemy's db.session is a registry
    began = not own.in_transaction()
    try:
        return read(own, values)
    finally:
        if began:
            own.rollback()  # a read: nothing to commit


def _session(session: Callable[[], Session | scoped_session[Any]] | None, owner: str) -> Session | scoped_session[Any]:
    if session is not None:
        return session()
    extension = current_app.extensions.get("sqlalchemy")
    if extension is None:
        raise RuntimeError(
            f"{owner}: no SQLAlchemy session. Set up Flask-SQLAlchemy on the app "
            "(db.init_app(app)) or pass session= (a callable returning the session to read with)."
        )
    return extension.session  # type: ignore[no-any-return]


def _annotation(column: Any) -> Any:
    """The Python type a tool argument for ``column`` takes."""
    kind = column.type
    if isinstance(kind, sa.JSON):
        return JSONValue
    if isinstance(kind, sa.Enum):
        values = tuple(m.value for m in kind.enum_class) if kind.enum_class is not None else tuple(kind.enums)
        if values and all(isinstance(v, str | int) for v in values):
            return Literal[values]  # type: ignore[valid-type]
    try:
        return kind.python_type
    except NotImplementedError:
        return str


def _add_canonical_json(db: Session, mapper: Mapper[Any]) -> None:
    """:func:`add_canonical_json` on the SQLite connection ``db`` reads ``mapper``'s rows with."""
    add_canonical_json(db.connection(bind_arguments={"mapper": mapper}).connection.driver_connection)


def _joins(statement: sa.Select[Any]) -> bool:
    """Whether ``statement`` reads from a join or several tables (its own, not its eager
    loads'): it may then read a row more than once, which ``unique()`` folds, so that its page
    holds fewer rows than it read without being the last."""
    froms = statement.options(lazyload("*")).get_final_froms()
    return len(froms) != 1 or isinstance(froms[0], sa.Join)


def _beyond(column: Any, value: Any, dialect: str) -> bool:
    """Whether ``value`` is an integer past what the integer ``column`` holds, so no row has
    it: SQLite (64 bits) and PostgreSQL (by the column's type) refuse it in a query, as an
    error, where Django's lookups match nothing. MySQL compares it, matching nothing itself.
    ``dialect``: the name of the model's database's."""
    if type(value) is not int or not isinstance(column.type, sa.Integer):
        return False
    if dialect == "postgresql":
        kind = column.type
        bits = 16 if isinstance(kind, sa.SmallInteger) else 64 if isinstance(kind, sa.BigInteger) else 32
    elif dialect == "sqlite":
        bits = 64
    else:
        return False
    return not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1)


def _matches(column: Any, value: Any, dialect: Dialect) -> Any:
    """The condition of a filter on ``column`` for ``value``, on the ``dialect`` database.

    A JSON column matches the value as a JSON document, whatever the order of its keys:
    PostgreSQL has no ``=`` for its ``json`` type (cast to ``jsonb``), MariaDB's ``JSON`` is
    text (``JSON_EQUALS``), MySQL's compares as JSON, and SQLite's is compared in a canonical
    form (see :func:`_add_canonical_json`). A time to the millisecond matches the millisecond
    (see :func:`shown_window`); an aware time compares in UTC, as SQLite and MySQL keep it. An
    enum column's value is its member."""
    kind = column.type
    if isinstance(kind, sa.JSON):
        given = sa.literal(value, kind)  # written as the column writes its values
        if dialect.name == "postgresql":
            return sa.cast(column, JSONB) == sa.cast(given, JSONB)
        if dialect.name == "sqlite":
            return sa.func.mcp_canonical_json(column) == canonical_json(json.dumps(value))
        if getattr(dialect, "is_mariadb", False):
            return sa.func.json_equals(column, given) == 1
        if dialect.name == "mysql":
            return sa.func.json_extract(column, "$") == sa.func.json_extract(given, "$")
        return column == given
    if isinstance(value, dt.datetime) and value.tzinfo is not None and getattr(kind, "timezone", False):
        value = value.astimezone(dt.UTC)
    window = shown_window(value) if isinstance(kind, sa.DateTime | sa.Time) else None
    if window is not None:
        start, end = window
        return column >= start if end is None else sa.and_(column >= start, column < end)
    enum_class = getattr(kind, "enum_class", None)
    return column == (enum_class(value) if enum_class is not None else value)


__all__ = ["html_to_text", "model_tools", "view_tool"]
