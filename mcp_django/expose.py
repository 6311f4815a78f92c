"""A project's existing views and models as tools.

    import mcp_django

    @mcp_django.view_tool(mcp, arguments={"q": (str | None, None)})
    @login_required
    def order_detail(request, order_id: int): ...        # a tool named order_detail(order_id, q)

    mcp_django.model_tools(mcp, Product, fields=["id", "name", "price"], filters=["category"],
                           search=["name"])              # list_products(...) and get_product(id)

A view tool calls the view with a request of its own: the caller's ``request.user`` (and
``request.auth``, ``request.session``), the MCP request's headers, the tool's path arguments
built into the view's URL and passed as Django's resolver passes them (keyword arguments, or
positional ones for unnamed groups, with the URL's extra options), and its other arguments as
the query string (GET, HEAD, DELETE) or a JSON body (POST, PUT, PATCH). The view's own
decorators (``login_required``, ``permission_required``, ``require_POST``) apply, and those its
URL pattern wraps it in; the project's middleware does not run again (the MCP request went
through it), except ``LoginRequiredMiddleware``'s check of the view, and CSRF is not
enforced (the MCP endpoint checks ``Origin`` and takes only JSON, which a cross-site form
cannot send). What the view answers becomes the tool's result: JSON as
structured content, HTML as its text, a redirect, ``Http404``, ``PermissionDenied`` or a 4xx as
a tool error naming it, and a crash as "500 Internal Server Error" with the traceback in the log.

Model tools read a model through a queryset that defaults to everything and can be narrowed per
caller (``queryset=lambda request: Order.objects.filter(owner=request.user)``). They are offered
only to callers with the model's ``view`` permission unless ``permission`` says otherwise.
"""

from __future__ import annotations

import datetime as dt
import decimal
import functools
import inspect
import io
import json
import logging
import uuid
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Annotated, Any, Literal, NamedTuple, TypeVar, overload
from urllib.parse import unquote, urlencode

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.apps import apps
from django.conf import settings
from django.core.exceptions import (
    BadRequest,
    FieldDoesNotExist,
    FieldError,
    ImproperlyConfigured,
    PermissionDenied,
    SuspiciousOperation,
)
from django.core.handlers.wsgi import WSGIRequest
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connections, models
from django.db.models import Q
from django.db.models.constants import LOOKUP_SEP
from django.db.models.fields.files import FieldFile
from django.http import Http404, HttpRequest, HttpResponseBase
from django.shortcuts import resolve_url
from django.urls import (
    NoReverseMatch,
    Resolver404,
    URLPattern,
    URLResolver,
    get_resolver,
    get_script_prefix,
    get_urlconf,
    reverse,
)
from django.utils import timezone, translation
from django.utils.functional import empty
from django.utils.module_loading import import_string
from mcp.types import CallToolResult
from pydantic import AfterValidator, BaseModel

from mcp_common.expose import (
    BODY_METHODS,
    JSONValue,
    ToolArguments,
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
    query_pairs,
    read_as_url_text,
    register_tool,
    require_server,
    retype_tool,
    share_permission,
    shown_window,
    tool_function,
    view_result,
    wraps,
)
from mcp_common.permissions import require
from mcp_django.endpoint import serving_request

logger = logging.getLogger("mcp_django.expose")

V = TypeVar("V", bound=Callable[..., Any])
M = TypeVar("M", bound=type[models.Model])

_COPIED_META = ("REMOTE_ADDR", "REMOTE_HOST", "SERVER_NAME", "SERVER_PORT", "SERVER_PROTOCOL", "SCRIPT_NAME")


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
    url_name: str | None = None,
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
    url_name: str | None = None,
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
    url_name: str | None = None,
) -> Any:
    """Register ``view`` as a tool of ``server``; as a decorator without ``view``.

    ``name`` defaults to the function's name (``as_view()`` views: the class's, in snake case),
    ``description`` to its docstring. The tool's arguments are the view's own parameters after
    ``request`` (its URL's arguments, typed by their annotations; less those its URL's extra
    options fill, and those with a default its URL does not carry) or ``path_arguments`` (names
    to types, for class-based views), and ``arguments`` (names to a type or a ``(type, default)``
    pair, or a Pydantic model), sent as the query string or a JSON body depending on ``method``.
    The view is returned unchanged.
    """
    require_server(server, "mcp_django")

    def register(view: V) -> V:
        # A class-based view may be given as its class: it is served through ``as_view()``.
        function = view.as_view() if isinstance(view, type) and hasattr(view, "as_view") else view
        fn = _register_view(
            server, function, name, description, method.upper(), arguments, path_arguments, title, url_name
        )
        if function is not view:
            share_permission(view, fn)
        return view

    return register(view) if view is not None else register


