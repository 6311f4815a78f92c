"""The Flask review panel (``mcp_flask.admin``): staff list, filter, search and read the
questions tools asked, and complete URL-mode elicitations; nobody else gets in."""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import flask
import pytest
import werkzeug.utils
from flask import Flask
from mcp.server import MCPServer
from sqlalchemy import event, text

from mcp_common.elicitation import new_record
from mcp_common.store import GET_STREAM, RequestStateRecord, SessionRecord
from mcp_flask import MCP, get_state, migrate
from mcp_flask.admin import PAGE_SIZE, admin_blueprint
from tests.flask.conftest import POSTGRES_URL


@pytest.fixture
def staff() -> dict[str, Any]:
    """What the permission check answers (tests flip it)."""
    return {"allowed": True}


@pytest.fixture
def app(make_app: Callable[..., Flask], staff: dict[str, Any]) -> Flask:
    app = make_app()
    MCP(app, server=MCPServer("Shop"))
    migrate(app)
    app.register_blueprint(admin_blueprint(lambda: staff["allowed"]), url_prefix="/mcp-admin")
    return app


def _form(store: Any, message: str, *, state_id: str | None = None, status: str = "pending", ago: float = 0) -> Any:
    now = time.time() - ago
    state_id = state_id or uuid.uuid4().hex
    record = new_record(
        server_name="Shop",
        tool="delete_folder",
        params={
            "mode": "form",
            "message": message,
            "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}},
        },
        request_key="ask",
        principal="user:ada",
        expires=now + 600,
        state_id=state_id,
    )
    record = record.__class__(**{**record.__dict__, "status": status, "created": now, "updated": now})
    state = RequestStateRecord(
        state_id, "Shop", "tools/call", "delete_folder", "d", "user:ada", "sealed", now, now + 600
    )
    store.save_request_state(state, [record])
    return record


def _url_on_session(
    store: Any,
    elicitation_id: str,
    message: str = "Pay the deposit",
    principal: str | None = None,
    expires_in: float = 600,
) -> tuple[Any, str]:
    """A legacy session's pending URL elicitation (a deposit to pay)."""
    sid = uuid.uuid4().hex
    now = time.time()
    store.create_session(SessionRecord(sid, "2025-11-25", "{}", None, "Shop", now, now))
    record = new_record(
        server_name="Shop",
        tool="pay_deposit",
        params={
            "mode": "url",
            "message": message,
            "url": "https://pay.example.com/1",
            "elicitationId": elicitation_id,
        },
        request_key="srv-1",
        principal=principal,
        expires=now + expires_in,
        session_id=sid,
        owner="host:1:x",
        stream_key="s1",
        call_id="5",
    )
    store.create_pending(sid, "srv-1", "elicitation/create", "{}", record)
    return record, sid


def _store(app: Flask) -> Any:
    return get_state(app).store


def test_staff_see_the_questions_newest_first_and_others_are_refused(app: Flask, staff: dict[str, Any]) -> None:
    store = _store(app)
    _form(store, "Delete /tmp/old? It has 2 files.", ago=60)
    _form(store, "Delete /tmp/new? It has 9 files.")
    client = app.test_client()
    page = client.get("/mcp-admin/")
    assert page.status_code == 200
    html = page.get_data(as_text=True)
    assert "2 elicitations" in html
    assert html.index("/tmp/new") < html.index("/tmp/old")
    assert "user:ada" in html and "delete_folder" in html

    staff["allowed"] = False
    assert client.get("/mcp-admin/").status_code == 403
    record = _form(store, "Another?")
    assert client.get(f"/mcp-admin/{record.id}/").status_code == 403
    assert client.post(f"/mcp-admin/{record.id}/complete").status_code == 403


