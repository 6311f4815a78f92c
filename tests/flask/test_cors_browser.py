"""A browser-based MCP client on another origin (a page's ``fetch``) against the example app
behind Flask-CORS, configured as README's "Browser clients (CORS)" says: headless Chromium
(see :mod:`tests.browser`), the page and the app on two loopback ports."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from flask_cors import CORS

from example_project.flask_app import create_app
from tests.browser import chromium
from tests.cors_browser import CLIENT, REFUSED, assert_client_worked, page_origin, run_in_browser


def test_a_page_on_an_allowed_origin_uses_both_eras_through_flask_cors(
    flask_live_server: Callable[..., Any], fast_config: dict[str, Any], tmp_path: Path
) -> None:
    """The browser's preflight (OPTIONS) was answered with the endpoint's JSON-RPC 405, which
    Flask-CORS only decorates: the browser refused every call, whatever the settings."""
    executable = chromium()
    with page_origin() as origin:
        app = create_app(
            {
                "MCP_DATABASE_URI": f"sqlite:///{tmp_path / 'mcp.sqlite3'}",
                "MCP_ALLOWED_ORIGINS": [origin],
                **fast_config,
            }
        )
        # Flask-CORS's default allow_headers lets the page send the Mcp-* headers it asks for.
        CORS(app, resources={r"/mcp.*": {"origins": [origin]}}, expose_headers=["mcp-session-id"])
        seen = run_in_browser(executable, origin, CLIENT, f"{flask_live_server(app).url}/mcp")

    assert_client_worked(seen)


def test_an_origin_the_extension_does_not_allow_is_refused_even_if_cors_allows_all(
    flask_live_server: Callable[..., Any], fast_config: dict[str, Any], tmp_path: Path, caplog: Any
) -> None:
    """Flask-CORS misconfigured to let any site read the answers: the endpoint's own Origin
    check (``MCP_ALLOWED_ORIGINS``) still refuses a page it does not list, preflight included."""
    executable = chromium()
    with page_origin() as origin:
        app = create_app({"MCP_DATABASE_URI": f"sqlite:///{tmp_path / 'mcp.sqlite3'}", **fast_config})
        CORS(app, resources={r"/mcp.*": {"origins": "*"}}, expose_headers=["mcp-session-id"])
        url = flask_live_server(app).url
        seen = run_in_browser(executable, origin, REFUSED, f"{url}/mcp")
    host = url.removeprefix("http://")

    # The preflight itself is refused (403, by the Origin check), so no POST is ever sent.
    assert seen == {"error": "TypeError: Failed to fetch"}, seen
    refusals = [r.getMessage() for r in caplog.records if r.name == "mcp_common.security"]
    assert refusals == [
        f"Invalid Origin header {origin!r} for Host {host!r}. You may need to add {origin!r} to MCP_ALLOWED_ORIGINS."
    ]
