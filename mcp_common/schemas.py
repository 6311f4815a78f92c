"""Elicitation schemas checked when the application starts, not inside a user's call.

The SDK renders an elicitation model only when the question is asked, so a nested model
fails in the middle of a tool call, in front of a user. :func:`check_server_schemas` finds
every model a server's tools can ask for - each resolver's ``Elicit[Model]`` return arm and
each ``ctx.elicit(..., schema=Model)`` in a tool or resolver body - and renders it now, with
the SDK's own renderer and its own error message.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import types
import typing
from collections.abc import Callable, Iterator
from typing import Any

from mcp.server.elicitation import render_elicitation_schema
from mcp.server.mcpserver import Elicit
from pydantic import BaseModel

from mcp_common import _sdk


def check_server_schemas(server: Any) -> list[tuple[str, str]]:
    """``(where, message)`` for every elicitation model of ``server`` the spec does not accept.

    ``where`` names the tool (and resolver); ``message`` is the SDK's ``TypeError`` text, e.g.
    ``Elicitation schema field 'address' rendered as {'$ref': '#/$defs/Address'}, which is not
    a valid PrimitiveSchemaDefinition``.
    """
    problems: list[tuple[str, str]] = []
    seen: set[tuple[str, type[BaseModel]]] = set()
    for tool in _sdk.registered_tools(server):
        functions: list[tuple[str, Callable[..., Any]]] = [(f"tool {tool.name!r}", tool.fn)]
        for plan in getattr(tool, "resolver_plans", {}).values():
            name = getattr(plan.fn, "__name__", type(plan.fn).__name__)
            functions.append((f"tool {tool.name!r}, resolver {name!r}", plan.fn))
        for where, fn in functions:
            for model in _models_of(fn):
                if (where, model) in seen:
                    continue
                seen.add((where, model))
                try:
                    render_elicitation_schema(model)
                except TypeError as exc:
                    problems.append((where, str(exc)))
    return problems


def _models_of(fn: Callable[..., Any]) -> Iterator[type[BaseModel]]:
    yield from _return_arm_models(fn)
    yield from _elicit_call_models(fn)


def _target(fn: Callable[..., Any]) -> Any:
    """The function whose annotations and source describe ``fn`` (a callable object's method)."""
    return inspect.unwrap(fn) if inspect.isroutine(fn) else type(fn).__call__


def _return_arm_models(fn: Callable[..., Any]) -> Iterator[type[BaseModel]]:
    target = _target(fn)
    try:
        hints = typing.get_type_hints(target, include_extras=True)
    except Exception:
        return
    annotation = hints.get("return")
    arms = typing.get_args(annotation) if _is_union(annotation) else (annotation,)
    for arm in arms:
        if typing.get_origin(arm) is Elicit or (isinstance(arm, type) and issubclass(arm, Elicit)):
            for model in typing.get_args(arm):
                if isinstance(model, type) and issubclass(model, BaseModel):
                    yield model


def _is_union(annotation: Any) -> bool:
    return typing.get_origin(annotation) in (typing.Union, types.UnionType)


def _elicit_call_models(fn: Callable[..., Any]) -> Iterator[type[BaseModel]]:
    """Models named in ``*.elicit(message, Model)`` / ``schema=Model`` calls and ``Elicit(...)``
    constructions in the function's source."""
    target = _target(fn)
    try:
        source = textwrap.dedent(inspect.getsource(target))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError, IndentationError):
        return
    namespace = {**getattr(target, "__globals__", {}), **_closure_vars(target)}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        if name not in ("elicit", "Elicit"):
            continue
        candidates = [kw.value for kw in node.keywords if kw.arg == "schema"]
        if len(node.args) >= 2:
            candidates.append(node.args[1])
        for expr in candidates:
            model = _lookup(expr, namespace)
            if isinstance(model, type) and issubclass(model, BaseModel):
                yield model


def _closure_vars(fn: Any) -> dict[str, Any]:
    try:
        closure = inspect.getclosurevars(fn)
    except (TypeError, ValueError):
        return {}
    return {**closure.nonlocals}


def _lookup(expr: ast.expr, namespace: dict[str, Any]) -> Any:
    if isinstance(expr, ast.Name):
        return namespace.get(expr.id)
    if isinstance(expr, ast.Attribute):
        base = _lookup(expr.value, namespace)
        return getattr(base, expr.attr, None) if base is not None else None
    return None


class ElicitationSchemaError(TypeError):
    """A server's tools ask with a schema the MCP spec does not accept."""


def assert_server_schemas(server: Any, label: str = "MCP server") -> None:
    """Raise :class:`ElicitationSchemaError` listing every bad elicitation schema of ``server``."""
    problems = check_server_schemas(server)
    if problems:
        lines = "; ".join(f"{where}: {message}" for where, message in problems)
        raise ElicitationSchemaError(f"{label}: {lines}")
