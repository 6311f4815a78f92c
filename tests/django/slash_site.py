"""A URLconf that mounts the MCP endpoint the usual Django way, with a trailing slash."""

from __future__ import annotations

from django.http import HttpResponse
from django.urls import include, path

urlpatterns = [
    path("mcp/", include("mcp_django.urls")),
    path("shop/", include("mcp_django.urls")),
    path("shop", lambda request: HttpResponse("the shop's own page")),
]
