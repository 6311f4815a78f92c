from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.urls import include, path

from example_project.settings_common import SERVERS
from mcp_django.views import default_view


def home(request: HttpRequest) -> HttpResponse:
    links = "".join(f"<li><code>/mcp{suffix}</code></li>" for suffix in SERVERS)
    return HttpResponse(
        "<!doctype html><title>MCP for Django</title><h1>MCP for Django: example site</h1>"
        f"<p>MCP endpoints (Streamable HTTP):</p><ul>{links}</ul><p><a href='/admin/'>Admin</a></p>"
    )


urlpatterns = [
    path("", home),
    path("admin/", admin.site.urls),
    # settings.MCP["SERVER"] at exactly /mcp (no trailing slash: POSTs are not redirected).
    path("mcp", include("mcp_django.urls")),
    *[path(f"mcp{suffix}", default_view(server=server)) for suffix, server in SERVERS.items() if suffix],
]
