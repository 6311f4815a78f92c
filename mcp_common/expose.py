"""Existing views and models as tools: what the Django and Flask adapters share.

An adapter builds the framework's request for a view from a tool call, runs the view under the
caller's identity, and hands the response here as a :class:`ViewResponse`;
:func:`view_result` turns it into the tool's result the way a client reading it needs: JSON as
structured content and text, text and HTML as text, a redirect, a refusal or a failure as a
tool error that says what happened (never the page of a server error, never a traceback).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import decimal
import enum
import inspect
import ipaddress
import json
import logging
import math
import re
import unicodedata
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from html.parser import HTMLParser
from typing import Annotated, Any
from urllib.parse import parse_qsl, urlsplit

from mcp.types import CallToolResult, TextContent
from pydantic import AfterValidator, BaseModel, Field
from pydantic_core import to_jsonable_python

from mcp_common import _sdk
from mcp_common.jsonrpc import utf8_safe
from mcp_common.permissions import PERMISSION_ATTR, TOOLS_ATTR, require
from mcp_common.store import storable

logger = logging.getLogger("mcp_common.expose")

MAX_TEXT = 100_000
"""Characters of a view's text or HTML answer a tool returns; the rest is cut with a note."""

MAX_PAGE = 1_000_000
"""The highest page a model's list tool takes (a larger one is a validation error, not an
offset the database cannot hold)."""

MAX_NESTING = 200
"""How deeply a tool argument's value may nest (a deeper one is the caller's error): pydantic,
which writes a view's arguments as JSON for it, stops at 255 levels."""

MAX_SEARCH = 1_000
"""The longest ``search`` a model's list tool takes, in characters (a longer one is a
validation error): far past anything typed into a search box, and far below the LIKE pattern
SQLite refuses to match (50,000 bytes, which 12,500 four-byte characters reach)."""


def _searchable(text: str) -> str:
    # Not Field(max_length=...): pydantic's constrained str refuses a lone surrogate with a
    # message of its own, before _uncarried can name it as it names one in any other text.
    if len(text) > MAX_SEARCH:
        raise ValueError(f"a search is at most {MAX_SEARCH} characters long")
    return text


SearchText = Annotated[str, AfterValidator(_searchable), Field(json_schema_extra={"maxLength": MAX_SEARCH})]
"""A model list tool's ``search``, as long as every database matches (:data:`MAX_SEARCH`)."""

BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
"""Methods whose non-path arguments travel as a JSON body (the others: the query string)."""

REASONS = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    410: "Gone",
    422: "Unprocessable Content",
    429: "Too Many Requests",
    500: "Internal Server Error",
}


@dataclasses.dataclass(frozen=True)
class ViewResponse:
    """What a view answered, in framework-neutral terms."""

    status: int
    content_type: str
    body: bytes
    location: str | None = None
    """The ``Location`` header of a redirect."""
    reason: str = ""
    charset: str = "utf-8"


