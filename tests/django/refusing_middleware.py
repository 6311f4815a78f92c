"""A middleware of the site's own placed after ``MCPMiddleware``, as a rate limiter or an access
rule would be: it refuses or fails a request before any view runs, the way ``REFUSE`` says."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse

REFUSE: dict[str, str | None] = {"how": None}
"""``"deny"``: raise ``PermissionDenied`` (django-ratelimit's ``Ratelimited`` is one);
``"limit"``: answer 429 with ``Retry-After`` and a text body; ``"fail"``: raise an error."""


class RefusingMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> Any:
        how = REFUSE["how"]
        if how == "deny":
            raise PermissionDenied
        if how == "limit":
            return HttpResponse(
                "Slow down: 2 per minute", status=429, content_type="text/plain", headers={"Retry-After": "30"}
            )
        if how == "fail":
            raise RuntimeError("the rate limiter's cache is down")
        return self.get_response(request)
