"""A browser-based MCP client on another origin (a page's ``fetch``) against the example site
behind django-cors-headers, configured as README's "Browser clients (CORS)" says: headless
Chromium (see :mod:`tests.browser`), the page and the site on two loopback ports."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.browser import chromium
from tests.cors_browser import CLIENT, MCP_HEADERS, REFUSED, assert_client_worked, page_origin, run_in_browser

pytestmark = pytest.mark.django_db(transaction=True)


def with_cors_headers(settings: Any, **cors: Any) -> None:
    """django-cors-headers as README says: installed, its middleware right after MCPMiddleware."""
    settings.INSTALLED_APPS = [*settings.INSTALLED_APPS, "corsheaders"]
    middleware = list(settings.MIDDLEWARE)
    middleware.insert(
        middleware.index("mcp_django.middleware.MCPMiddleware") + 1, "corsheaders.middleware.CorsMiddleware"
    )
    settings.MIDDLEWARE = middleware
    for name, value in cors.items():
        setattr(settings, name, value)


def test_a_page_on_an_allowed_origin_uses_both_eras_through_django_cors_headers(
    settings: Any, serve: Callable[[], str]
) -> None:
    executable = chromium()
    from corsheaders.defaults import default_headers

    with page_origin() as origin:
        with_cors_headers(
            settings,
            CORS_ALLOWED_ORIGINS=[origin],
            CORS_ALLOW_HEADERS=[*default_headers, *MCP_HEADERS],
            CORS_EXPOSE_HEADERS=["mcp-session-id"],
            CORS_URLS_REGEX=r"^/mcp",
        )
        settings.MCP = {**settings.MCP, "ALLOWED_ORIGINS": [origin]}
        seen = run_in_browser(executable, origin, CLIENT, serve())

    assert_client_worked(seen)


def test_an_origin_the_package_does_not_allow_is_refused_even_if_cors_allows_all(
    settings: Any, serve: Callable[[], str]
) -> None:
    """django-cors-headers misconfigured to let any site read the answers: the endpoint's own
    Origin check (``ALLOWED_ORIGINS``) still refuses a page it does not list."""
    executable = chromium()
    with page_origin() as origin:
        with_cors_headers(settings, CORS_ALLOW_ALL_ORIGINS=True, CORS_EXPOSE_HEADERS=["mcp-session-id"])
        seen = run_in_browser(executable, origin, REFUSED, serve())

    assert seen["status"] == 403 and seen["session"] is None, seen
    assert seen["body"]["error"]["message"] == "Invalid Origin header"