@dataclasses.dataclass(frozen=True)
class ToolArguments:
    """How a tool's arguments reach a view: its path arguments, and the rest as query string or
    body. ``signature`` is the tool's, from which the SDK builds its input schema."""

    signature: inspect.Signature
    path: frozenset[str]

    def split(self, arguments: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """The call's arguments as (path arguments, the others), leaving out unset optional ones."""
        path: dict[str, Any] = {}
        rest: dict[str, Any] = {}
        for name, value in arguments.items():
            if name in self.path:
                path[name] = value
            elif value is not None:
                # As JSON has it (an enum's value, a model's fields), for a query string or a body.
                rest[name] = to_jsonable_python(value)
        return path, rest

    def without(self, names: Iterable[str]) -> ToolArguments:
        """These arguments less the path arguments ``names`` (which the view gets otherwise)."""
        dropped = self.path & frozenset(names)
        if not dropped:
            return self
        kept = [p for p in self.signature.parameters.values() if p.name not in dropped]
        return ToolArguments(self.signature.replace(parameters=kept), self.path - dropped)


def tool_arguments(
    path: Mapping[str, inspect.Parameter],
    arguments: Mapping[str, Any] | type[BaseModel] | None,
    owner: str,
) -> ToolArguments:
    """The tool's signature: the view's ``path`` parameters, then ``arguments``.

    ``arguments`` is a Pydantic model (its fields) or a mapping of names to a type (required) or
    a ``(type, default)`` pair. ``owner`` names the view in errors.
    """
    parameters = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in path.values()]
    extra: list[inspect.Parameter] = []
    if isinstance(arguments, type) and issubclass(arguments, BaseModel):
        for name, field in arguments.model_fields.items():
            default = inspect.Parameter.empty if field.is_required() else field.get_default(call_default_factory=True)
            extra.append(_parameter(name, field.rebuild_annotation(), default, owner))
    elif arguments is not None:
        if not isinstance(arguments, Mapping):
            raise TypeError(f"{owner}: arguments must be a mapping of names to types, or a Pydantic model")
        for name, spec in arguments.items():
            if isinstance(spec, tuple):
                if len(spec) != 2:
                    raise TypeError(f"{owner}: argument {name!r} must be a type or a (type, default) pair")
                extra.append(_parameter(name, spec[0], spec[1], owner))
            else:
                extra.append(_parameter(name, spec, inspect.Parameter.empty, owner))
    clash = {p.name for p in parameters} & {p.name for p in extra}
    if clash:
        raise TypeError(f"{owner}: the tool would take {', '.join(sorted(clash))} twice (a path argument and another)")
    # Required arguments first: a signature cannot have them after optional ones, and the
    # order does not matter to a caller (arguments are by name).
    every = parameters + extra
    every.sort(key=lambda p: p.default is not inspect.Parameter.empty)
    return ToolArguments(inspect.Signature(every, return_annotation=CallToolResult), frozenset(path))


def _parameter(name: str, annotation: Any, default: Any, owner: str) -> inspect.Parameter:
    if not name.isidentifier() or name.startswith("_"):
        raise TypeError(f"{owner}: {name!r} cannot be a tool argument (a Python name not starting with '_')")
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