@pytest.mark.parametrize("redirect", [flask.redirect, werkzeug.utils.redirect], ids=["flask", "werkzeug"])
def test_a_permission_check_may_answer_with_its_own_response(
    make_app: Callable[..., Flask], redirect: Callable[[str], Any]
) -> None:
    """Any response, Werkzeug's own too (``werkzeug.utils.redirect``, which Flask's builds on):
    it was answered 403 instead, the staff member never sent to the login page."""
    app = make_app()
    MCP(app, server=MCPServer("Shop"))
    migrate(app)
    app.register_blueprint(admin_blueprint(lambda: redirect("/login")), url_prefix="/mcp-admin")
    answer = app.test_client().get("/mcp-admin/")
    assert answer.status_code == 302 and answer.headers["Location"] == "/login"


def test_a_blueprint_without_a_permission_check_is_refused() -> None:
    with pytest.raises(TypeError, match="needs a permission check"):
        admin_blueprint(None)  # type: ignore[arg-type]


@pytest.mark.parametrize("csrf_set_up", ["before the panel", "after the panel"])
def test_flask_wtf_csrf_protection_leaves_the_panel_to_its_own_token_on_every_app(
    make_app: Callable[..., Flask], csrf_set_up: str
) -> None:
    """Flask-WTF's ``CSRFProtect`` would refuse the completion form (it carries the panel's own
    token): the panel is exempted on every app it is registered on, as when one blueprint
    serves the apps an application factory builds, and whether the factory sets up
    ``CSRFProtect`` before or after it registers the panel."""
    from flask_wtf.csrf import CSRFProtect

    blueprint = admin_blueprint(lambda: True)
    apps = []
    for _ in range(2):
        app = make_app()
        csrf = CSRFProtect()
        if csrf_set_up == "before the panel":
            csrf.init_app(app)
        app.add_url_rule("/profile", "profile", lambda: "saved", methods=["POST"])
        MCP(app, server=MCPServer("Shop"))
        migrate(app)
        app.register_blueprint(blueprint, url_prefix="/mcp-admin")
        if csrf_set_up == "after the panel":
            csrf.init_app(app)
        apps.append(app)
    try:
        for number, app in enumerate(apps):
            store = _store(app)
            record, _ = _url_on_session(store, f"deposit-csrf-{number}")
            client = app.test_client()
            page = client.get(f"/mcp-admin/{record.id}/").get_data(as_text=True)
            token = re.search(r'name="token" value="([^"]+)"', page).group(1)  # type: ignore[union-attr]
            done = client.post(f"/mcp-admin/{record.id}/complete", data={"token": token})
            assert done.status_code == 303, (number, done.get_data(as_text=True))
            assert store.get_elicitation(record.id).status == "completed"
            # Flask-WTF still guards the app's own forms.
            assert client.post("/profile").status_code == 400
    finally:
        for app in apps:
            get_state(app).close()


def test_filters_search_and_pages(app: Flask) -> None:
    store = _store(app)
    _form(store, "Keep the pending one?")
    _form(store, "An answered one", status="accepted")
    _url_on_session(store, "deposit-7")
    client = app.test_client()

    pending = client.get("/mcp-admin/?status=pending").get_data(as_text=True)
    assert "Keep the pending one?" in pending and "Pay the deposit" in pending
    assert "An answered one" not in pending

    url_only = client.get("/mcp-admin/?status=pending&mode=url").get_data(as_text=True)
    assert "Pay the deposit" in url_only and "Keep the pending one?" not in url_only

    found = client.get("/mcp-admin/?q=deposit-7").get_data(as_text=True)
    assert "1 elicitation<" in found and "Pay the deposit" in found
    # A search is literal: % and _ match themselves, not anything.
    assert "No elicitation matches." in client.get("/mcp-admin/?q=%25").get_data(as_text=True)

    for n in range(PAGE_SIZE):
        _form(store, f"Bulk question {n}", ago=3600 + n)
    first = client.get("/mcp-admin/").get_data(as_text=True)
    assert f"{PAGE_SIZE + 3} elicitations" in first and "Page 1 of 2" in first
    second = client.get("/mcp-admin/?page=2").get_data(as_text=True)
    assert "Page 2 of 2" in second and "Bulk question 49" in second and "Bulk question 0<" not in second

    assert client.get("/mcp-admin/?status=lost").status_code == 400
    assert client.get("/mcp-admin/?mode=sms").status_code == 400
    assert client.get("/mcp-admin/?page=two").status_code == 400


