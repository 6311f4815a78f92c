from __future__ import annotations

import hmac
import json

from django.conf import settings
from django.contrib import admin
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import get_script_prefix, include, path, reverse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from example_project.django_site.shop.views import order_page
from example_project.settings_common import SERVERS
from mcp_django.views import default_view


def home(request: HttpRequest) -> HttpResponse:
    # Under the script prefix, where a reverse proxy serves the site under a path of its own.
    links = "".join(f"<li><code>{get_script_prefix()}mcp{suffix}</code></li>" for suffix in SERVERS)
    return HttpResponse(
        "<!doctype html><title>MCP for Django</title><h1>MCP for Django: example site</h1>"
        f"<p>MCP endpoints (Streamable HTTP):</p><ul>{links}</ul><p><a href='{reverse('admin:index')}'>Admin</a></p>"
    )


@csrf_exempt
@require_POST
def payment_webhook(request: HttpRequest) -> JsonResponse:
    """The payment provider reports a paid deposit: complete its URL-mode elicitation.

    ``{"elicitation_id": "deposit-17"}`` with ``Authorization: Bearer <PAYMENT_WEBHOOK_TOKEN>``.
    The MCP client that is waiting on it receives ``notifications/elicitation/complete``.
    """
    from mcp_django import complete_elicitation

    token = request.headers.get("Authorization", "").removeprefix("Bearer ")
    # As bytes: hmac.compare_digest raises on non-ASCII text, and the caller chose this one.
    if not hmac.compare_digest(token.encode(), settings.PAYMENT_WEBHOOK_TOKEN.encode()):
        return JsonResponse({"error": "unauthorized"}, status=401)
    try:
        elicitation_id = json.loads(request.body)["elicitation_id"]
    except RequestDataTooBig:  # over DATA_UPLOAD_MAX_MEMORY_SIZE, declared or chunked
        return JsonResponse({"error": "request body too large"}, status=413)
    except (ValueError, KeyError, TypeError, RecursionError):  # the last: a body nested too deep
        return JsonResponse({"error": 'expected {"elicitation_id": "..."}'}, status=400)
    if not isinstance(elicitation_id, str) or not elicitation_id:
        return JsonResponse({"error": "elicitation_id must be a non-empty string"}, status=400)
    return JsonResponse({"completed": complete_elicitation(elicitation_id)})


urlpatterns = [
    path("", home),
    path("payments/webhook", payment_webhook),
    path("orders/<str:number>", order_page),
    path("admin/", admin.site.urls),
    # settings.MCP["SERVER"] at exactly /mcp (no trailing slash: POSTs are not redirected).
    path("mcp", include("mcp_django.urls")),
    *[path(f"mcp{suffix}", default_view(server=server)) for suffix, server in SERVERS.items() if suffix],
]