def path_parameters(view: Callable[..., Any], skip: int = 1) -> dict[str, inspect.Parameter]:
    """A function view's parameters after its first ``skip`` (the request), which its URL fills.

    Decorators made with ``functools.wraps`` are seen through. ``*args``/``**kwargs`` carry
    nothing a schema can say: a view taking only those has no path parameters here.
    """
    try:
        signature = inspect.signature(view, eval_str=True)
    except (TypeError, ValueError, NameError):
        return {}
    named = [
        p
        for p in signature.parameters.values()
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    ]
    positional = [p for p in named if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    skipped = {p.name for p in positional[:skip]}
    return {p.name: p for p in named if p.name not in skipped}


def tool_function(
    name: str,
    description: str | None,
    arguments: ToolArguments,
    call: Callable[[dict[str, Any]], CallToolResult] | Callable[[dict[str, Any]], Awaitable[CallToolResult]],
    database: bool = False,
) -> Callable[..., Any]:
    """A function for ``@server.tool()``: the SDK reads its signature for the input schema and
    calls it with the validated arguments, which go to ``call`` as one dict.

    Text ``call`` could not pass on, or a value nested too deeply to be written as JSON, is
    refused first, naming the argument (see :func:`_uncarried`; ``database``: the arguments go
    into a query, so a NUL is refused too).
    """
    if inspect.iscoroutinefunction(call):

        async def run_async(**kwargs: Any) -> CallToolResult:
            refused = _uncarried(name, kwargs, database)
            return refused if refused is not None else await call(kwargs)

        fn: Callable[..., Any] = run_async
    else:

        def run(**kwargs: Any) -> CallToolResult:
            refused = _uncarried(name, kwargs, database)
            return refused if refused is not None else call(kwargs)  # type: ignore[return-value]

        fn = run
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = description
    _sign(fn, arguments)
    return fn


def _uncarried(tool_name: str, values: Mapping[str, Any], database: bool) -> CallToolResult | None:
    """The caller's error for an argument holding text nothing downstream can carry, else
    ``None``. JSON may spell a lone surrogate (``"\\ud800"``), which has no UTF-8: no URL,
    query string, body or database driver takes it, and the view or query would fail as a
    server error, its traceback logged. A NUL is refused for a query (``database``):
    PostgreSQL text cannot hold one, and SQLite compares text as ending at it (a search for
    ``"\\x00"`` would match every row). A view gets a NUL as its URL would give it."""
    for argument, value in values.items():
        if _nesting(value) > MAX_NESTING:
            logger.info("Tool %r rejected arguments: %r", tool_name, [argument])
            return error(f"Invalid argument {argument!r}: its value nests deeper than {MAX_NESTING} levels.")
        if _holds_uncarried(to_jsonable_python(value), database):
            # The argument's name only, as the SDK logs a rejected argument: the value is the caller's.
            logger.info("Tool %r rejected arguments: %r", tool_name, [argument])
            what = "a NUL character or a lone surrogate" if database else "a lone surrogate"
            return error(f"Invalid argument {argument!r}: its text holds {what}, which cannot be passed on.")
    return None


def _nesting(value: Any) -> int:
    """How many levels of objects, arrays and models ``value`` nests (walked without recursion,
    so that no depth can make the walk itself fail)."""
    deepest = 0
    pending = [(value, 1)]
    while pending:
        item, level = pending.pop()
        if isinstance(item, BaseModel):
            children: Iterable[Any] = item.__dict__.values()
        elif isinstance(item, Mapping):
            children = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        pending.extend((child, level + 1) for child in children)
    return deepest


def _holds_uncarried(value: Any, database: bool) -> bool:
    if isinstance(value, str):
        return not storable(value) if database else not (value.isascii() or utf8_safe(value))
    if isinstance(value, Mapping):
        return any(_holds_uncarried(key, database) or _holds_uncarried(item, database) for key, item in value.items())
    if isinstance(value, list | tuple):
        return any(_holds_uncarried(item, database) for item in value)
    return False


def retype_tool(server: Any, name: str, fn: Callable[..., Any], arguments: ToolArguments) -> None:
    """Give the registered tool ``name`` (its :func:`tool_function` ``fn``) the arguments
    ``arguments``: its input schema and argument model follow."""
    _sign(fn, arguments)
    _sdk.rebuild_tool(server, name, fn)


def _sign(fn: Callable[..., Any], arguments: ToolArguments) -> None:
    # The SDK reads the tool's input schema off the function's signature.
    fn.__signature__ = arguments.signature  # type: ignore[attr-defined]
    fn.__annotations__ = {p.name: p.annotation for p in arguments.signature.parameters.values()}
    fn.__annotations__["return"] = CallToolResult


def wraps(outer: Any, inner: Any) -> bool:
    """Whether ``inner`` is ``outer`` or one of the functions it wraps (``__wrapped__``, as
    ``functools.wraps`` leaves it: ``login_required(view)`` wraps ``view``)."""
    seen = 0
    while outer is not None and seen < 100:  # a wrapper whose __wrapped__ loops: give up
        if outer is inner:
            return True
        outer = getattr(outer, "__wrapped__", None)
        seen += 1
    return False


def share_permission(view: Any, tool_fn: Callable[..., Any]) -> None:
    """``permission_required`` on the view, below or above the ``view_tool`` decorator, hides
    the tool (checked per request, at no cost for views without one)."""
    check = getattr(view, PERMISSION_ATTR, None)
    if check is not None:
        require(check)(tool_fn)
    with contextlib.suppress(AttributeError, TypeError):  # a builtin or slotted callable: no mark
        setattr(view, TOOLS_ATTR, (*getattr(view, TOOLS_ATTR, ()), tool_fn))


def describe_view(
    view: Callable[..., Any],
    view_class: type | None,
    name: str | None,
    description: str | None,
    arguments: Mapping[str, Any] | type[BaseModel] | None,
    path_arguments: Mapping[str, Any] | None,
    path: Callable[[], Mapping[str, inspect.Parameter]],
    invalid: type[Exception] = ValueError,
) -> tuple[str, ToolArguments, str]:
    """A view tool's name, arguments and description, the same way in every adapter.

    The name defaults to the function's (a class-based view: its class's, in snake case), the
    description to the docstring. The path arguments are ``path_arguments`` (names to types)
    or, without them, ``path()``: the view's own. A view with no usable name raises ``invalid``.
    """
    tool_name = name or (snake_case(view_class.__name__) if view_class else getattr(view, "__name__", ""))
    if not tool_name.isidentifier():
        raise invalid(f"view_tool(): give the tool a name= ({view!r} has none usable)")
    if path_arguments is not None:
        params = {
            n: inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, annotation=t) for n, t in path_arguments.items()
        }
    else:
        params = dict(path())
    spec = tool_arguments(params, arguments, f"view_tool({tool_name})")
    doc = description or _own_doc(view_class or view) or f"Calls the view {tool_name}."
    return tool_name, spec, doc