def test_a_question_page_shows_the_schema_and_escapes_what_tools_wrote(app: Flask) -> None:
    store = _store(app)
    record = _form(store, "<script>alert('x')</script> Delete it?")
    client = app.test_client()
    html = client.get(f"/mcp-admin/{record.id}/").get_data(as_text=True)
    assert "<script>alert" not in html and "&lt;script&gt;alert" in html
    # The requested schema, indented (and escaped like everything else).
    assert "&#34;ok&#34;: {\n      &#34;type&#34;: &#34;boolean&#34;" in html
    assert "Mark completed" not in html  # a form question is answered by its user, not here
    assert client.get("/mcp-admin/no-such-question/").status_code == 404


@pytest.mark.parametrize("setting", ["jinja_options", "jinja_env.autoescape"])
def test_the_panel_escapes_what_tools_and_clients_wrote_whatever_the_apps_jinja_settings(
    make_app: Callable[..., Flask], setting: str
) -> None:
    """An app whose own Jinja templates are not HTML turns autoescaping off: the panel's pages,
    rendered in the app's environment, then sent a question's text as markup, and a script a
    tool or a client put in it ran in the browser of the staff member who opened the list,
    with the power to complete what they may complete. The panel escapes on its own."""
    app = make_app()
    if setting == "jinja_options":
        app.jinja_options = {"autoescape": False}
    else:
        app.jinja_env.autoescape = False
    MCP(app, server=MCPServer("Shop"))
    migrate(app)
    app.register_blueprint(admin_blueprint(lambda: True), url_prefix="/mcp-admin")
    payload = "<img src=x onerror=alert(1)>"
    record, _ = _url_on_session(_store(app), "deposit-8", message=f"Pay {payload}", principal=f"user:{payload}")
    client = app.test_client()
    for path in ("/mcp-admin/", f"/mcp-admin/{record.id}/", "/mcp-admin/?q=" + payload):
        html = client.get(path).get_data(as_text=True)
        assert "<img" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html, path


def test_staff_complete_a_url_elicitation_and_the_client_is_notified(app: Flask) -> None:
    store = _store(app)
    record, sid = _url_on_session(store, "deposit-9")
    client = app.test_client()
    page = client.get(f"/mcp-admin/{record.id}/").get_data(as_text=True)
    assert "Mark completed" in page
    token = re.search(r'name="token" value="([^"]+)"', page).group(1)  # type: ignore[union-attr]

    # Without the page's token (a forged cross-site POST), nothing happens.
    assert client.post(f"/mcp-admin/{record.id}/complete", data={"token": "forged"}).status_code == 400
    assert store.get_elicitation(record.id).status == "pending"

    done = client.post(f"/mcp-admin/{record.id}/complete", data={"token": token})
    assert done.status_code == 303 and done.headers["Location"].endswith(f"/mcp-admin/{record.id}/")
    assert store.get_elicitation(record.id).status == "completed"
    events = [e.message for e in store.events_after(sid, GET_STREAM, 0)]
    assert any("notifications/elicitation/complete" in m and "deposit-9" in m for m in events)
    assert "1 elicitation(s) completed." in client.get(done.headers["Location"]).get_data(as_text=True)

    # Again: idempotent, and said so.
    again = client.post(f"/mcp-admin/{record.id}/complete", data={"token": token}, follow_redirects=True)
    assert "Nothing to complete: this is a url elicitation, completed." in again.get_data(as_text=True)
    assert len([e for e in store.events_after(sid, GET_STREAM, 0) if "deposit-9" in e.message]) == 1


