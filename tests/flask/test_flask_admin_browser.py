"""The Flask review panel in a real browser: headless Chromium (Debian's package, driven by
Playwright) against a live server, with a screenshot of each page (see ``tests/browser.py``)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flask import Flask
from mcp.server import MCPServer

from mcp_flask import MCP, get_state
from mcp_flask.admin import admin_blueprint
from tests.browser import chromium, screenshots
from tests.flask.conftest import LiveServer
from tests.flask.test_flask_admin import _form, _url_on_session


def browse(base: str, executable: str, shots: Path, url_id: str) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    seen: dict[str, Any] = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(f"{base}/mcp-admin/")
            seen["title"] = page.title()
            seen["rows"] = page.locator("tbody tr").count()
            seen["list_text"] = page.inner_text("main")
            page.screenshot(path=str(shots / "flask-admin-elicitations.png"), full_page=True)

            page.click("nav.filters a:text-is('pending')")
            page.wait_for_url("**status=pending**")
            seen["pending_rows"] = page.locator("tbody tr").count()
            page.screenshot(path=str(shots / "flask-admin-elicitations-pending.png"), full_page=True)

            page.click("a:text('Pay the deposit for table 17')")
            page.wait_for_url(f"**/mcp-admin/{url_id}/")
            seen["detail_text"] = page.inner_text("main")
            page.screenshot(path=str(shots / "flask-admin-elicitation-detail.png"), full_page=True)

            page.click("button:text('Mark completed')")
            page.wait_for_selector(".flash")
            seen["message"] = page.inner_text(".flash")
            seen["after_text"] = page.inner_text("main")
            page.screenshot(path=str(shots / "flask-admin-elicitation-completed.png"), full_page=True)
        finally:
            browser.close()
    return seen


def test_staff_review_and_complete_questions_in_a_browser(
    make_app: Callable[..., Flask], flask_live_server: Callable[[Flask], LiveServer], tmp_path: Path
) -> None:
    executable = chromium()
    shots = screenshots(tmp_path)
    app = make_app()
    MCP(app, server=MCPServer("Bistro"))
    app.register_blueprint(admin_blueprint(lambda: True), url_prefix="/mcp-admin")
    server = flask_live_server(app)
    store = get_state(app).store
    _form(store, "No table for 2 on 2025-12-25. Would you like to try another date?")
    _form(store, "Delete folder 'reports'?", status="declined", ago=30)
    url, _ = _url_on_session(store, "deposit-17", message="Pay the deposit for table 17")

    seen: dict[str, Any] = {}
    # Playwright's sync API runs an event loop in the thread that drives it: a thread of its own.
    driver = threading.Thread(target=lambda: seen.update(browse(server.url, executable, shots, url.id)))
    driver.start()
    driver.join(120)
    assert not driver.is_alive(), "the browser did not finish in 120 s"

    assert seen["title"] == "Elicitations · MCP elicitations"
    assert seen["rows"] == 3
    for text in (
        "No table for 2 on 2025-12-25. Would you like to try another date?",
        "Pay the deposit for table 17",
        "delete_folder",
        "pay_deposit",
        "deposit-17",
        "declined",
    ):
        assert text in seen["list_text"], text
    assert seen["pending_rows"] == 2
    assert "https://pay.example.com/1" in seen["detail_text"]
    assert "1 elicitation(s) completed." in seen["message"]
    assert "Mark completed" not in seen["after_text"]
    assert store.get_elicitation(url.id).status == "completed"  # type: ignore[union-attr]
    for name in ("elicitations", "elicitations-pending", "elicitation-detail", "elicitation-completed"):
        assert (shots / f"flask-admin-{name}.png").stat().st_size > 10_000, name