def _own_doc(view: Any) -> str | None:
    """The view's docstring; a class's own only: ``inspect.getdoc`` would give an undocumented
    class the framework base's (Django's ``View``, Flask's ``MethodView``) as what the tool does."""
    if isinstance(view, type):
        doc = vars(view).get("__doc__")
        return inspect.cleandoc(doc) if isinstance(doc, str) else None
    return inspect.getdoc(view)


_CAMEL_CASE = re.compile(r"(?<!^)((?<=[a-z])[A-Z]|[A-Z](?![A-Z]|$))")
"""Where a word of a class name starts: Django's ``camel_case_to_spaces`` rule, by which its
verbose names read ``HTTPLog`` as "http log" (an acronym is one word, not one per letter)."""


def snake_case(name: str) -> str:
    """``OrderCount`` → ``order_count``, ``OrderAPIView`` → ``order_api_view``: a class's name
    as a tool's."""
    return _CAMEL_CASE.sub(r"_\1", name).lower()


def query_pairs(values: Mapping[str, Any]) -> list[tuple[str, str]]:
    """A view's query-string arguments as pairs (a list as a repeated key), as a form sends them."""
    pairs: list[tuple[str, str]] = []
    for key, value in values.items():
        items: Iterable[Any] = value if isinstance(value, list | tuple) else (value,)
        pairs.extend((key, _query_value(item)) for item in items)
    return pairs


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.date | dt.datetime):
        return value.isoformat()
    return str(value)


def read_as_url_text(values: Mapping[str, Any], converters: Iterable[tuple[str, Any]]) -> dict[str, Any] | None:
    """``values`` with each text that fills a URL converter's variable read as the converter
    reads it from a browser's URL: its ``regex``, then ``to_python``, by the first of
    ``converters`` (variable names and converters, of every URL of the view) that admits it.
    ``None`` when a text is admitted by none of them: no URL of the view takes it.

    A tool takes text for a view's parameter without an annotation; its URL's converter makes
    the view's value of it (``7`` for ``"7"`` at ``<int:number>``), and a custom converter's
    ``to_url`` may take only such values (Django's documented ``"%04d" % value``)."""
    by_name: dict[str, list[Any]] = {}
    for name, converter in converters:
        by_name.setdefault(name, []).append(converter)
    read = dict(values)
    for name, value in values.items():
        if not isinstance(value, str) or name not in by_name:
            continue
        for converter in by_name[name]:
            if re.fullmatch(converter.regex, value):
                with contextlib.suppress(ValueError):  # to_python's way of refusing it
                    read[name] = converter.to_python(value)
                    break
        else:
            return None
    return read