def test_a_url_elicitation_past_its_expiry_is_not_offered_nor_completed(app: Flask) -> None:
    """Still pending after its expiry, before the heartbeat marks it expired: the panel treats
    it as expired (no button; a POST from a page loaded in time completes nothing, notifies
    nobody, and says why)."""
    store = _store(app)
    record, sid = _url_on_session(store, "deposit-late", expires_in=-1)
    client = app.test_client()
    page = client.get(f"/mcp-admin/{record.id}/").get_data(as_text=True)
    assert "Mark completed" not in page
    with client.session_transaction() as session:
        token = session["mcp_admin_token"]
    done = client.post(f"/mcp-admin/{record.id}/complete", data={"token": token}, follow_redirects=True)
    assert done.status_code == 200
    assert "Not completed: this elicitation had expired at " in done.get_data(as_text=True)
    assert store.get_elicitation(record.id).status != "completed"
    assert store.events_after(sid, GET_STREAM, 0) == []
    # Once the heartbeat has marked it, the same answer.
    assert store.expire_elicitations(time.time()) == 1
    again = client.post(f"/mcp-admin/{record.id}/complete", data={"token": token}, follow_redirects=True)
    assert "Not completed: this elicitation had expired." in again.get_data(as_text=True)
    assert store.events_after(sid, GET_STREAM, 0) == []


def test_a_forged_token_of_any_text_is_refused_with_400(app: Flask) -> None:
    """hmac.compare_digest raises on non-ASCII text: such a token is refused like any other
    wrong one, not answered with a 500 page."""
    record, _ = _url_on_session(_store(app), "deposit-10")
    client = app.test_client()
    client.get(f"/mcp-admin/{record.id}/")  # the session now holds a token
    answer = client.post(f"/mcp-admin/{record.id}/complete", data={"token": "d\u00e9p\u00f4t"})
    assert answer.status_code == 400
    assert _store(app).get_elicitation(record.id).status == "pending"


def test_completing_a_question_leaves_other_users_questions_with_the_same_id_alone(app: Flask) -> None:
    """Staff complete the question whose page they read: another user asked under the same id
    (a tool's fixed id, a shared booking number) has not paid because this one did, and their
    resolver's ``elicitation_completed`` must not say so."""
    store = _store(app)
    ada, ada_sid = _url_on_session(store, "deposit-11", principal="user:ada")
    bob, bob_sid = _url_on_session(store, "deposit-11", principal="user:bob")
    client = app.test_client()
    page = client.get(f"/mcp-admin/{ada.id}/").get_data(as_text=True)
    token = re.search(r'name="token" value="([^"]+)"', page).group(1)  # type: ignore[union-attr]
    done = client.post(f"/mcp-admin/{ada.id}/complete", data={"token": token}, follow_redirects=True)
    assert "1 elicitation(s) completed." in done.get_data(as_text=True)
    assert store.get_elicitation(ada.id).status == "completed"
    assert store.get_elicitation(bob.id).status == "pending"
    assert [e for e in store.events_after(bob_sid, GET_STREAM, 0) if "deposit-11" in e.message] == []
    assert [e for e in store.events_after(ada_sid, GET_STREAM, 0) if "deposit-11" in e.message]


def test_a_page_past_the_end_shows_the_last_page_not_a_500(app: Flask) -> None:
    """A page number too large for the database's OFFSET (a hand-edited URL) is not a crash."""
    _form(_store(app), "The only question")
    client = app.test_client()
    for page in ("3", "9" * 30):
        answer = client.get(f"/mcp-admin/?page={page}")
        assert answer.status_code == 200
        html = answer.get_data(as_text=True)
        assert "Page 1 of 1" in html and "The only question" in html