def _register_view(
    server: Any,
    view: Callable[..., Any],
    name: str | None,
    description: str | None,
    method: str,
    arguments: Mapping[str, Any] | type[BaseModel] | None,
    path_arguments: Mapping[str, Any] | None,
    title: str | None,
    url_name: str | None = None,
) -> Callable[..., Any]:
    view_class = _view_class(view)
    tool_name, spec, doc = describe_view(
        view,
        view_class,
        name,
        description,
        arguments,
        path_arguments,
        lambda: path_parameters(view) if view_class is None else {},
        ImproperlyConfigured,
    )
    shape = _shape(view, view_class, path_arguments)

    def respond(request: HttpRequest, response: HttpResponseBase, body: bytes | None = None) -> CallToolResult:
        # Resolved per call: at registration the URLconf may still be importing this module.
        login_url = str(resolve_url(settings.LOGIN_URL))
        return view_result(_view_response(response, body), html_to_text, login_url, _signed_in(request), request.path)

    if iscoroutinefunction(view):

        async def call_async(values: dict[str, Any]) -> CallToolResult:
            try:
                request, callee, args, kwargs = _request_for(view, shape, spec, method, values, tool_name, url_name)
                refused = None
                if _login_middleware(tuple(settings.MIDDLEWARE)):  # reads request.user: off the loop
                    refused = await sync_to_async(_login_refusal)(request, callee, args, kwargs)
                response = refused or await callee(request, *args, **kwargs)
                return respond(request, response, await _async_stream(response))
            except Exception as exc:
                return _refusal(exc, tool_name)

        fn = tool_function(tool_name, doc, spec, call_async)
    else:

        def call(values: dict[str, Any]) -> CallToolResult:
            try:
                request, callee, args, kwargs = _request_for(view, shape, spec, method, values, tool_name, url_name)
                response = _login_refusal(request, callee, args, kwargs) or callee(request, *args, **kwargs)
                return respond(request, response)
            except Exception as exc:
                return _refusal(exc, tool_name)

        fn = tool_function(tool_name, doc, spec, call)
    # ``@mcp_django.permission_required`` on the view, above or below this decorator, hides the tool.
    share_permission(view, fn)
    register_tool(server, fn, tool_name, doc, title)
    _VIEW_TOOLS.setdefault(server, []).append(_ViewTool(tool_name, fn, view, url_name, spec, shape))
    return fn


def _signed_in(request: HttpRequest) -> bool:
    """Whether the view's caller is signed in (read once the view has answered: it has loaded
    the user if it checked it, and a lazy user left unread is not loaded for this)."""
    user = request.__dict__.get("user")
    if user is None:
        return False
    if getattr(user, "_wrapped", None) is empty:  # a SimpleLazyObject the view never read
        return False
    return bool(getattr(user, "is_authenticated", False))