def _sends_back(location: str, own_path: str | None) -> bool:
    """Whether a redirect to ``location`` carries the way back to ``own_path`` in its query, as
    a login page's address does whatever its URL (Django's ``redirect_to_login``: ``login_url=``,
    ``staff_member_required``'s admin login; Flask-Login's ``login_url``): a sign-in page."""
    if not own_path:
        return False
    query = urlsplit(location).query
    return any(urlsplit(value).path == own_path for _, value in parse_qsl(query))


def view_result(
    response: ViewResponse,
    html_to_text: Callable[[str], str] | None = None,
    login_url: str | None = None,
    signed_in: bool = False,
    own_path: str | None = None,
) -> CallToolResult:
    """The tool's result for a view's response (see the module's docstring). ``signed_in``:
    the caller is, so a redirect to the login page refuses them (Django's ``permission_required``
    sends there whoever fails it) rather than asks them to sign in. ``own_path``: the path the
    view was called at, which a redirect to a login page other than ``login_url`` gives as the
    way back (``?next=``)."""
    status = response.status
    if 300 <= status < 400:
        location = response.location or ""
        if (login_url and location.split("?", 1)[0].endswith(login_url.split("?", 1)[0])) or _sends_back(
            location, own_path
        ):
            if signed_in:
                return error(
                    "403 Forbidden: the view sends the caller, who is signed in, to its login page "
                    "(a permission or test it requires refuses them)."
                )
            return error("Authentication required: the view sends callers who are not signed in to its login page.")
        return error(f"The view redirected ({status}) to {location or 'nowhere'}; a tool cannot follow redirects.")
    kind = response.content_type.split(";", 1)[0].strip().lower()
    if status >= 500:
        return error(f"{status} {response.reason or REASONS.get(status, 'Server Error')}: the view failed.")
    text = _text(response, kind, html_to_text)
    if status >= 400:
        reason = response.reason or REASONS.get(status, "Client Error")
        detail = text.strip() if text is not None else ""
        return error(f"{status} {reason}" + (f": {detail[:2000]}" if detail else ""))
    if text is None:
        return error(f"The view answered with {kind or 'an untyped body'}, which this tool cannot return as text.")
    if kind == "application/json" or kind.endswith("+json"):
        try:
            data = json.loads(text)
        except ValueError:
            return error("The view's JSON answer is not valid JSON.")
        structured = data if isinstance(data, dict) else None
        return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=structured)
    return CallToolResult(content=[TextContent(type="text", text=_cut(text))])


def _text(response: ViewResponse, kind: str, to_text: Callable[[str], str] | None) -> str | None:
    textual = (
        kind.startswith("text/") or kind in ("application/json", "application/xml") or kind.endswith(("+json", "+xml"))
    )
    if not textual and not (kind == "" and not response.body):
        return None
    try:
        text = response.body.decode(response.charset or "utf-8")
    except (LookupError, UnicodeDecodeError):
        text = response.body.decode("utf-8", "replace")
    if kind in ("text/html", "application/xhtml+xml"):
        text = _tidy((to_text or html_to_text)(text))
    return text


_HIDDEN = frozenset({"script", "style", "template"})
_LINE_BREAKS = frozenset({"br", "hr"})
_BLOCKS = frozenset({
    "p", "div", "li", "dt", "dd", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "title", "head", "header", "footer",
    "nav", "section", "article", "table", "ul", "ol", "pre", "blockquote",
})  # fmt: skip


class _TextParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.hidden = 0

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag in _HIDDEN:
            self.hidden += 1
        elif tag in _LINE_BREAKS:
            self.parts.append("\n")

    def handle_startendtag(self, tag: str, attrs: Any) -> None:
        if tag in _LINE_BREAKS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _HIDDEN:
            self.hidden = max(0, self.hidden - 1)
        elif tag in _BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self.hidden:
            self.parts.append(data)


