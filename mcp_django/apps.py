from __future__ import annotations

from django.apps import AppConfig


class MCPDjangoConfig(AppConfig):
    name = "mcp_django"
    label = "mcp_django"
    verbose_name = "MCP"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.utils.module_loading import autodiscover_modules

        from mcp_django import checks  # noqa: F401  (registers the system checks)

        # Apps register tools from their own ``mcp.py``, discovered the way ``admin.py`` is.
        autodiscover_modules("mcp")
