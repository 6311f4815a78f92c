"""Per-tool permissions in Flask: the tool is hidden from callers for whom the check fails.

    from flask_login import current_user
    from mcp_flask import permission_required

    @mcp.tool()
    @permission_required(lambda: current_user.is_authenticated and current_user.is_admin)
    def sales_report() -> str: ...

The check takes no arguments and runs in the request's own context (``flask.request``,
``flask.g``, Flask-Login's ``current_user``) on every request that lists the tools or calls this one. A
caller for whom it is false does not see the tool in ``tools/list``, and calling it by name gets
the SDK's "Unknown tool" answer, as for a tool that does not exist.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from mcp_common.permissions import require

F = TypeVar("F", bound=Callable[..., Any])


def permission_required(check: Callable[[], bool]) -> Callable[[F], F]:
    """Offer the tool only to callers for whom ``check()`` is true (in the request context)."""
    if not callable(check):
        raise TypeError("permission_required() takes a check: a callable with no arguments returning a bool")
    return require(lambda _request: bool(check()), given=check)