def html_to_text(markup: str) -> str:
    """A page's text: scripts and styles dropped, block ends as line breaks, entities decoded.

    The standard library's HTML parser, the same in every adapter: what a tool returns for a
    page does not depend on the framework that rendered it.
    """
    parser = _TextParser()
    parser.feed(markup)
    parser.close()
    return "".join(parser.parts)


def _tidy(text: str) -> str:
    """Text left by stripping HTML tags, without the indentation and blank runs of the markup."""
    lines = (line.strip() for line in text.splitlines())
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def _cut(text: str) -> str:
    if len(text) <= MAX_TEXT:
        return text
    return text[:MAX_TEXT] + f"\n[... {len(text) - MAX_TEXT} more characters cut]"


def error(message: str) -> CallToolResult:
    """A tool error the client and the model read."""
    return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)


def failed(owner: str, what: str = "the view") -> CallToolResult:
    """The view (or the model's query) raised: logged with its traceback, answered as a server
    error would be, without the exception's text (it may name tables, paths or secrets)."""
    logger.exception("Tool %s failed", owner)
    return error(f"500 Internal Server Error: {what} failed.")


# -- models ------------------------------------------------------------------------------------


JSONValue = dict[str, Any] | list[Any] | str | int | float | bool
"""A JSON column's filter: any JSON value but ``null`` (an unset filter), matched as JSON."""

_MILLISECOND = dt.timedelta(milliseconds=1)


def shown_window(value: Any) -> tuple[Any, Any] | None:
    """The values :func:`json_value` shows as ``value``, for a time filter: ``(value, end)``,
    the half-open millisecond from ``value`` (``end`` ``None`` past the last one of the day, or
    of time), when ``value`` is a datetime or a time of day to the millisecond; ``None`` for
    another value, or a time given to the microsecond, which is matched exactly. Times are
    shown to the millisecond: the value a tool showed finds its row sent back as a filter."""
    if not isinstance(value, dt.datetime | dt.time) or value.microsecond % 1000:
        return None
    if isinstance(value, dt.datetime):
        try:
            return value, value + _MILLISECOND
        except OverflowError:
            return value, None
    later = dt.datetime.combine(dt.date.min, value) + _MILLISECOND
    return value, later.timetz() if later.date() == dt.date.min else None


def canonical_json(stored: str | float | None) -> str | None:
    """A JSON document (as SQLite hands a JSON column's value over) written one way, its
    keys sorted: two documents compare whatever the order of their keys. ``None`` for what
    is not JSON, which matches nothing."""
    if isinstance(stored, int | float):
        # A column declared JSON has numeric affinity in SQLite: a number is kept as one.
        return json.dumps(stored)
    if not isinstance(stored, str):
        return None
    try:
        return json.dumps(json.loads(stored), sort_keys=True, separators=(",", ":"))
    except ValueError:
        return None  # not JSON: matches no filter


def add_canonical_json(connection: Any) -> None:
    """Give the ``sqlite3`` connection ``connection`` the function ``mcp_canonical_json(value)``:
    a JSON column's value as :func:`canonical_json` writes it. SQLite's own ``json()`` keeps
    the order of the text's keys, and a client may send an object's keys in any order."""
    connection.create_function("mcp_canonical_json", 1, canonical_json, deterministic=True)


def known_count(page: int, page_size: int, fetched: int) -> int | None:
    """How many rows the listing holds, when the page read tells it: one neither full nor
    (past the first) empty holds the last row. ``None``: only counting them tells."""
    if fetched < page_size and (fetched or page == 1):
        return (page - 1) * page_size + fetched
    return None


def page_result(rows: list[dict[str, Any]], count: int, page: int, page_size: int) -> CallToolResult:
    """One page of a model's rows, as structured content and its JSON text."""
    data = {
        "results": rows,
        "count": count,
        "page": page,
        "pages": max(1, math.ceil(count / page_size)),
    }
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(data, ensure_ascii=False))], structured_content=data
    )


