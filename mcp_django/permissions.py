"""Per-tool permissions with Django's users: the tool is hidden from callers who fail the test.

    from mcp_django import permission_required, user_passes_test

    @mcp.tool()
    @permission_required("shop.change_product")
    def restock(product: str, units: int) -> str: ...

    @mcp.tool()
    @user_passes_test(lambda user: user.is_staff)
    def sales_report() -> str: ...

A caller who fails does not see the tool in ``tools/list``, and calling it by name gets the
SDK's "Unknown tool" answer, as for a tool that does not exist. The test runs on every request
that lists the tools or calls this one, against ``request.user`` as the project's middleware (or
``MCP["AUTHENTICATION_CLASSES"]``) made it, in the request's thread.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from mcp_common.permissions import require

F = TypeVar("F", bound=Callable[..., Any])


def user_passes_test(test: Callable[[Any], bool]) -> Callable[[F], F]:
    """Offer the tool only to callers whose ``request.user`` passes ``test(user)``."""
    return require(lambda request: bool(test(request.user)), given=test)


def permission_required(*perms: str) -> Callable[[F], F]:
    """Offer the tool only to callers with every one of ``perms`` (``"app_label.codename"``),
    as ``user.has_perms`` decides (superusers have them all; anonymous callers none)."""
    if not perms or not all(isinstance(perm, str) for perm in perms):
        raise TypeError('permission_required() takes permission names, e.g. "shop.change_product"')
    return user_passes_test(lambda user: user.has_perms(perms))
