"""django-tenants (a schema per tenant on PostgreSQL): the MCP tables live once, in the public
schema (``mcp_django`` in ``SHARED_APPS``; the system check refuses ``TENANT_APPS``), and every
tenant's conversations are kept apart there by their principals, which name the tenant.

Users live in each tenant's schema, so two tenants each have a user with primary key 1, and
``django-user:1`` alone would let one tenant's user take up the other's sessions, request
states and questions; anonymous callers, one principal, would share them across tenants."""

from __future__ import annotations

from typing import Any

from django.conf import settings

TENANT_PRINCIPAL = "django-tenant:"
"""A tenant's principals start with this, its schema's name and ``;`` (which django-tenants
refuses in a schema name), then the user's principal, or ``anonymous``."""

ANONYMOUS = "anonymous"


def request_tenant(request: Any) -> str | None:
    """The schema of the tenant serving ``request`` (``request.tenant``, as django-tenants'
    ``TenantMainMiddleware`` sets it), else ``None``."""
    schema = getattr(getattr(request, "tenant", None), "schema_name", None)
    return schema if isinstance(schema, str) and schema else None


def connection_tenant(connection: Any) -> str | None:
    """The tenant whose schema a django-tenants connection is set to; ``None`` for the public
    schema (no tenant chosen: a task, a command) and for any other database backend."""
    schema = getattr(connection, "schema_name", None)
    if not isinstance(schema, str) or not schema or not hasattr(connection, "set_tenant"):
        return None
    return None if schema == getattr(settings, "PUBLIC_SCHEMA_NAME", "public") else schema


def tenant_prefix(schema: str) -> str:
    """What every principal of the tenant ``schema`` starts with."""
    return f"{TENANT_PRINCIPAL}{schema};"


def in_tenant(schema: str | None, principal: str | None) -> str | None:
    """``principal`` (``None``: anonymous) as the tenant ``schema``'s own."""
    if schema is None:
        return principal
    return tenant_prefix(schema) + (ANONYMOUS if principal is None else principal)


def within(schema: str | None, principal: str | None) -> str | None:
    """The inverse of :func:`in_tenant` for a principal of that tenant: the user's principal,
    ``None`` for its anonymous one; any other principal as it is."""
    if schema is None or principal is None or not principal.startswith(prefix := tenant_prefix(schema)):
        return principal
    own = principal.removeprefix(prefix)
    return None if own == ANONYMOUS else own
