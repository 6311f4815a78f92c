"""Staff review questions in the Django admin, in a real browser: headless Chromium (Debian's
package, driven by Playwright) against a live server, logging in through the login form as a
person would, with a screenshot of each page.

The screenshots go to ``MCP_SCREENSHOTS`` when it is set (``scripts/test.sh`` keeps them in
``.cache/screenshots``), else to the test's temporary folder.
"""

from __future__ import annotations

import contextlib
import re
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from mcp_common.elicitation import new_record
from mcp_common.store import RequestStateRecord, SessionRecord
from mcp_django.models import MCPElicitation
from mcp_django.store import DjangoStore
from tests.browser import chromium, screenshots

pytestmark = pytest.mark.django_db(transaction=True)

PASSWORD = "pw-for-browser-tests-only"


def questions(store: DjangoStore) -> dict[str, str]:
    """A pending form question, a pending URL question in a legacy session (both asked of the
    user ``ada``), an answered one."""
    now = time.time()
    principal = f"django-user:{User.objects.create_user('ada').pk}"
    session_id = uuid.uuid4().hex
    store.create_session(SessionRecord(session_id, "2025-11-25", "{}", None, "Bistro", now, now))
    form = new_record(
        server_name="Bistro",
        tool="book_table",
        params={
            "mode": "form",
            "message": "No table for 2 on 2025-12-25. Would you like to try another date?",
            "requestedSchema": {"type": "object", "properties": {"alternative_date": {"type": "string"}}},
        },
        request_key="date",
        principal=principal,
        expires=now + 600,
        state_id=uuid.uuid4().hex,
    )
    url = new_record(
        server_name="Bistro",
        tool="pay_deposit",
        params={
            "mode": "url",
            "message": "Pay the deposit for table 17",
            "url": "https://pay.example.com/deposit-17",
            "elicitationId": "deposit-17",
        },
        request_key="srv-1",
        principal=principal,
        expires=now + 600,
        session_id=session_id,
        owner="host:1:x",
        stream_key="s1",
        call_id="5",
    )
    answered = new_record(
        server_name="Files",
        tool="delete_folder",
        params={"mode": "form", "message": "Delete folder 'reports'?", "requestedSchema": {"type": "object"}},
        request_key="ok",
        principal=None,
        expires=now + 600,
        state_id=uuid.uuid4().hex,
    )
    for record in (form, answered):
        assert record.state_id is not None and record.tool is not None
        state = RequestStateRecord(
            record.state_id, record.server_name, "tools/call", record.tool, "d", None, "v1.x", now, now + 600
        )
        store.save_request_state(state, [record])
    store.create_pending(session_id, "srv-1", "elicitation/create", "{}", url)
    MCPElicitation.objects.filter(id=answered.id).update(status="declined")
    return {"form": form.id, "url": url.id, "answered": answered.id}


def browse(base: str, executable: str, shots: Path, ids: dict[str, str]) -> dict[str, Any]:
    """What a member of staff does and sees; run in its own thread (Playwright's sync API keeps
    an event loop in the thread that drives it, where Django would refuse ORM calls)."""
    from playwright.sync_api import sync_playwright

    seen: dict[str, Any] = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(f"{base}/admin/mcp_django/mcpelicitation/")
            seen["login_url"] = page.url
            page.fill("#id_username", "staff")
            page.fill("#id_password", PASSWORD)
            page.click("input[type=submit]")
            page.wait_for_url("**/admin/mcp_django/mcpelicitation/")
            seen["list_title"] = page.title()
            seen["list_rows"] = page.locator("#result_list tbody tr").count()
            seen["list_text"] = page.inner_text("#result_list")
            seen["filters"] = page.inner_text("#changelist-filter")
            page.screenshot(path=str(shots / "admin-elicitations.png"), full_page=True)

            page.click("#changelist-filter a:text-is('Pending')")
            page.wait_for_url("**status__exact=pending**")
            seen["pending_rows"] = page.locator("#result_list tbody tr").count()
            page.screenshot(path=str(shots / "admin-elicitations-pending.png"), full_page=True)

            page.goto(f"{base}/admin/mcp_django/mcpelicitation/{ids['form']}/change/")
            seen["detail_text"] = page.inner_text("#content")
            seen["detail_has_save"] = page.locator("input[name=_save]").count()
            page.screenshot(path=str(shots / "admin-elicitation-detail.png"), full_page=True)

            page.goto(f"{base}/admin/mcp_django/mcpelicitation/")
            page.check(f"input[name=_selected_action][value='{ids['url']}']")
            page.select_option("select[name=action]", "complete_selected")
            page.click("button[name=index]")
            page.wait_for_selector("ul.messagelist")
            seen["message"] = page.inner_text("ul.messagelist")
            page.screenshot(path=str(shots / "admin-elicitation-completed.png"), full_page=True)
        finally:
            browser.close()
    return seen


