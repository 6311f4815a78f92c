"""``path("mcp", include("mcp_django.urls"))`` serves ``settings.MCP["SERVER"]`` at ``/mcp``.

The pattern is the empty string, so the URL is exactly the prefix: no trailing slash, because
the official client does not follow the 301 that ``APPEND_SLASH`` would send for a POST.
"""

from __future__ import annotations

from django.urls import path

from mcp_django.views import default_view

app_name = "mcp_django"

urlpatterns = [path("", default_view(), name="endpoint")]