def _login_refusal(
    request: HttpRequest, callee: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> HttpResponseBase | None:
    """What the project's ``LoginRequiredMiddleware`` answers for this call of the view, if it
    refuses it. The project's middleware does not run again for a view tool (the MCP request
    went through it), but this one guards each view by the view: at the MCP endpoint it saw
    the endpoint (which a project using it opens to token or anonymous callers with
    ``login_not_required``), not the view, which a browser could not reach signed out."""
    for middleware in _login_middleware(tuple(settings.MIDDLEWARE)):
        response: HttpResponseBase | None = middleware(_no_response).process_view(request, callee, args, kwargs)
        if response is not None:
            return response
    return None


@functools.cache
def _login_middleware(entries: tuple[str, ...]) -> tuple[type[Any], ...]:
    """The ``LoginRequiredMiddleware`` classes (a subclass too) among the ``MIDDLEWARE`` entries."""
    if not apps.is_installed("django.contrib.auth"):
        return ()  # its middleware module imports the auth models
    from django.contrib.auth.middleware import LoginRequiredMiddleware

    found = []
    for entry in entries:
        cls = import_string(entry)
        if isinstance(cls, type) and issubclass(cls, LoginRequiredMiddleware):
            found.append(cls)
    return tuple(found)


def _no_response(request: HttpRequest) -> HttpResponseBase:
    raise AssertionError("a view tool runs only the middleware's process_view")


class _Shape(NamedTuple):
    """How the view takes its path arguments."""

    order: tuple[str, ...]
    """Their names in the order of the view's parameters: how unnamed groups fill them."""
    keyword_only: frozenset[str]
    """Those it takes by keyword only (no unnamed group can fill them)."""


def _shape(view: Callable[..., Any], view_class: type | None, path_arguments: Mapping[str, Any] | None) -> _Shape:
    if path_arguments is not None:
        return _Shape(tuple(path_arguments), frozenset())
    if view_class is not None:
        return _Shape((), frozenset())
    params = path_parameters(view)
    keyword_only = frozenset(n for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY)
    return _Shape(tuple(params), keyword_only)


class _ViewTool(NamedTuple):
    name: str
    fn: Callable[..., Any]
    view: Callable[..., Any]
    url_name: str | None
    spec: ToolArguments
    shape: _Shape


_VIEW_TOOLS: weakref.WeakKeyDictionary[Any, list[_ViewTool]] = weakref.WeakKeyDictionary()
"""Per server, its view tools, as registered (their full arguments)."""


def settle_view_tools(server: Any) -> None:
    """Leave out of ``server``'s view tools the path arguments that their URLs' extra options
    fill (``path("report/<int:pk>/", report, {"fmt": "csv"})``: Django passes ``fmt="csv"``,
    whatever a caller would say) or, having a default, their URLs do not capture
    (``path("report/<int:pk>/", report)``: Django passes no ``fmt``). Needs the URLconf, which
    may still be importing the views at registration: the endpoint calls this when it is built,
    as it first serves a request."""
    tools = _VIEW_TOOLS.get(server)
    if not tools:
        return
    try:
        resolver = get_resolver(get_urlconf())
        for tool in tools:
            found = _routes(resolver, tool.view, tool.url_name)
            spec = tool.spec.without(found.fixed(tool.spec, tool.shape.order) if found is not None else ())
            if spec.signature != getattr(tool.fn, "__signature__", None):
                retype_tool(server, tool.name, tool.fn, spec)
    except Exception:
        # A URLconf that fails to load fails the project's own requests: it is not this
        # endpoint's to fail too (the tools keep their arguments; a call still builds its URL).
        logger.exception("The URLs of %s's view tools could not be read", getattr(server, "name", server))


def _request_for(
    view: Callable[..., Any],
    shape: _Shape,
    spec: ToolArguments,
    method: str,
    values: dict[str, Any],
    tool_name: str,
    url_name: str | None,
) -> tuple[HttpRequest, Callable[..., Any], tuple[Any, ...], dict[str, Any]]:
    """The view's request, what runs it (see :func:`_callee`) and its positional and keyword
    arguments for one call, as the caller."""
    path_args, rest = spec.split(values)
    outer = serving_request()
    body = json.dumps(rest, cls=DjangoJSONEncoder).encode() if method in BODY_METHODS else b""
    query = "" if method in BODY_METHODS else urlencode(query_pairs(rest))
    environ: dict[str, Any] = {}
    if outer is not None:
        environ.update(
            (key, value)
            for key, value in outer.META.items()
            if isinstance(value, str) and (key in _COPIED_META or key.startswith("HTTP_"))
        )
    environ.pop("HTTP_CONTENT_LENGTH", None)
    environ.pop("HTTP_CONTENT_TYPE", None)
    path, callee, args, kwargs = _view_call(view, shape, tool_name, url_name, path_args, outer, method)
    environ.update(
        {
            "REQUEST_METHOD": method,
            # As a WSGI server passes it: the decoded path's UTF-8 bytes, one character each.
            "PATH_INFO": path.encode().decode("iso-8859-1"),
            "QUERY_STRING": query,
            "CONTENT_TYPE": "application/json" if body else "",
            "CONTENT_LENGTH": str(len(body)),
            "SERVER_NAME": environ.get("SERVER_NAME", "localhost"),
            "SERVER_PORT": environ.get("SERVER_PORT", "80"),
            "wsgi.input": io.BytesIO(body),
            "wsgi.url_scheme": outer.scheme if outer is not None else "http",
        }
    )
    request = WSGIRequest(environ)
    if outer is not None:
        # What the project's middleware put on the MCP request (Django's ``auser`` included;
        # ``MessageMiddleware``'s storage, which keeps what the view's answer does not show for
        # the caller's next page, as the session keeps its changes).
        for attribute in ("user", "auser", "auth", "session", "_messages"):
            if attribute in outer.__dict__ or hasattr(type(outer), attribute):
                setattr(request, attribute, getattr(outer, attribute))
    request._dont_enforce_csrf_checks = True  # type: ignore[attr-defined]
    return request, callee, args, kwargs


class UnroutableView(ImproperlyConfigured):
    """The view's URL cannot be built: the tool's error says what to change."""


class _Route(NamedTuple):
    """One URL pattern routing the view (or named by ``url_name``), with the includes around it."""

    named: frozenset[str]
    """The names of its groups (its includes' too): Django passes them as keyword arguments."""
    unnamed: int
    """How many groups without a name it has: passed positionally when none has a name."""
    options: frozenset[str]
    """What its extra options fill (``path(..., {"fmt": "csv"})``, an ``include()``'s too)."""
    converters: tuple[tuple[str, Any], ...] = ()
    """Its ``path()`` converters (its includes' too), by the name of the group each fills."""

    def captures(self, order: Sequence[str]) -> frozenset[str]:
        """The view's parameters (``order``: in its order) whose values its URL carries."""
        return self.named if self.named else frozenset(order[: self.unnamed])


class _Routes(NamedTuple):
    targets: tuple[Any, ...]
    """What ``reverse()`` takes for each URL pattern routing the view: its callback outside any
    namespace (a name there may be another app's too: ``reverse`` by it finds only one), its
    full name (``"namespace:name"``) inside one; with ``url_name``, that name."""
    routes: tuple[_Route, ...]
    unnamed: tuple[str, ...]
    """Namespaces holding an unnamed pattern of the view (Django cannot reverse those)."""

    def fixed(self, spec: ToolArguments, order: Sequence[str]) -> frozenset[str]:
        """The path arguments of ``spec`` no caller chooses: on every route, its extra options
        fill them or, having a default, its URL does not carry them (Django never passes them)."""
        if not self.routes:
            return frozenset()
        parameters = spec.signature.parameters
        return frozenset(
            name
            for name in spec.path
            if all(
                name in route.options
                or (parameters[name].default is not inspect.Parameter.empty and name not in route.captures(order))
                for route in self.routes
            )
        )


_ROUTES: weakref.WeakKeyDictionary[Any, dict[Any, _Routes | None]] = weakref.WeakKeyDictionary()
"""Per URL resolver (Django makes a new one when the URLconf changes), the view's routes."""


def _view_call(
    view: Callable[..., Any],
    shape: _Shape,
    tool_name: str,
    url_name: str | None,
    path_args: dict[str, Any],
    outer: Any,
    method: str,
) -> tuple[str, Callable[..., Any], tuple[Any, ...], dict[str, Any]]:
    """The view's path for these path arguments (decoded, as ``request.path_info``), and what
    Django would call there and with what: its URL, built and routed back to it."""
    resolver = get_resolver(get_urlconf())
    routes = _routes(resolver, view, url_name)
    if routes is None:
        rewrapped = _rewrapped(resolver, view)
        if rewrapped is not None:
            # ``view_tool(mcp, csrf_exempt(view))`` of ``path(..., login_required(view))``:
            # neither runs the other's decorators, and the bare call skipped the URL's check.
            raise _rewrapped_view(tool_name, rewrapped)
        # Routed nowhere (a view written for its tool): no converter to honour.
        return (outer.path_info if outer is not None else "/"), view, (), path_args
    # An optional argument left unset is no part of the URL (``archive/`` beside
    # ``archive/<int:year>``): the view's own default applies.
    in_url = {name: value for name, value in path_args.items() if value is not None}
    positional = _positional(shape, path_args)
    attempts: list[tuple[list[Any], dict[str, Any]]] = [([], in_url)]
    if positional:
        # Groups without a name (``re_path(r"^archive/(\d{4})/$", view)``) are filled in the
        # order of the view's parameters, as Django passes them.
        attempts.append(([path_args[name] for name in positional], {}))
    prefix = get_script_prefix()
    guarded: str | None = None
    for target in routes.targets:
        for args, kwargs in attempts:
            # ``reverse`` puts the script prefix (SCRIPT_NAME, a sub-path deployment) in
            # front; PATH_INFO is the part after it, as the server would have split it.
            # Decoded, as the server decodes it: ``reverse`` percent-encodes ("crème" as
            # "cr%C3%A8me"), and a pattern (``[-\w]+``) that admits the one refuses the other.
            path = _reversed(target, args, kwargs, routes.routes)
            if path is None:
                continue
            if path.startswith(prefix):
                path = "/" + path[len(prefix) :]
            try:
                match = resolver.resolve(path)
            except Resolver404:
                continue
            if not _serves(match.func, view):
                if url_name is not None:
                    raise UnroutableView(
                        f"The URL named {url_name!r} routes to another view than {tool_name}'s: "
                        "fix the url_name of its view_tool()."
                    )
                continue
            if args:
                if not match.args and not set(match.kwargs) & set(positional):
                    # Named groups, none of them the view's parameters: another URL of the view
                    # (``bins.<str:fmt>`` beside ``bins/<slug:slug>/``), not one for these arguments.
                    continue
                _check_positional(match, positional[: len(args)], shape, tool_name)
            # The match's arguments, as Django's handler passes them: the converters' values,
            # and the URL's extra options, which override a captured value of the same name.
            if not match.args and set(in_url) - set(match.kwargs):
                continue
            callee = _callee(match.func, view, method)
            if callee is not match.func and _adds_decorators(match.func, view):
                # The URL runs checks the tool's own view lacks (``permission_required(...)(
                # Crate.as_view())`` routed, ``csrf_exempt(Crate.as_view())`` the tool's):
                # another URL of the view may serve it without them, as it would a browser.
                guarded = guarded or match.route
                break
            return path, callee, tuple(match.args), dict(match.kwargs)
    if guarded is not None:
        raise _rewrapped_view(tool_name, guarded)
    if url_name is not None:
        if not routes.routes:
            raise UnroutableView(f"No URL is named {url_name!r}: fix the url_name of {tool_name}'s view_tool().")
        if not any(_fits(route, in_url, positional) for route in routes.routes):
            raise UnroutableView(
                f"The URL named {url_name!r} takes {_takes(routes.routes)}, and the call gave "
                f"{', '.join(sorted(in_url)) or 'none'}: call {tool_name} with what its URL takes, "
                "or fix the url_name of its view_tool()."
            )
    if not routes.targets:
        raise UnroutableView(
            f"The view of {tool_name} is routed without a name inside the namespace "
            f"{routes.unnamed[0]!r}, which Django cannot reverse: name its URL pattern, or pass "
            "url_name= to its view_tool()."
        )
    if not path_args and not any(_fits(route, {}, []) for route in routes.routes):
        # No call of the tool can reach the view: how it was registered is wrong, not the call
        # (a class-based view, or a DRF ViewSet's detail action, without path_arguments).
        raise UnroutableView(
            f"The URL of {tool_name} takes {_takes(routes.routes)}, and the tool takes no path "
            "arguments: pass path_arguments= to its view_tool() (a class-based view's are not read "
            "from its methods)."
        )
    # Routed, but no URL of the view admits these arguments: Django would answer 404, and the
    # view must not get a value its URL's converters refuse ("../" for a slug).
    raise Http404


def _reversed(target: Any, args: list[Any], kwargs: dict[str, Any], routes: Sequence[_Route]) -> str | None:
    """The decoded path ``reverse`` builds for ``target`` with these arguments; ``None`` if
    none of its URLs takes them.

    A converter's ``to_url`` may take only the values its ``to_python`` makes (Django's
    documented ``"%04d" % value``), not the text a tool takes for a parameter without an
    annotation: that text is then read as the converter reads it from a browser's URL."""
    try:
        return unquote(reverse(target, args=args, kwargs=kwargs))
    except NoReverseMatch:
        return None
    except Exception:
        if args:
            return None  # a converter's group reached by position: tried by its name first
        read = read_as_url_text(kwargs, [item for route in routes for item in route.converters])
        if read is None:
            return None  # a text no converter of its URLs admits: no URL takes it
        if all(read[name] is kwargs[name] for name in kwargs):
            raise  # no text to read: the converter fails on the tool's typed value
    try:
        return unquote(reverse(target, args=args, kwargs=read))
    except NoReverseMatch:
        return None


def _positional(shape: _Shape, path_args: dict[str, Any]) -> list[str]:
    """The path arguments that unnamed groups would fill, in order: up to the last one set
    (``[]`` when one before it is unset: no group can be skipped)."""
    names = [name for name in shape.order if name in path_args]
    while names and path_args[names[-1]] is None:
        names.pop()
    return [] if any(path_args[name] is None for name in names) else names


def _check_positional(match: Any, names: list[str], shape: _Shape, tool_name: str) -> None:
    """Whether Django could call the view with what the unnamed groups of its URL captured."""
    if len(match.args) != len(names):
        # A group with a name beside them: Django passes only the named ones.
        dropped = [name for name in names if name not in match.kwargs] or names
        raise UnroutableView(
            f"The URL of {tool_name} ({match.route}) mixes named and unnamed groups, and Django "
            f"passes only the named ones to the view, not {', '.join(dropped)}: name every group, "
            f"as (?P<{dropped[0]}>...)."
        )
    keyword_only = [name for name in names if name in shape.keyword_only]
    if keyword_only:
        raise UnroutableView(
            f"The URL of {tool_name} ({match.route}) passes {keyword_only[0]} positionally (an "
            f"unnamed group), but the view takes it by keyword only: name the group "
            f"(?P<{keyword_only[0]}>...)."
        )


def _fits(route: _Route, in_url: dict[str, Any], positional: list[str]) -> bool:
    """Whether a call's path arguments are the ones ``route`` takes (a value it refuses aside)."""
    if route.named:
        return set(in_url) - route.options == route.named
    if route.unnamed:
        return len(positional) == route.unnamed and set(in_url) <= set(positional)
    return not set(in_url) - route.options


def _takes(routes: Sequence[_Route]) -> str:
    def one(route: _Route) -> str:
        if route.named:
            return ", ".join(sorted(route.named))
        if route.unnamed:
            return f"{route.unnamed} unnamed group{'s' if route.unnamed > 1 else ''}"
        return "no arguments"

    return " or ".join(dict.fromkeys(one(route) for route in routes))


def _routes(resolver: Any, view: Callable[..., Any], url_name: str | None = None) -> _Routes | None:
    """How to reverse the URL patterns routing ``view`` (with ``url_name``: that name);
    ``None``: it is routed nowhere."""
    known = _ROUTES.setdefault(resolver, {})
    key = (view, url_name)
    if key in known:
        return known[key]
    targets: list[Any] = [url_name] if url_name is not None else []
    routes: list[_Route] = []
    unnamed: list[str] = []
    for pattern, namespaces, chain in _patterns(resolver.url_patterns, (), ()):
        if url_name is not None:
            if pattern.name and ":".join((*namespaces, pattern.name)) == url_name:
                routes.append(_route(pattern, chain))
            continue
        if not _serves(pattern.callback, view):
            continue
        routes.append(_route(pattern, chain))
        if not namespaces:
            if pattern.callback not in targets:
                targets.append(pattern.callback)
        elif pattern.name:
            targets.append(":".join((*namespaces, pattern.name)))
        else:
            unnamed.append(":".join(namespaces))
    found = _Routes(tuple(targets), tuple(routes), tuple(unnamed)) if targets or unnamed else None
    known[key] = found
    return found


def _route(pattern: URLPattern, chain: tuple[URLResolver, ...]) -> _Route:
    named: set[str] = set()
    unnamed = 0
    options: set[str] = set(pattern.default_args)
    converters: list[tuple[str, Any]] = []
    for part in (*chain, pattern):
        regex = part.pattern.regex
        named.update(regex.groupindex)
        unnamed += regex.groups - len(regex.groupindex)
        converters.extend(getattr(part.pattern, "converters", {}).items())
    for include in chain:
        options.update(include.default_kwargs)
    return _Route(frozenset(named), unnamed, frozenset(options), tuple(converters))


def _patterns(
    patterns: Sequence[Any], namespaces: tuple[str, ...], chain: tuple[URLResolver, ...]
) -> Iterator[tuple[URLPattern, tuple[str, ...], tuple[URLResolver, ...]]]:
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            inner = (*namespaces, pattern.namespace) if pattern.namespace else namespaces
            yield from _patterns(pattern.url_patterns, inner, (*chain, pattern))
        elif isinstance(pattern, URLPattern):
            yield pattern, namespaces, chain


def _serves(callback: Any, view: Callable[..., Any]) -> bool:
    """Whether a URL pattern's callback is ``view``: the same function, one wrapping it (as
    ``login_required(view)`` in a URLconf does) or one it wraps (``view_tool(mcp,
    csrf_exempt(view))`` of a view routed bare), or an ``as_view()`` of the same class. Two
    wrappers of one function are different views."""
    view_class = _view_class(view)
    if view_class is not None:
        if _view_class(callback) is not view_class:
            return False
        # A DRF ViewSet's: the pattern runs the same actions for the methods both map (each
        # view adds "head" to its own when first called, if it maps "get").
        actions = getattr(view, "actions", None)
        if not actions:
            return True
        routed = getattr(callback, "actions", None) or {}
        shared = actions.keys() & routed.keys()
        return bool(shared) and all(routed[method] == actions[method] for method in shared)
    return wraps(callback, view) or wraps(view, callback)


def _callee(callback: Any, view: Callable[..., Any], method: str) -> Callable[..., Any]:
    """What runs a call at a URL whose pattern's ``callback`` serves ``view``: the view itself
    (its own decorators), or the callback where that wraps it or is the URL's ``as_view()``
    of a class the tool was given bare (the URLconf's decorators too);
    for a DRF ViewSet's action, the router's view of it, which runs
    the same action for the tool's method. The router builds that view with the action's
    options (``@action(permission_classes=[IsAdminUser])``, its ``basename`` and ``detail``),
    which the tool's own ``as_view({"get": "stock"})`` lacks: with it, the action's
    permissions never ran."""
    if iscoroutinefunction(callback) != iscoroutinefunction(view):
        return view
    if callback is not view and wraps(callback, view):
        # The URLconf decorates the view (``permission_required(...)(view)``): Django runs that
        # check at the URL, and so does the tool.
        return callback
    view_class = getattr(view, "view_class", None)
    if (
        view_class is not None
        and not _decorated_as_view(view)
        and not getattr(view, "view_initkwargs", None)
        and getattr(callback, "view_class", None) is view_class
    ):
        # The tool's own plain ``as_view()`` of a class the URLconf routes decorated, or with
        # options (``permission_required(...)(Crate.as_view())``): Django runs the URL's there.
        return callback
    actions = getattr(view, "actions", None)
    routed = getattr(callback, "actions", None)
    if not isinstance(actions, dict) or not isinstance(routed, dict) or _decorated(view):
        # A ViewSet's view the application decorated (``login_required(...)``) keeps what it
        # added: the router's view has none of it.
        return view
    action = actions.get(method.lower())
    # A method the tool's view does not map: its own view answers 405, not another action.
    return callback if action is not None and routed.get(method.lower()) == action else view


def _decorated(view: Any) -> bool:
    """Whether a DRF ``as_view(actions)`` view is wrapped by more than DRF wraps it in: its
    view function and ``csrf_exempt`` around it each carry ``actions`` (a decorator's
    ``functools.wraps`` copies them), the class's ``dispatch`` below them does not."""
    carrying = 0
    while hasattr(view, "actions") and carrying < 100:
        carrying += 1
        view = getattr(view, "__wrapped__", None)
    return carrying > 2


def _view_class(view: Any) -> type | None:
    """The class of an ``as_view()`` view: Django's ``view_class``, or the ``cls`` of a DRF
    ViewSet's ``as_view(actions)``, which sets no ``view_class``."""
    view_class = getattr(view, "view_class", None)
    if view_class is None and isinstance(getattr(view, "actions", None), dict):
        view_class = getattr(view, "cls", None)
    return view_class if isinstance(view_class, type) else None


def _rewrapped_view(tool_name: str, route: str) -> UnroutableView:
    return UnroutableView(
        f"The view of {tool_name} is routed wrapped in other decorators than its tool's "
        f"({route}): pass view_tool() the URL's view, or route the tool's."
    )


def _adds_decorators(callback: Any, view: Callable[..., Any]) -> bool:
    """Whether a URL pattern's ``callback`` runs decorators that ``view`` does not: it wraps
    ``view``, or it is a decorated ``as_view()`` of the view's class that ``view`` does not
    wrap. (A DRF view's own ``csrf_exempt``, around every one, is none.)"""
    if wraps(view, callback):
        return False
    if wraps(callback, view):
        return True
    return getattr(callback, "view_class", None) is not None and _decorated_as_view(callback)


def _decorated_as_view(view: Any) -> bool:
    """Whether an ``as_view()`` view is wrapped in more than its framework wraps it in: Django's
    in nothing, DRF's (it sets ``cls``) in ``csrf_exempt``."""
    own = 1 if hasattr(view, "cls") else 0
    depth = 0
    while hasattr(view, "__wrapped__") and depth <= own:
        view = view.__wrapped__
        depth += 1
    return depth > own


def _rewrapped(resolver: Any, view: Callable[..., Any]) -> str | None:
    """The route of a URL pattern whose callback wraps the function ``view`` wraps in other
    decorators (``login_required(f)`` routed, ``csrf_exempt(f)`` the tool's); ``None``: none does."""
    if _view_class(view) is not None:
        return None
    inner = _innermost(view)
    for pattern, _namespaces, chain in _patterns(resolver.url_patterns, (), ()):
        if _innermost(pattern.callback) is inner:
            return "".join(str(part.pattern) for part in (*chain, pattern))
    return None


def _innermost(view: Any) -> Any:
    """The function at the bottom of ``view``'s ``__wrapped__`` chain."""
    seen = 0
    while hasattr(view, "__wrapped__") and seen < 100:  # a chain that loops: give up
        view = view.__wrapped__
        seen += 1
    return view


async def _async_stream(response: HttpResponseBase) -> bytes | None:
    """The body of an async view's stream from an async iterator, read as Django's ASGI
    handler reads it (``None`` for any other response: :func:`_view_response` reads it)."""
    if not (getattr(response, "streaming", False) and getattr(response, "is_async", False)):
        return None
    try:
        return b"".join([part async for part in response.streaming_content])  # type: ignore[attr-defined]
    except BaseException:
        response.close()
        raise


def _view_response(response: HttpResponseBase, body: bytes | None = None) -> ViewResponse:
    """``response`` for :func:`view_result`; ``body``: its streamed body, already read."""
    render = getattr(response, "render", None)
    if callable(render) and not getattr(response, "is_rendered", True):
        render()
    try:
        if body is None and getattr(response, "streaming", False):
            if getattr(response, "is_async", False):  # from a sync view, which cannot await it
                return ViewResponse(500, "", b"", reason="the view streamed asynchronously, which a tool cannot read")
            body = b"".join(response.streaming_content)  # type: ignore[attr-defined]
        elif body is None:
            body = response.content  # type: ignore[attr-defined]
    finally:
        response.close()
    return ViewResponse(
        status=response.status_code,
        content_type=response.get("Content-Type", ""),
        body=body,
        location=response.get("Location"),
        reason=response.reason_phrase,
        charset=response.charset,
    )


def _refusal(exc: Exception, tool_name: str) -> CallToolResult:
    """What Django's handler would answer for an exception the view raised."""
    if isinstance(exc, Http404):
        return error("404 Not Found")
    if isinstance(exc, PermissionDenied):
        return error("403 Forbidden")
    if isinstance(exc, BadRequest | SuspiciousOperation):
        return error("400 Bad Request")
    if isinstance(exc, UnroutableView):
        logger.error("%s", exc)
        return error(str(exc))
    return failed(tool_name)


# -- models ------------------------------------------------------------------------------------

_DEFAULT = object()

_INTEGER_TYPES = {
    "AutoField",
    "BigAutoField",
    "SmallAutoField",
    "IntegerField",
    "BigIntegerField",
    "SmallIntegerField",
    "PositiveIntegerField",
    "PositiveSmallIntegerField",
    "PositiveBigIntegerField",
}


def _time_of_day(value: dt.time) -> dt.time:
    # Django cannot compare a time with an offset with a TimeField on SQLite or MySQL (it raises).
    if value.tzinfo is not None:
        raise ValueError("a time of day has no offset here")
    return value


_TYPES: dict[str, Any] = {
    "FloatField": float,
    "DecimalField": decimal.Decimal,
    "BooleanField": bool,
    "DateField": dt.date,
    "DateTimeField": dt.datetime,
    "TimeField": Annotated[dt.time, AfterValidator(_time_of_day)],
    "DurationField": dt.timedelta,
    "UUIDField": uuid.UUID,
}


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
    queryset: Callable[[HttpRequest], models.QuerySet[Any]] | None = None,
    permission: Any = _DEFAULT,
    names: Mapping[str, str] | None = None,
) -> Any:
    """Register read tools for ``model``: ``list_<plural>`` (filters, search, pages) and
    ``get_<name>`` (by primary key); as a class decorator without ``model``.

    ``fields`` must be named (or ``"__all__"``), as in a ``ModelForm``: a model's columns are not
    all for every caller. ``filters`` are fields the list tool filters on by exact value (a
    foreign key by the related row's key); ``search`` are text fields a ``search`` argument
    matches (case-insensitive, any of them). ``queryset(request)`` narrows what the caller sees,
    in both tools. ``permission``: a permission name the caller must have, ``None`` for
    everyone; by default the model's ``view`` permission. The model is returned unchanged.
    """

    def register(model: M) -> M:
        _register_model(
            server,
            model,
            fields,
            filters,
            search,
            ordering,
            page_size,
            max_page_size,
            actions,
            queryset,
            permission,
            names,
        )
        return model

    return register(model) if model is not None else register


