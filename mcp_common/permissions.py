"""Per-tool permissions: a tool the caller may not use is not there for them.

A framework's decorator (``mcp_django.permission_required``, ``mcp_flask.permission_required``)
marks a tool function with a check of the framework's request. Before a request reaches the
endpoint, the adapter asks which of the server's tools the caller may not use
(:func:`tool_checks`, then :func:`run_checks`: every tool for ``tools/list``, the called one
for ``tools/call``; in the request's own thread, where the framework's database and context
work) and puts them on the request. For that request the server's tool registry leaves them out: ``tools/list``
does not list them and a call gets the SDK's own "Unknown tool" answer, on every path, exactly
as for a tool that does not exist. Each request is checked afresh, so a permission withdrawn
mid-session takes effect at once.
"""

from __future__ import annotations

import contextlib
import logging
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from mcp_common import _sdk

logger = logging.getLogger("mcp_common.permissions")

F = TypeVar("F", bound=Callable[..., Any])

PERMISSION_ATTR = "__mcp_permission__"
"""The attribute the decorators set on a tool function: a callable ``check(native_request) -> bool``."""

TOOLS_ATTR = "__mcp_tools__"
"""On a view registered as tools (:mod:`mcp_common.expose`): their functions, which a
permission put on the view afterwards (a decorator above ``view_tool``) must reach too."""

TOOL_METHODS = frozenset({"tools/list", "tools/call"})
"""The requests a tool's permission changes the answer of."""


_GIVEN_CHECKS: weakref.WeakSet[Callable[..., Any]] = weakref.WeakSet()
"""The checks users gave the framework decorators, as written: a tool's function among them was
given by a decorator used without its argument (``@permission_required`` above ``@mcp.tool()``)."""


def require(check: Callable[[Any], bool], given: Callable[..., Any] | None = None) -> Callable[[F], F]:
    """Mark a tool function with ``check``; the function itself is returned unchanged, so the
    decorator may sit above or below ``@mcp.tool()``. Checks of stacked decorators all apply.
    ``given``: the user's own check, which ``check`` calls (see :func:`misused_decorators`)."""
    with contextlib.suppress(TypeError):  # a callable object that takes no weak reference
        _GIVEN_CHECKS.add(given or check)

    def mark(fn: F) -> F:
        earlier = getattr(fn, PERMISSION_ATTR, None)
        if earlier is None:
            setattr(fn, PERMISSION_ATTR, check)
        else:
            setattr(fn, PERMISSION_ATTR, lambda request: earlier(request) and check(request))
        for tool_fn in getattr(fn, TOOLS_ATTR, ()):
            mark(tool_fn)
        return fn

    return mark


def protected_tools(server: Any) -> dict[str, Callable[[Any], bool]]:
    """The server's tools that carry a permission check, by name."""
    return {
        tool.name: check
        for tool in _sdk.all_tools(server)
        if (check := getattr(tool.fn, PERMISSION_ATTR, None)) is not None
    }


def tool_checks(server: Any, request: Any) -> dict[str, Callable[[Any], bool]]:
    """The checks to run for ``request`` (framework-neutral): every protected tool's for
    ``tools/list``, the called tool's for ``tools/call`` (no other tool's changes its answer),
    none for anything else. Cheap: the adapters ask on every request."""
    decoded = _tool_request(request)
    if decoded is None:
        return {}
    if decoded["method"] == "tools/list":
        return protected_tools(server)
    params = decoded.get("params")
    name = params.get("name") if isinstance(params, dict) else None
    # One lookup, not a walk over every tool: a call costs the same with 5 tools or 500.
    tool = _sdk.registered_tool(server, name) if isinstance(name, str) else None
    check = getattr(tool.fn, PERMISSION_ATTR, None) if tool is not None else None
    return {name: check} if check is not None else {}


def run_checks(checks: dict[str, Callable[[Any], bool]], native: Any) -> frozenset[str]:
    """The names of the tools whose check refuses the framework request ``native``.

    A check that raises refuses (its traceback goes to the log): the tool is hidden from this
    request, and the caller's other tools are served, rather than the whole request failing
    with a server error because of one tool's check (``lambda user: user.profile.vip`` for an
    anonymous caller). Blocking (a check may read the database): call it where the
    framework's own code runs.
    """
    denied = set()
    failed: dict[str, Exception] = {}
    for name, check in checks.items():
        try:
            allowed = check(native)
        except Exception as exc:
            failed[name] = exc
            allowed = False
        if not allowed:
            denied.add(name)
    if failed:
        # One record for the request, however many tools share a broken check (a tools/list
        # runs them all): what failed and the first traceback, as one failure of the request.
        names = ", ".join(map(repr, failed))
        if len(failed) == 1:
            message = f"The permission check of tool {names} failed: the tool is hidden from this request"
        else:
            message = (
                f"The permission checks of tools {names} failed: the tools are hidden from this request "
                "(the first traceback below)"
            )
        logger.error("%s", message, exc_info=next(iter(failed.values())))
    return frozenset(denied)


def denied_tools(server: Any, native: Any) -> frozenset[str]:
    """The names of ``server``'s tools whose check refuses the framework request ``native``."""
    return run_checks(protected_tools(server), native)


def asks_about_tools(request: Any) -> bool:
    """Whether the (framework-neutral) request is one whose answer a tool's permission changes."""
    return _tool_request(request) is not None


def _tool_request(request: Any) -> dict[str, Any] | None:
    try:
        decoded = request.json()
    except (ValueError, RecursionError):
        return None
    if not isinstance(decoded, dict):
        return None
    method = decoded.get("method")
    # Checked as a string first: a list or an object is unhashable, and the SDK refuses it.
    return decoded if isinstance(method, str) and method in TOOL_METHODS else None


def unenforced_permissions(server: Any) -> list[str]:
    """The resources, resource templates and prompts of ``server`` that carry a permission.

    Permissions are checked for tools only: one of these would be served to every caller, what
    it guards included, so the adapters refuse to start with them (a check that fails open is
    worse than none: it looks like protection)."""
    return [what for what, fn in _sdk.resource_and_prompt_functions(server) if _marked(fn)]


def _marked(fn: Any) -> bool:
    # The SDK keeps a resource's or prompt's function wrapped (pydantic's validate_call): a
    # decorator above ``@mcp.prompt()`` marked the function inside.
    for _ in range(100):  # a __wrapped__ chain that loops: give up
        if fn is None:
            return False
        if getattr(fn, PERMISSION_ATTR, None) is not None:
            return True
        fn = getattr(fn, "__wrapped__", None)
    return False


def unenforced_message(what: str) -> str:
    return (
        f"{what} carries a permission, which only tools enforce: every caller would be served it. "
        "Check the caller in its function, or serve it through a tool."
    )


def misused_decorators(server: Any) -> list[str]:
    """Messages for the tools of ``server`` that a permission decorator used without its argument
    took for its check (above ``@mcp.tool()``), leaving the tool everyone's."""
    messages = []
    for tool in _sdk.all_tools(server):
        if tool.fn in _GIVEN_CHECKS:
            messages.append(
                f"tool {tool.name!r} was given to a permission decorator as its check: a decorator used "
                "without its argument above @mcp.tool() guards nothing. Give it its argument "
                "(@permission_required(...), @user_passes_test(...))."
            )
    return messages


def assert_enforced(server: Any, label: str = "MCP server") -> None:
    """Raise ``TypeError`` naming what of ``server`` carries a permission nothing checks."""
    problems = [unenforced_message(what) for what in unenforced_permissions(server)] + misused_decorators(server)
    if problems:
        raise TypeError(f"{label}: " + "; ".join(problems))
