"""MCP for Django: serve an MCP server (the official SDK's ``MCPServer``) from a Django URL.

Public helpers live in :mod:`mcp_django.elicitation` (``complete_elicitation``, ``ElicitUrl``),
:mod:`mcp_django.permissions` (``permission_required``, ``user_passes_test``) and
:mod:`mcp_django.expose` (``view_tool``, ``model_tools``: existing views and models as tools),
importable from here once Django's app registry is ready.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # What ``__getattr__`` below returns, for type checkers: without these, every name here
    # would be ``Any`` to them, and a decorated tool an untyped function.
    from mcp_django.elicitation import (
        ElicitUrl,
        UrlConsent,
        acomplete_elicitation,
        caller_elicitation_id,
        complete_elicitation,
        elicitation_completed,
    )
    from mcp_django.expose import model_tools, view_tool
    from mcp_django.permissions import permission_required, user_passes_test

__all__ = [
    "ElicitUrl",
    "UrlConsent",
    "acomplete_elicitation",
    "caller_elicitation_id",
    "complete_elicitation",
    "elicitation_completed",
    "model_tools",
    "permission_required",
    "user_passes_test",
    "view_tool",
]


def __getattr__(name: str) -> Any:
    # Lazy: importing ``mcp_django`` in settings must not import models before apps are ready.
    if name in ("permission_required", "user_passes_test"):
        from mcp_django import permissions

        return getattr(permissions, name)
    if name in ("view_tool", "model_tools"):
        from mcp_django import expose

        return getattr(expose, name)
    if name in __all__:
        from mcp_django import elicitation

        return getattr(elicitation, name)
    raise AttributeError(f"module 'mcp_django' has no attribute {name!r}")