def _register_model(
    server: Any,
    model: type[models.Model],
    fields: Sequence[str] | str,
    filters: Sequence[str],
    search: Sequence[str],
    ordering: Sequence[str] | None,
    page_size: int,
    max_page_size: int,
    actions: Sequence[str],
    queryset: Callable[[HttpRequest], models.QuerySet[Any]] | None,
    permission: Any,
    names: Mapping[str, str] | None,
) -> None:
    meta = model._meta
    owner = f"model_tools({meta.label})"
    check_model_options(owner, actions, fields, page_size, max_page_size, ImproperlyConfigured)
    # Named as the project wrote them: a foreign key's column (``owner_id``) is its field, and
    # keeps that name in the rows and as the filter.
    shown = (
        [(f.name, f) for f in meta.concrete_fields]
        if fields == "__all__"
        else [(name, _field(meta, name, owner)) for name in fields]
    )
    filtered = {name: _field(meta, name, owner) for name in filters}
    searched = [_field(meta, name, owner) for name in search]
    for field in searched:
        if field.get_internal_type() not in ("CharField", "TextField", "SlugField", "EmailField", "URLField"):
            raise ImproperlyConfigured(f"{owner}: search field {field.name!r} is not a text field")
    _check_ordering(model, ordering or (), owner)
    order = list(ordering or meta.ordering or ()) or ["pk"]
    if "pk" not in order and meta.pk.name not in order:
        order.append("pk")  # pages must not overlap: the order has to be total
    with translation.override(None):
        # Names are identifiers: the model's own verbose names, untranslated. Registration may
        # run in a request (the URLconf imports the server module lazily), under the first
        # visitor's language: the tools would be named in it, differently per worker.
        singular, plural = str(meta.verbose_name), str(meta.verbose_name_plural)
    tool_names = default_names(singular, plural, names, actions, owner)
    if permission is _DEFAULT:
        permission = f"{meta.app_label}.view_{meta.model_name}"
    guard = require(lambda request: request.user.has_perm(permission)) if permission is not None else None

    def rows(request: HttpRequest | None) -> models.QuerySet[Any]:
        if queryset is None:
            return model._default_manager.all()
        if request is None:
            raise PermissionDenied("no request to narrow the queryset by")
        return queryset(request)

    def serialize(obj: models.Model) -> dict[str, Any]:
        row = {name: _value(field.value_from_object(obj)) for name, field in shown}
        return json.loads(json.dumps(row, cls=DjangoJSONEncoder))

    if "list" in actions:
        filter_types = {name: _annotation(f) for name, f in filtered.items()}

        def list_rows(values: dict[str, Any]) -> CallToolResult:
            try:
                return listing(values)
            except Exception:
                return failed(tool_names["list"], "the query")

        def listing(values: dict[str, Any]) -> CallToolResult:
            query = rows(serving_request())
            for name, field in filtered.items():
                if values.get(name) is not None:
                    query = _filtered(query, name, field, values[name])
            text = values.get("search")
            if text:
                match = Q()
                for field in searched:
                    match |= Q(**{f"{field.name}__icontains": text})
                query = query.filter(match)
            page, size = values["page"], values["page_size"]
            chunk = list(query.order_by(*order)[(page - 1) * size : page * size])
            count = known_count(page, size, len(chunk))
            if count is None:
                count = query.count()
            return page_result([serialize(obj) for obj in chunk], count, page, size)

        spec, described = list_tool(
            filter_types,
            [f.name for f in searched],
            page_size,
            max_page_size,
            str(meta.verbose_name_plural),
            owner,
        )
        add_tool(server, tool_names["list"], described, spec, list_rows, guard)

    if "get" in actions:
        pk = meta.pk

        def get_row(values: dict[str, Any]) -> CallToolResult:
            try:
                query = rows(serving_request())
                key = values[pk.name]
                obj = None if _beyond(pk, key, query.db) else query.filter(pk=key).first()
                if obj is None:
                    return error(f"No {meta.verbose_name} with {pk.name} {values[pk.name]}.")
                return object_result(serialize(obj))
            except Exception:
                return failed(tool_names["get"], "the query")

        spec, described = get_tool(pk.name, _annotation(pk), str(meta.verbose_name), owner)
        add_tool(server, tool_names["get"], described, spec, get_row, guard)


