"""The example's review pages, where staff complete URL elicitations, refuse to be framed."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from tests.conftest import LiveServer


@pytest.mark.parametrize(("framework", "paths"), [("django", ["/admin/login/", "/admin/"]), ("flask", ["/mcp-admin/"])])
def test_the_review_pages_may_not_be_framed_by_another_site(
    example_server: Callable[..., LiveServer], framework: str, paths: list[str]
) -> None:
    """Another site framing the page could lay its own button over the completion action
    (clickjacking: a deposit marked paid by a staff member's click)."""
    server = example_server(framework, "gunicorn", 2, "sqlite")
    for path in paths:
        response = httpx.get(server.base_url + path, timeout=10)
        assert response.status_code in (200, 302), (path, response.status_code)
        assert response.headers.get("X-Frame-Options") == "DENY", path
