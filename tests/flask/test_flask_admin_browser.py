"""The Flask review panel in a real browser: headless Chromium (Debian's package, driven by
Playwright) against a live server, with a screenshot of each page (see ``tests/browser.py``)."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flask import Flask
from mcp.server import MCPServer
from sqlalchemy import update

from mcp_flask import MCP, get_state
from mcp_flask.admin import admin_blueprint
from mcp_flask.models import MCPElicitation
from tests.browser import chromium, screenshots
from tests.flask.conftest import LiveServer
from tests.flask.test_flask_admin import _form, _url_on_session


def in_chromium(width: int, steps: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
    """What ``steps(page)`` saw in a headless Chromium window ``width`` pixels wide. Playwright's
    sync API runs an event loop in the thread that drives it: a thread of its own."""
    executable = chromium()
    seen: dict[str, Any] = {}

    def drive() -> None:
        from playwright.sync_api import sync_playwright

        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=executable, args=["--no-sandbox"])
            try:
                seen.update(steps(browser.new_page(viewport={"width": width, "height": 900})))
            finally:
                browser.close()

    driver = threading.Thread(target=drive)
    driver.start()
    driver.join(120)
    assert not driver.is_alive(), "the browser did not finish in 120 s"
    return seen


STRICT_CSP = "default-src 'self'"
"""A shop's Content-Security-Policy (Flask-Talisman's default, say): no inline style or script."""


def panel(
    make_app: Callable[..., Flask], flask_live_server: Callable[[Flask], LiveServer], csp: str | None = None
) -> tuple[str, Any]:
    """The panel served on a live server (its app's pages under ``csp``, if given): its base
    URL, and the app's state."""
    app = make_app()
    MCP(app, server=MCPServer("Bistro"))
    app.register_blueprint(admin_blueprint(lambda: True), url_prefix="/mcp-admin")
    if csp is not None:

        @app.after_request
        def _policy(response: Any) -> Any:
            response.headers["Content-Security-Policy"] = csp
            return response

    return flask_live_server(app).url, get_state(app)


def browse(base: str, shots: Path, url_id: str, page: Any) -> dict[str, Any]:
    seen: dict[str, Any] = {}
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
    return seen


def test_staff_review_and_complete_questions_in_a_browser(
    make_app: Callable[..., Flask], flask_live_server: Callable[[Flask], LiveServer], tmp_path: Path
) -> None:
    shots = screenshots(tmp_path)
    base, state = panel(make_app, flask_live_server)
    store = state.store
    _form(store, "No table for 2 on 2025-12-25. Would you like to try another date?")
    _form(store, "Delete folder 'reports'?", status="declined", ago=30)
    url, _ = _url_on_session(store, "deposit-17", message="Pay the deposit for table 17")

    seen = in_chromium(1400, functools.partial(browse, base, shots, url.id))

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


LONG_URL = "https://pay.example.com/checkout?session=cs_live_" + "a1B2c3D4" * 60
LONG_ID = "cs_live_" + "Z9y8X7w6" * 30


def measure(base: str, shots: Path, url_id: str, page: Any) -> dict[str, Any]:
    """How wide each page lays out, and how wide the question page's label column is."""
    seen: dict[str, Any] = {"csp_refusals": []}
    page.on("console", lambda m: "Content Security Policy" in m.text and seen["csp_refusals"].append(m.text))
    for name, path in (("list", "/mcp-admin/"), ("detail", f"/mcp-admin/{url_id}/")):
        page.goto(f"{base}{path}")
        seen[f"{name}_width"] = page.evaluate("document.documentElement.scrollWidth")
        seen[f"{name}_text"] = page.inner_text("main")
        page.screenshot(path=str(shots / f"flask-admin-long-{name}.png"), full_page=True)
    seen["label_width"] = page.evaluate("document.querySelector('table.fields th').offsetWidth")
    return seen


LONG_TOOL = "sync_" + "inventory_" * 18 + "levels"
"""A generated tool name (an OpenAPI operation id, say): 200 characters, its column's most."""


def test_a_long_url_id_or_tool_name_wraps_inside_the_page(
    make_app: Callable[..., Flask], flask_live_server: Callable[[Flask], LiveServer], tmp_path: Path
) -> None:
    """A payment link with a long query string, a provider's long session id, a long generated
    tool name: the panel used to stretch past the window (the labels squeezed into a narrow
    column, the header stopping at the window's edge, each value scrolled into view sideways).
    They wrap instead, whole; and so under a Content-Security-Policy that refuses inline styles
    (the panel's style is a stylesheet of its own)."""
    shots = screenshots(tmp_path)
    base, state = panel(make_app, flask_live_server, csp=STRICT_CSP)
    url, _ = _url_on_session(state.store, LONG_ID, message="Pay the deposit for table 17")
    with state.engine.begin() as connection:
        connection.execute(
            update(MCPElicitation).where(MCPElicitation.id == url.id).values(url=LONG_URL, tool=LONG_TOOL)
        )

    seen = in_chromium(1280, functools.partial(measure, base, shots, url.id))
    assert seen["list_width"] <= 1280 and seen["detail_width"] <= 1280, seen
    assert seen["label_width"] >= 200, seen
    assert LONG_ID in seen["list_text"].replace("\n", "") and LONG_TOOL in seen["list_text"].replace("\n", "")
    assert LONG_URL in seen["detail_text"].replace("\n", "")
    assert seen["csp_refusals"] == []


def framed(base: str, shots: Path, url_id: str, page: Any) -> dict[str, Any]:
    """What another site that frames a question's page shows its visitor."""
    page.set_content(f'<iframe src="{base}/mcp-admin/{url_id}/" width="1200" height="800"></iframe>')
    page.screenshot(path=str(shots / "flask-admin-framed.png"))
    return {"buttons": page.frame_locator("iframe").locator("button").count()}


def test_another_site_cannot_frame_the_panel(
    make_app: Callable[..., Flask], flask_live_server: Callable[[Flask], LiveServer], tmp_path: Path
) -> None:
    """Clickjacking: a page of another site could frame the panel, invisibly, under a button of
    its own, and a member of staff who clicked it would mark a deposit paid (browsers that send
    the session cookie to a frame: Firefox, Safari; any browser for a site on a sibling
    subdomain). Django's admin has ``XFrameOptionsMiddleware``; a Flask app has nothing of the
    kind. The panel refuses to be framed."""
    shots = screenshots(tmp_path)
    base, state = panel(make_app, flask_live_server)
    url, _ = _url_on_session(state.store, "deposit-18", message="Pay the deposit for table 18")

    seen = in_chromium(1280, functools.partial(framed, base, shots, url.id))

    assert seen["buttons"] == 0


def open_blank(base: str, shots: Path, page: Any) -> dict[str, Any]:
    """Staff open each question of the list from its row."""
    page.goto(f"{base}/mcp-admin/")
    page.screenshot(path=str(shots / "flask-admin-blank-questions.png"), full_page=True)
    links = page.locator("td.q a")
    seen: dict[str, Any] = {"widths": [links.nth(i).bounding_box()["width"] for i in range(links.count())]}
    links.first.click(timeout=10_000)
    page.wait_for_url("**/mcp-admin/*/")
    seen["heading"] = page.inner_text("h1")
    return seen


def test_a_question_without_text_can_still_be_opened_from_the_list(
    make_app: Callable[..., Flask], flask_live_server: Callable[[Flask], LiveServer], tmp_path: Path
) -> None:
    """The question's text is the row's link to its page: a tool that asked with an empty or
    blank message (the SDK allows one) left a link of no width, and staff no way to open the
    question from the list, nor a heading on its page. Such a question reads as one without
    text."""
    shots = screenshots(tmp_path)
    base, state = panel(make_app, flask_live_server)
    _url_on_session(state.store, "deposit-blank", message="")
    _url_on_session(state.store, "deposit-spaces", message=" \n ")

    seen = in_chromium(1280, functools.partial(open_blank, base, shots))

    assert len(seen["widths"]) == 2 and min(seen["widths"]) > 40, seen
    assert seen["heading"] == "(no text)", seen


def back_after_logout(base: str, shots: Path, record_id: str, page: Any) -> dict[str, Any]:
    """A member of staff reads a question's answer, signs out, and the next person at the
    computer presses Back."""
    page.goto(f"{base}/mcp-admin/")
    page.goto(f"{base}/mcp-admin/{record_id}/")
    page.click("a:text('all elicitations')")
    page.wait_for_url(f"{base}/mcp-admin/")
    page.go_back()
    seen: dict[str, Any] = {"before": page.inner_text("body")}
    page.evaluate("location.href = '/logout'")
    page.wait_for_url(f"{base}/logout")
    page.go_back()
    page.wait_for_load_state()
    seen["after"] = page.inner_text("body")
    page.screenshot(path=str(shots / "flask-admin-back-after-logout.png"), full_page=True)
    return seen


def test_a_question_page_is_not_kept_for_the_back_button_after_sign_out(
    make_app: Callable[..., Flask], flask_live_server: Callable[[Flask], LiveServer], tmp_path: Path
) -> None:
    """The panel shows users' answers (a name, an address): its pages were cacheable, so after
    staff signed out the browser's Back button showed the page again from its cache, without
    asking the server. Django's admin pages are ``never_cache``; the panel's are not stored."""
    shots = screenshots(tmp_path)
    app = make_app()
    MCP(app, server=MCPServer("Bistro"))
    signed_in = {"yes": True}
    app.register_blueprint(admin_blueprint(lambda: signed_in["yes"]), url_prefix="/mcp-admin")

    @app.get("/logout")
    def logout() -> str:
        signed_in["yes"] = False
        return "Signed out."

    base = flask_live_server(app).url
    record = _form(get_state(app).store, "Where should we deliver?")
    with get_state(app).engine.begin() as connection:
        connection.execute(
            update(MCPElicitation)
            .where(MCPElicitation.id == record.id)
            .values(status="accepted", answer='{"address": "12 Rue des Lilas, Paris"}')
        )

    seen = in_chromium(1280, functools.partial(back_after_logout, base, shots, record.id))

    assert "12 Rue des Lilas" in seen["before"], seen
    assert "12 Rue des Lilas" not in seen["after"], seen