def object_result(row: dict[str, Any]) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(row, ensure_ascii=False))], structured_content=row
    )


def json_value(value: Any) -> Any:
    """A column's value as JSON, as Django's ``DjangoJSONEncoder`` writes it: ``Decimal`` and
    ``UUID`` as strings, times in ISO 8601 to the millisecond with ``Z`` for UTC, durations as
    ISO 8601 durations, enums by value; a float JSON cannot write (``NaN``) as ``None``, an IP
    address or network as its text, a PostgreSQL range as its ``lower``, ``upper`` and
    ``bounds`` (``{"empty": true}`` for an empty one)."""
    if isinstance(value, enum.Enum):
        return json_value(value.value)
    if isinstance(value, float) and not math.isfinite(value):
        return None  # NaN and the infinities are not JSON (the wire writes them as null too)
    if isinstance(value, dt.datetime):
        text = value.isoformat()
        if value.microsecond:
            text = text[:23] + text[26:]
        return text[:-6] + "Z" if text.endswith("+00:00") else text
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, dt.time):
        text = value.isoformat()
        return text[:12] if value.microsecond else text
    if isinstance(value, dt.timedelta):
        return _iso_duration(value)
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return None  # binary columns say nothing a model can read
    if isinstance(value, ipaddress.IPv4Address | ipaddress.IPv6Address | ipaddress.IPv4Network | ipaddress.IPv6Network):
        return str(value)  # PostgreSQL's inet and cidr, as psycopg reads them
    if _is_range(value):
        if value.isempty:
            return {"empty": True}
        return {"lower": json_value(value.lower), "upper": json_value(value.upper), "bounds": value.bounds}
    if isinstance(value, list | tuple):
        return [json_value(item) for item in value]
    if isinstance(value, dict):
        return {str(key): json_value(item) for key, item in value.items()}
    return value


def _is_range(value: Any) -> bool:
    """Whether ``value`` is a PostgreSQL range as psycopg or SQLAlchemy reads one (written as
    Django's ``dumpdata`` writes a ``RangeField``'s value)."""
    return all(hasattr(value, name) for name in ("lower", "upper", "bounds", "isempty"))


def _iso_duration(duration: dt.timedelta) -> str:
    sign = "-" if duration < dt.timedelta(0) else ""
    duration = abs(duration)
    minutes, seconds = divmod(duration.seconds, 60)
    hours, minutes = divmod(minutes, 60)
    fraction = f".{duration.microseconds:06d}" if duration.microseconds else ""
    return f"{sign}P{duration.days}DT{hours:02d}H{minutes:02d}M{seconds:02d}{fraction}S"


def pluralize(name: str) -> str:
    """An English plural good enough for a tool's name (``category`` → ``categories``)."""
    if re.search(r"[^aeiou]y$", name):
        return name[:-1] + "ies"
    if name.endswith(("s", "x", "z", "ch", "sh")):
        return name + "es"
    return name + "s"


def check_model_options(
    owner: str,
    actions: Sequence[str],
    fields: Any,
    page_size: int,
    max_page_size: int,
    invalid: type[Exception],
    columns: str = "fields",
) -> None:
    """The options every adapter's ``model_tools`` checks alike, at start-up (``invalid``: the
    exception the framework raises for a bad setting; ``columns``: what it calls them)."""
    unknown_actions = set(actions) - {"list", "get"}
    if unknown_actions or not actions:
        raise invalid(f'{owner}: actions are "list" and "get", not {sorted(unknown_actions)}')
    if fields != "__all__" and (isinstance(fields, str) or not fields):
        raise invalid(f'{owner}: fields= must name the {columns} to show, or be "__all__"')
    if not 1 <= page_size <= max_page_size:
        raise invalid(f"{owner}: page_size must be between 1 and max_page_size ({max_page_size})")