def test_staff_review_and_complete_questions_in_a_browser(live_server: Any, tmp_path: Path) -> None:
    executable = chromium()
    shots = screenshots(tmp_path)
    store = DjangoStore()
    ids = questions(store)
    User.objects.create_superuser("staff", "staff@example.com", PASSWORD)

    with ThreadPoolExecutor(1) as pool:
        seen = pool.submit(browse, live_server.url, executable, shots, ids).result(timeout=120)

    # Not logged in: the admin sent the browser to its login form first.
    assert "/admin/login/" in seen["login_url"]
    assert seen["list_title"].startswith("Select MCP elicitation to view")
    assert seen["list_rows"] == 3
    # Each row shows the question as asked (long ones cut at 80 characters).
    assert "No table for 2 on 2025-12-25. Would you like to try another date?" in seen["list_text"]
    assert "Pay the deposit for table 17" in seen["list_text"]
    for text in ("book_table", "pay_deposit", "delete_folder", "deposit-17", "Pending", "Declined"):
        assert text in seen["list_text"], text
    for text in ("By status", "By mode", "By server name"):
        assert text in seen["filters"], text
    assert seen["pending_rows"] == 2
    # The detail page shows the question as asked, read-only.
    assert "No table for 2 on 2025-12-25. Would you like to try another date?" in seen["detail_text"]
    assert "alternative_date" in seen["detail_text"]
    assert re.search(r"User:?\s+ada\n", seen["detail_text"]), seen["detail_text"]  # named, as in the list
    assert seen["detail_has_save"] == 0
    assert "1 elicitation(s) completed." in seen["message"]
    assert store.get_elicitation(ids["url"]).status == "completed"  # type: ignore[union-attr]
    assert store.get_elicitation(ids["form"]).status == "pending"  # type: ignore[union-attr]
    for name in ("admin-elicitations", "admin-elicitations-pending", "admin-elicitation-detail"):
        assert (shots / f"{name}.png").stat().st_size > 10_000, name


LONG_URL = "https://pay.example.com/checkout?session=cs_live_" + "a1B2c3D4" * 60
LONG_ID = "cs_live_" + "Z9y8X7w6" * 30


STRICT_CSP = "default-src 'self'"
"""A shop's Content-Security-Policy (Django 6's ``SECURE_CSP`` with ``CSP.SELF``, say): no
inline style or script. Django's admin pages keep to it."""


@contextlib.contextmanager
def signed_in_page(base: str, executable: str, session_cookie: str, width: int) -> Iterator[Any]:
    """A page of a Chromium window ``width`` pixels wide, signed in to the admin, whose
    responses carry :data:`STRICT_CSP`; what the browser refused under it is in the page's
    ``csp_refusals``."""
    from playwright.sync_api import sync_playwright

    def with_csp(route: Any) -> None:
        response = route.fetch()
        route.fulfill(response=response, headers={**response.headers, "content-security-policy": STRICT_CSP})

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        try:
            context = browser.new_context(viewport={"width": width, "height": 900})
            context.add_cookies([{"name": "sessionid", "value": session_cookie, "url": base}])
            context.route("**/*", with_csp)
            page = context.new_page()
            page.csp_refusals = []
            page.on(
                "console",
                lambda message: "Content Security Policy" in message.text and page.csp_refusals.append(message.text),
            )
            yield page
        finally:
            browser.close()