def test_a_nul_in_the_search_or_the_address_is_not_a_500(
    make_app: Callable[..., Flask], backend: tuple[str, dict[str, Any]]
) -> None:
    """PostgreSQL text cannot hold NUL: such a search matches nothing, such a question is not
    found, on every database (the driver would refuse the statement)."""
    uri, options = backend
    app = make_app(MCP_DATABASE_URI=uri, MCP_ENGINE_OPTIONS=options)
    MCP(app, server=MCPServer("Shop"))
    migrate(app)
    app.register_blueprint(admin_blueprint(lambda: True), url_prefix="/mcp-admin")
    client = app.test_client()
    try:
        assert "No elicitation matches." in client.get("/mcp-admin/?q=a%00").get_data(as_text=True)
        assert client.get("/mcp-admin/a%00/").status_code == 404
        with client.session_transaction() as session:
            session["mcp_admin_token"] = "t"
        assert client.post("/mcp-admin/a%00/complete", data={"token": "t"}).status_code == 404
    finally:
        get_state(app).close()  # the heartbeat too: it would outlive the test on a disposed engine


def test_the_panel_on_an_in_memory_database_waits_for_the_stores_write(make_app: Callable[..., Flask]) -> None:
    """An app's tests on ``sqlite://`` (one connection shared by every thread): a page of the
    panel read while a store call was writing on another thread (the heartbeat, a call being
    served) ran inside that call's transaction, and its end rolled the call's write back: the
    event a client waits for was lost without an error. The panel's reads take their turn."""
    app = make_app(MCP_DATABASE_URI="sqlite://")
    MCP(app, server=MCPServer("Shop"))
    migrate(app)
    app.register_blueprint(admin_blueprint(lambda: True), url_prefix="/mcp-admin")
    state = get_state(app)
    store = state.store
    now = time.time()
    session = SessionRecord(uuid.uuid4().hex, "2025-11-25", "{}", None, "Shop", now, now)
    store.create_session(session)
    writer = threading.current_thread()
    written, go = threading.Event(), threading.Event()

    def pause_after_the_insert(*args: Any) -> None:
        if threading.current_thread() is writer and "INSERT INTO mcp_event" in args[2]:
            written.set()
            assert go.wait(10)

    event.listen(state.engine, "after_cursor_execute", pause_after_the_insert)
    pages: list[int] = []

    def read_the_panel() -> None:
        assert written.wait(10)
        pages.append(app.test_client().get("/mcp-admin/").status_code)

    reader = threading.Thread(target=read_the_panel)

    def write() -> None:
        store.append_event(session.session_id, GET_STREAM, '{"jsonrpc": "2.0", "method": "ping"}')

    writer = threading.Thread(target=write)
    reader.start()
    writer.start()
    assert written.wait(10)
    time.sleep(0.3)  # the page is read now, or waits for the write
    go.set()
    writer.join(10)
    reader.join(10)
    event.remove(state.engine, "after_cursor_execute", pause_after_the_insert)
    assert pages == [200]
    assert [e.message for e in store.events_after(session.session_id, GET_STREAM, 0)] == [
        '{"jsonrpc": "2.0", "method": "ping"}'
    ]
    state.close()