def list_tool(
    filters: Mapping[str, Any], search: Sequence[str], page_size: int, max_page_size: int, plural: str, owner: str
) -> tuple[ToolArguments, str]:
    """A model's list tool's arguments and description: ``filters`` (names to the type of their
    exact value, each optional), ``search`` (the text fields a ``search`` argument matches),
    ``page`` and a bounded ``page_size``."""
    params = {
        name: inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=kind | None)
        for name, kind in filters.items()
    }
    extra: dict[str, Any] = {}
    if search:
        extra["search"] = (SearchText | None, None)
    extra["page"] = (Annotated[int, Field(ge=1, le=MAX_PAGE)], 1)
    extra["page_size"] = (Annotated[int, Field(ge=1, le=max_page_size)], page_size)
    described = f"List {plural}, {page_size} to a page"
    if filters:
        described += ", filtered by " + ", ".join(filters)
    if search:
        described += "; search matches " + ", ".join(search)
    return tool_arguments(params, extra, owner), described + "."


def get_tool(key: str, kind: Any, model_name: str, owner: str) -> tuple[ToolArguments, str]:
    """A model's get tool's arguments (its primary key ``key``, of type ``kind``) and description."""
    param = {key: inspect.Parameter(key, inspect.Parameter.KEYWORD_ONLY, annotation=kind)}
    return tool_arguments(param, None, owner), f"Get one {model_name} by its {key}."


def add_tool(
    server: Any,
    name: str,
    description: str,
    spec: ToolArguments,
    call: Callable[[dict[str, Any]], CallToolResult],
    guard: Callable[[Callable[..., Any]], Any] | None,
) -> None:
    """Register a model tool on ``server``, hidden from callers ``guard`` (if any) refuses."""
    fn = tool_function(name, description, spec, call, database=True)
    if guard is not None:
        guard(fn)
    register_tool(server, fn, name, description)


def require_server(server: Any, adapter: str) -> None:
    """Refuse a ``view_tool`` given no server: bare ``@view_tool`` takes the view for the server
    and would silently put a decorator in the view's place."""
    if not callable(getattr(server, "tool", None)):
        what = getattr(server, "__name__", type(server).__name__)
        raise TypeError(
            f"@{adapter}.view_tool(mcp) takes the MCPServer first (or {adapter}.view_tool(mcp, view)); got {what!r}"
        )


def register_tool(server: Any, fn: Callable[..., Any], name: str, description: str, title: str | None = None) -> None:
    """``server.tool(...)(fn)``, refusing a name the server already has: the SDK would keep
    the first tool and only log a warning, so a view or model tool would silently be absent."""
    if any(tool.name == name for tool in _sdk.all_tools(server)):
        raise ValueError(f"The server already has a tool named {name!r}: give this one another name (name= or names=)")
    server.tool(name=name, title=title, description=description)(fn)


def default_names(
    model_name: str, plural: str, names: Mapping[str, str] | None, actions: Sequence[str], owner: str
) -> dict[str, str]:
    """The names of a model's tools for ``actions``: those in ``names``, else ``list_<plural>``
    and ``get_<name>`` as ASCII identifiers (``order item`` → ``order_items``, ``pièce jointe``
    → ``piece_jointe``): MCP tool names hold ASCII letters, digits, ``_``, ``-`` and ``.``
    only (SEP-986), and clients that check them refuse a tool named otherwise. A model's name
    with no ASCII letter or digit to name a tool by raises ``ValueError`` asking for ``names=``."""

    def ident(text: str) -> str:
        ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
        return re.sub(r"[^a-z0-9]+", "_", ascii_text.strip().lower()).strip("_")

    given = dict(names or {})
    defaults = {"list": ("list", plural), "get": ("get", model_name)}
    for action in actions:
        if action in given:
            continue
        verb, name = defaults[action]
        if not ident(name):
            raise ValueError(
                f"{owner}: {name!r} has no ASCII letter or digit to name its {action} tool by; "
                f'name it with names={{"{action}": ...}}'
            )
        given[action] = f"{verb}_{ident(name)}"
    return given
