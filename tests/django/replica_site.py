"""Projects whose routers send the MCP tables' queries elsewhere.

One whose reads go to a replica: the Django docs' primary/replica router, the replica a second
database that has not caught up (it never receives the primary's writes). The MCP store must
read what it has just written, so all of its queries go where it writes. One that keeps the MCP
tables in a database of their own. Ones that choose a tenant's database per request."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

from django.urls import include, path

# The project's server: MCP["SERVER"] = "benchmarks.bench_server.mcp" (echo, and confirm_echo,
# whose resolver asks the client).


class PrimaryReplicaRouter:
    """Reads from the replica, writes to the primary (``default``)."""

    def db_for_read(self, model: Any, **hints: Any) -> str:
        return "replica"

    def db_for_write(self, model: Any, **hints: Any) -> str:
        return "default"

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool:
        return True

    def allow_migrate(self, db: str, app_label: str, model_name: str | None = None, **hints: Any) -> bool:
        return True


class OwnDatabaseRouter:
    """The MCP tables in a database of their own (``mcp``), the rest in ``default``."""

    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        return "mcp" if model._meta.app_label == "mcp_django" else None

    db_for_write = db_for_read

    def allow_migrate(self, db: str, app_label: str, model_name: str | None = None, **hints: Any) -> bool:
        return (db == "mcp") == (app_label == "mcp_django")


urlpatterns = [path("mcp", include("mcp_django.urls"))]


_tenant = threading.local()


class ThreadLocalTenantRouter:
    """A database per tenant, chosen for the request's thread by ``tenant_middleware``: every
    model, the MCP tables too, where the request's tenant is."""

    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        return getattr(_tenant, "alias", None)

    db_for_write = db_for_read

    def allow_migrate(self, db: str, app_label: str, model_name: str | None = None, **hints: Any) -> bool:
        return True


class SharedMCPTenantRouter(ThreadLocalTenantRouter):
    """The same, but for the MCP tables, which live in ``default`` whatever the thread."""

    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        return "default" if model._meta.app_label == "mcp_django" else super().db_for_read(model, **hints)

    db_for_write = db_for_read


def tenant_middleware(get_response: Any) -> Any:
    """The tenant of the Host (``a.localhost``: database ``tenant_a``), for this thread, and as
    ``request.tenant``."""

    def middleware(request: Any) -> Any:
        _tenant.alias = "tenant_" + request.get_host().split(".")[0]
        # Named as django-tenants names it: MCP keeps each tenant's callers apart by it.
        request.tenant = SimpleNamespace(schema_name=_tenant.alias)
        try:
            return get_response(request)
        finally:
            del _tenant.alias

    return middleware