@pytest.mark.postgres
def test_times_are_shown_in_utc_whatever_the_databases_time_zone(
    make_app: Callable[..., Flask], postgres_schema: dict[str, Any]
) -> None:
    """PostgreSQL answers a ``timestamptz`` in the connection's time zone, the server's
    ``TimeZone`` unless set (which ``initdb`` takes from the host): the panel, whose columns say
    UTC, showed New York's wall time as UTC, five hours off."""
    options = postgres_schema["connect_args"]["options"] + " -ctimezone=America/New_York"
    app = make_app(MCP_DATABASE_URI=POSTGRES_URL, MCP_ENGINE_OPTIONS={"connect_args": {"options": options}})
    MCP(app, server=MCPServer("Shop"))
    migrate(app)
    app.register_blueprint(admin_blueprint(lambda: True), url_prefix="/mcp-admin")
    state = get_state(app)
    try:
        record = _form(state.store, "When was this asked?")
        created = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(record.created))
        expires = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(record.expires))
        client = app.test_client()
        assert f"<td>{created}</td>" in client.get("/mcp-admin/").get_data(as_text=True)
        html = client.get(f"/mcp-admin/{record.id}/").get_data(as_text=True)
        assert re.search(rf"Created \(UTC\)</th>\s*<td>{created}</td>", html), html
        assert re.search(rf"Expires \(UTC\)</th>\s*<td>{expires}</td>", html), html
    finally:
        with state.engine.begin() as connection:
            for table in ("mcp_elicitation", "mcp_request_state"):
                connection.execute(text(f"DELETE FROM {table}"))
        state.close()


def test_a_page_of_another_site_rebound_to_the_server_is_refused(make_app: Callable[..., Flask]) -> None:
    """DNS rebinding: a page of another site whose name the attacker points at the server sends
    it that name as its Host, from the staff member's own browser (the demo's panel trusts
    requests from the machine itself). The panel read the question, handed out its token and
    completed the deposit; the MCP endpoint already refused that Host. The panel admits the
    hosts the endpoint does (``MCP_ALLOWED_HOSTS``), before the permission check runs."""
    app = make_app(MCP_ALLOWED_HOSTS=["shop.example.com"])
    MCP(app, server=MCPServer("Shop"))
    migrate(app)
    asked = []
    app.register_blueprint(admin_blueprint(lambda: asked.append(1) or True), url_prefix="/mcp-admin")
    store = _store(app)
    record, sid = _url_on_session(store, "deposit-rebound")
    rebound = app.test_client()
    headers = {"Host": "attacker.example"}
    page = rebound.get(f"/mcp-admin/{record.id}/", headers=headers)
    assert page.status_code == 400 and "Pay the deposit" not in page.get_data(as_text=True)
    assert rebound.get("/mcp-admin/", headers=headers).status_code == 400
    with rebound.session_transaction() as session:
        session["mcp_admin_token"] = "known"
    done = rebound.post(f"/mcp-admin/{record.id}/complete", data={"token": "known"}, headers=headers)
    assert done.status_code == 400
    assert asked == []
    assert store.get_elicitation(record.id).status == "pending"
    assert store.events_after(sid, GET_STREAM, 0) == []
    # The site's own name, as before.
    assert app.test_client().get("/mcp-admin/", headers={"Host": "shop.example.com"}).status_code == 200
    assert asked == [1]


def test_a_search_longer_than_sqlite_compares_is_refused_not_a_500(app: Flask) -> None:
    """SQLite refuses a LIKE pattern past 50,000 bytes ("pattern too complex"): a long text
    pasted into the search box was a 500 page. It is refused as the other bad parameters are,
    saying why; one within the limit is searched as before."""
    record = _form(_store(app), "Needle " + "x" * 30_000)
    client = app.test_client()
    refused = client.get("/mcp-admin/", query_string={"q": "y" * 50_000})
    assert refused.status_code == 400 and "too long" in refused.get_data(as_text=True)
    found = client.get("/mcp-admin/", query_string={"q": "x" * 30_000}).get_data(as_text=True)
    assert "1 elicitation<" in found and record.id in found


def test_a_question_page_says_why_a_late_url_elicitation_cannot_be_completed(app: Flask) -> None:
    """Still pending after its expiry (the heartbeat has not marked it yet): the page said
    "pending" and offered no button, and staff could not tell why. It says it expired."""
    record, _ = _url_on_session(_store(app), "deposit-late-page", expires_in=-1)
    html = app.test_client().get(f"/mcp-admin/{record.id}/").get_data(as_text=True)
    assert "Mark completed" not in html
    assert re.search(r"Expired at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC: it can no longer be completed\.", html), html