def measure(base: str, executable: str, shots: Path, session_cookie: str, record_id: str) -> dict[str, Any]:
    """How wide a question's page lays out, and which of its values run past the edge of their
    row (which cuts them off)."""
    with signed_in_page(base, executable, session_cookie, 1280) as page:
        page.goto(f"{base}/admin/mcp_django/mcpelicitation/{record_id}/change/")
        page.screenshot(path=str(shots / "admin-elicitation-long-url.png"), full_page=True)
        return {
            "csp_refusals": page.csp_refusals,
            "detail_width": page.evaluate("document.documentElement.scrollWidth"),
            "overflowing": page.eval_on_selector_all(
                "div.form-row",
                """rows => rows.filter(row => {
                    const value = row.querySelector('div.readonly');
                    return value && value.getBoundingClientRect().right > row.getBoundingClientRect().right;
                }).map(row => row.className)""",
            ),
        }


def test_a_long_url_or_id_is_shown_whole_on_the_question_page(live_server: Any, tmp_path: Path) -> None:
    """A payment link with a long query string, a provider's long session id: the question's
    page grew past the window (its heading, the row's name, holds the id), each read-only value
    ran past its row, which cut it off, so staff could not read the end of the link they were to
    check. They wrap instead."""
    executable = chromium()
    shots = screenshots(tmp_path)
    store = DjangoStore()
    ids = questions(store)
    MCPElicitation.objects.filter(id=ids["url"]).update(url=LONG_URL, elicitation_id=LONG_ID)
    client = Client()
    client.force_login(User.objects.create_superuser("staff", "staff@example.com", PASSWORD))

    with ThreadPoolExecutor(1) as pool:
        seen = pool.submit(
            measure, live_server.url, executable, shots, client.cookies["sessionid"].value, ids["url"]
        ).result(timeout=120)

    assert seen["detail_width"] <= 1280, seen
    assert seen["overflowing"] == [], seen
    assert seen["csp_refusals"] == []  # its style is a static file: it applies under a strict CSP


def measure_list(base: str, executable: str, shots: Path, session_cookie: str) -> dict[str, Any]:
    """How wide the list of questions lays out inside its scrolling box."""
    with signed_in_page(base, executable, session_cookie, 1400) as page:
        page.goto(f"{base}/admin/mcp_django/mcpelicitation/")
        page.screenshot(path=str(shots / "admin-elicitations-long-id.png"), full_page=True)
        box = "document.querySelector('.results')"
        return {
            "csp_refusals": page.csp_refusals,
            "results": page.evaluate(f"({{scroll: {box}.scrollWidth, client: {box}.clientWidth}})"),
            "list_text": page.inner_text("#result_list"),
        }


LONG_TOOL = "sync_" + "inventory_" * 18 + "levels"
"""A generated tool name (an OpenAPI operation id, say): 200 characters, its column's most."""
UNBROKEN = "Confirm:" + "x" * 200
"""A question with no space in its first 80 characters (a pasted token, a path)."""


def test_a_long_elicitation_id_principal_tool_or_question_wraps_inside_the_list(
    live_server: Any, tmp_path: Path
) -> None:
    """A provider's long session id as the elicitation id: its column stretched the list to
    several times the width of its box, and the id and the asker (the next column) were out of
    sight, a long sideways scroll away. So did a long generated tool name, and a question with
    no space to break at. They wrap in their columns instead."""
    executable = chromium()
    shots = screenshots(tmp_path)
    store = DjangoStore()
    ids = questions(store)
    MCPElicitation.objects.filter(id=ids["url"]).update(elicitation_id=LONG_ID, principal="user:" + "ab12" * 40)
    MCPElicitation.objects.filter(id=ids["form"]).update(tool=LONG_TOOL, message=UNBROKEN)
    client = Client()
    client.force_login(User.objects.create_superuser("staff", "staff@example.com", PASSWORD))

    with ThreadPoolExecutor(1) as pool:
        cookie = client.cookies["sessionid"].value
        seen = pool.submit(measure_list, live_server.url, executable, shots, cookie).result(timeout=120)

    assert seen["results"]["scroll"] <= seen["results"]["client"], seen["results"]
    assert seen["csp_refusals"] == []
    shown = seen["list_text"].replace("\n", "")
    assert LONG_ID in shown and LONG_TOOL in shown and UNBROKEN[:79] in shown
