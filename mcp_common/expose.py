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
import inspect
import json
import logging
import math
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel

from mcp_common.permissions import PERMISSION_ATTR, TOOLS_ATTR, require

logger = logging.getLogger("mcp_common.expose")

MAX_TEXT = 100_000
"""Characters of a view's text or HTML answer a tool returns; the rest is cut with a note."""

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
                rest[name] = value
        return path, rest


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
) -> Callable[..., Any]:
    """A function for ``@server.tool()``: the SDK reads its signature for the input schema and
    calls it with the validated arguments, which go to ``call`` as one dict."""
    if inspect.iscoroutinefunction(call):

        async def run_async(**kwargs: Any) -> CallToolResult:
            return await call(kwargs)

        fn: Callable[..., Any] = run_async
    else:

        def run(**kwargs: Any) -> CallToolResult:
            return call(kwargs)  # type: ignore[return-value]

        fn = run
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = description
    fn.__signature__ = arguments.signature  # type: ignore[attr-defined]
    fn.__annotations__ = {p.name: p.annotation for p in arguments.signature.parameters.values()}
    fn.__annotations__["return"] = CallToolResult
    return fn


def share_permission(view: Any, tool_fn: Callable[..., Any]) -> None:
    """``permission_required`` on the view, below or above the ``view_tool`` decorator, hides
    the tool (checked per request, at no cost for views without one)."""
    check = getattr(view, PERMISSION_ATTR, None)
    if check is not None:
        require(check)(tool_fn)
    with contextlib.suppress(AttributeError, TypeError):  # a builtin or slotted callable: no mark
        setattr(view, TOOLS_ATTR, (*getattr(view, TOOLS_ATTR, ()), tool_fn))


def view_result(
    response: ViewResponse, html_to_text: Callable[[str], str], login_url: str | None = None
) -> CallToolResult:
    """The tool's result for a view's response (see the module's docstring)."""
    status = response.status
    if 300 <= status < 400:
        location = response.location or ""
        if login_url and location.split("?", 1)[0].endswith(login_url.split("?", 1)[0]):
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


def _text(response: ViewResponse, kind: str, html_to_text: Callable[[str], str]) -> str | None:
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
        text = _tidy(html_to_text(text))
    return text


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


def default_names(model_name: str, plural: str) -> dict[str, str]:
    """``list_<plural>`` and ``get_<name>``, as Python names (``order item`` → ``order_items``)."""

    def ident(text: str) -> str:
        return re.sub(r"\W+", "_", text.strip().lower()).strip("_")

    return {"list": f"list_{ident(plural)}", "get": f"get_{ident(model_name)}"}