def _filtered(query: models.QuerySet[Any], name: str, field: Any, value: Any) -> models.QuerySet[Any]:
    """``query`` less the rows whose ``name`` is not ``value``: a time to the millisecond
    matches that millisecond (see :func:`shown_window`), a JSON field's value the same JSON
    document whatever the order of its keys (Django compares JSON as text on SQLite and
    MariaDB: there it is compared in a canonical form, and with ``JSON_EQUALS``)."""
    if isinstance(field, models.JSONField):
        connection = connections[query.db]
        alias = f"_mcp_{name}"
        if connection.vendor == "sqlite":
            connection.ensure_connection()
            add_canonical_json(connection.connection)
            canonical = models.Func(models.F(name), function="mcp_canonical_json", output_field=models.TextField())
            return query.alias(**{alias: canonical}).filter(**{alias: canonical_json(json.dumps(value))})
        if connection.vendor == "mysql" and connection.mysql_is_mariadb:
            document = models.Value(json.dumps(value))
            equal = models.Func(models.F(name), document, function="JSON_EQUALS", output_field=models.IntegerField())
            return query.alias(**{alias: equal}).filter(**{alias: 1})
        return query.filter(**{name: value})
    if _beyond(field, value, query.db):
        return query.none()
    value = _stored_time(value)
    window = shown_window(value) if field.get_internal_type() in ("DateTimeField", "TimeField") else None
    if window is None:
        return query.filter(**{name: value})
    start, end = window
    query = query.filter(**{f"{name}__gte": start})
    return query if end is None else query.filter(**{f"{name}__lt": end})


