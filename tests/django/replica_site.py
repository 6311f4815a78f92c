"""Projects whose routers send the MCP tables' queries elsewhere.

One whose reads go to a replica: the Django docs' primary/replica router, the replica a second
database that has not caught up (it never receives the primary's writes). The MCP store must
read what it has just written, so all of its queries go where it writes. One that keeps the MCP
tables in a database of their own."""

from __future__ import annotations

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
