"""Each tenant's site: the MCP endpoint, a payment webhook and the admin."""

from __future__ import annotations

import json

from django.contrib import admin
from django.http import HttpRequest, JsonResponse
from django.urls import include, path
from django.views.decorators.csrf import csrf_exempt


@csrf_exempt
def webhook(request: HttpRequest) -> JsonResponse:
    from mcp_django import complete_elicitation

    return JsonResponse({"completed": complete_elicitation(json.loads(request.body)["elicitation_id"])})


urlpatterns = [
    path("mcp", include("mcp_django.urls")),
    path("webhook", webhook),
    path("admin/", admin.site.urls),
]