def _beyond(field: Any, value: Any, using: str) -> bool:
    """Whether ``value`` is an integer past what ``field``'s column holds, so no row has it.
    Django matches nothing for an integer field given one, but a foreign key (a one-to-one
    primary key too) passes it on to the driver, which refuses it (SQLite past 64 bits,
    PostgreSQL past the column's type)."""
    while field.is_relation:
        field = field.target_field
    kind = field.get_internal_type()
    if type(value) is not int or kind not in _INTEGER_TYPES:
        return False
    low, high = connections[using].ops.integer_field_range(kind)
    return (low is not None and value < low) or (high is not None and value > high)


def _stored_time(value: Any) -> Any:
    """A filter's value, a datetime as Django stores one: aware with ``USE_TZ`` (a naive one is
    in the current time zone, as a form reads it), naive in the current time zone without it
    (Django refuses an aware one there on SQLite and MySQL)."""
    if not isinstance(value, dt.datetime):
        return value
    if settings.USE_TZ:
        return timezone.make_aware(value) if timezone.is_naive(value) else value
    return timezone.make_naive(value) if timezone.is_aware(value) else value


def _value(value: Any) -> Any:
    """A field's value as the JSON encoder can write it: a file as its name (``None`` without
    one), the rest as :func:`json_value` writes it (binary data as ``None``, a PostgreSQL
    range field's value as its bounds: ``DjangoJSONEncoder`` knows neither)."""
    if isinstance(value, FieldFile):
        return value.name or None
    return json_value(value)


def _check_ordering(model: type[models.Model], ordering: Sequence[Any], owner: str) -> None:
    """``ordering=`` must name the model's fields (else every list call would fail), and not be
    random (``"?"``: pages would overlap). Lookups through relations are checked once the
    models are loaded (``model_tools`` may run in a ``models.py``)."""
    names = [item.removeprefix("-") for item in ordering if isinstance(item, str)]
    if "?" in names:
        raise ImproperlyConfigured(f'{owner}: ordering cannot be random ("?"): pages would overlap')
    for name in names:
        first = name.split(LOOKUP_SEP, 1)[0]
        if first != "pk":
            try:
                model._meta.get_field(first)
            except FieldDoesNotExist:
                raise ImproperlyConfigured(
                    f"{owner}: ordering names {name!r}, not a field of {model._meta.label}"
                ) from None
    if apps.ready:
        query = models.QuerySet(model).query
        for name in names:
            try:
                _path, last, _targets, rest = query.names_to_path(name.split(LOOKUP_SEP), model._meta)
            except FieldError as exc:
                raise ImproperlyConfigured(f"{owner}: ordering names {name!r}: {exc}") from None
            if rest and last.get_transform(rest[0]) is None:  # placed__year is a transform
                raise ImproperlyConfigured(f"{owner}: ordering names {name!r}, which has no {rest[0]!r}")


def _field(meta: Any, name: str, owner: str) -> Any:
    try:
        field = meta.get_field(name)
    except FieldDoesNotExist:
        raise ImproperlyConfigured(f"{owner}: {meta.label} has no field {name!r}") from None
    if not getattr(field, "concrete", False) or field.many_to_many:
        raise ImproperlyConfigured(f"{owner}: {name!r} is not a column of {meta.label}")
    return field


def _annotation(field: Any) -> Any:
    """The Python type a tool argument for ``field`` takes."""
    if field.is_relation:
        return _annotation(field.target_field)
    if field.choices:
        values = tuple(value for value, _label in field.flatchoices)
        if values and all(isinstance(v, str | int) for v in values):
            return Literal[values]  # type: ignore[valid-type]
    kind = field.get_internal_type()
    if kind in _INTEGER_TYPES:
        return int
    if isinstance(field, models.JSONField):
        return JSONValue
    return _TYPES.get(kind, str)


__all__ = ["html_to_text", "model_tools", "view_tool"]
