"""Existing Flask views and SQLAlchemy models as tools (``mcp_flask.view_tool``, ``model_tools``):
the view runs as the Flask-Login user calling, its answer becomes the tool's result, and the
model's rows are read through the caller's query, on both protocol eras."""

from __future__ import annotations

import asyncio
import datetime as dt
import gc
import json
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from mcp.server import MCPServer
from sqlalchemy import JSON, DateTime, Engine, ForeignKey, String, Text, Time, create_engine, event, select
from sqlalchemy.dialects import mysql, postgresql
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, relationship

from mcp_common.fast import FastPath
from mcp_flask import MCP, make_engine, model_tools, view_tool
from tests.expose_checks import (
    check_a_path_argument_its_url_refuses,
    check_a_search_too_long_to_match_is_refused,
    check_a_value_shown_finds_its_row,
    check_an_html_page,
    check_pages_filters_and_search,
    check_text_nothing_downstream_can_carry_is_refused,
    check_view_tool_needs_its_server_first,
    check_what_a_tool_cannot_return,
    text,
)
from tests.flask import exposed_app
from tests.flask.conftest import BACKENDS
from tests.flask.exposed_app import Order, Status, User, db
from tests.flask.inprocess import Caller
from tests.flask.test_flask_elicitation_store import PostgresDatabases

ERAS = ["legacy", "modern"]


@pytest.fixture(scope="module")
def pg_databases() -> Iterator[PostgresDatabases]:
    databases = PostgresDatabases()
    yield databases
    databases.drop_all()


@pytest.fixture(params=["fast", "sdk", pytest.param("postgres", marks=pytest.mark.postgres)])
def app(
    request: pytest.FixtureRequest, make_app: Callable[..., Flask], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Flask]:
    """The shop, its tools run on the core's fast path (in the request's thread and app context)
    or, as when the fast path declines a call, on the SDK's (in an application context of their
    own, on another thread); its orders in SQLite, or in PostgreSQL (on the fast path)."""
    if request.param == "sdk":
        monkeypatch.setattr(FastPath, "handle_sync", lambda self, request: None)
        monkeypatch.setattr(FastPath, "handle_resolving_sync", lambda self, request: None)
    if request.param == "postgres":
        # psycopg 3 named: SQLAlchemy before 2.1 takes a bare postgresql:// for psycopg2.
        uri = request.getfixturevalue("pg_databases").new().replace("postgresql://", "postgresql+psycopg://", 1)
    else:
        uri = f"sqlite:///{tmp_path / 'shop.sqlite3'}"
    app = exposed_app.create_app(make_app(SQLALCHEMY_DATABASE_URI=uri))
    yield app
    with app.app_context():
        db.engine.dispose()


@pytest.fixture
def shop(app: Flask) -> dict[str, int]:
    """Alice's three orders, Bob's one, and a clerk; the users' ids by name."""
    return stock_shop(app)


def stock_shop(app: Flask) -> dict[str, int]:
    with app.app_context():
        users = {name: User(name=name, role=role) for name, role in (("alice", "customer"), ("bob", "customer"))}
        users["clerk"] = User(name="clerk", role="clerk")
        db.session.add_all(users.values())
        db.session.flush()
        placed = dt.datetime(2026, 11, 1, 9, 0, tzinfo=dt.UTC)
        for number, customer, status, total, owner in (
            ("A-1", "Alice Ltd", Status.PAID, "19.90", "alice"),
            ("A-2", "Alice Ltd", Status.NEW, "5.00", "alice"),
            ("A-3", "Alice Ltd", Status.SHIPPED, "7.25", "alice"),
            ("B-1", "Bob & Sons", Status.PAID, "120.00", "bob"),
        ):
            db.session.add(Order(
                number=number, customer=customer, status=status, total=Decimal(total), owner_id=users[owner].id,
                placed=placed + dt.timedelta(days=int(number[-1]) + (10 if owner == "bob" else 0)),
            ))  # fmt: skip
        db.session.commit()
        return {name: user.id for name, user in users.items()}


def status_of(app: Flask, number: str) -> Status:
    with app.app_context():
        return db.session.scalars(select(Order.status).where(Order.number == number)).one()


# -- views -------------------------------------------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
def test_a_json_view_answers_as_structured_content_for_the_caller(app: Flask, era: str, shop: dict[str, int]) -> None:
    caller = Caller(app, "alice", era)
    tools = caller.tools()
    schema = tools["order_list"]["inputSchema"]
    assert set(schema["properties"]) == {"status", "page"} and not schema.get("required")
    assert tools["order_list"]["description"] == "The shop's orders, as its JSON API lists them."
    result = caller.call("order_list", status="paid", page=2)
    expected = {"orders": ["A-1", "B-1"], "page": "2", "user": "alice", "path": "/orders", "shop": "Teapot Shop"}
    assert result["structuredContent"] == expected
    assert json.loads(text(result)) == expected and not result.get("isError")
    # Unset optional arguments are not sent: the view sees no status at all.
    anonymous = Caller(app, None, era).call("order_list")["structuredContent"]
    assert anonymous["orders"] == ["A-1", "A-2", "A-3", "B-1"] and anonymous["user"] is None


@pytest.mark.parametrize("era", ERAS)
def test_an_html_view_answers_its_text_and_its_decorators_apply(app: Flask, era: str, shop: dict[str, int]) -> None:
    check_an_html_page(Caller(app, "alice", era), Caller(app, None, era))
    # With no login view, Flask-Login answers 401.
    app.login_manager.login_view = None  # type: ignore[attr-defined]
    refused = Caller(app, None, era).call("order_page", number="A-2")
    assert refused["isError"] is True and text(refused) == "401 Unauthorized"


@pytest.mark.parametrize("era", ERAS)
def test_a_sign_in_page_of_the_apps_own_is_known_by_the_way_back_it_is_given(
    app: Flask, era: str, shop: dict[str, int]
) -> None:
    """A guard written as Flask's docs write one sends callers to a sign-in page of the app's
    own (not Flask-Login's login view) with the way back, ``?next=`` and the view's URL: it was
    answered "redirected (302) to ...", and it is a sign-in page that URL says."""
    anonymous = Caller(app, None, era).call("cash_drawer")
    assert anonymous["isError"] is True and text(anonymous).startswith("Authentication required"), anonymous
    bob = Caller(app, "bob", era).call("cash_drawer")
    assert bob["isError"] is True and text(bob).startswith("403 Forbidden"), bob
    assert Caller(app, "clerk", era).call("cash_drawer")["structuredContent"] == {"drawer": "120.00"}


@pytest.mark.parametrize("era", ERAS)
def test_a_signed_in_caller_sent_to_the_login_view_is_told_the_view_refuses_them(
    app: Flask, era: str, shop: dict[str, int]
) -> None:
    """A guard that sends whoever fails it to the login view (``login_manager.unauthorized()``):
    signing in is no answer for a caller who already is."""
    anonymous = Caller(app, None, era).call("refunds")
    assert anonymous["isError"] is True and text(anonymous).startswith("Authentication required")
    bob = Caller(app, "bob", era).call("refunds")
    assert bob["isError"] is True and text(bob) == (
        "403 Forbidden: the view sends the caller, who is signed in, to its login page "
        "(a permission or test it requires refuses them)."
    )
    assert Caller(app, "clerk", era).call("refunds")["structuredContent"] == {"refunds": 2}


@pytest.mark.parametrize("era", ERAS)
def test_a_post_view_gets_its_arguments_as_a_json_body_under_its_own_checks(
    app: Flask, era: str, shop: dict[str, int]
) -> None:
    refused = Caller(app, "alice", era).call("cancel_order", number="A-2", reason="changed my mind")
    assert refused["isError"] is True and text(refused) == "403 Forbidden"
    assert status_of(app, "A-2") is Status.NEW
    done = Caller(app, "clerk", era).call("cancel_order", number="A-2", reason="changed my mind")
    assert done["structuredContent"] == {"number": "A-2", "status": "cancelled", "reason": "changed my mind"}
    assert status_of(app, "A-2") is Status.CANCELLED
    # A Flask-WTF form reads the JSON body; its own CSRF token is not asked of an MCP caller.
    assert Caller(app, "bob", era).call("add_note", note="call back")["structuredContent"] == {"note": "call back"}
    refused = Caller(app, "bob", era).call("add_note", note="")
    assert refused["isError"] is True and "This field is required." in text(refused)


@pytest.mark.parametrize("era", ERAS)
def test_flask_wtf_csrf_protection_leaves_a_post_view_tool_to_the_endpoints_own_checks(
    make_app: Callable[..., Flask], tmp_path: Path, era: str
) -> None:
    """``CSRFProtect`` refuses a POST without its form's token, which no MCP client has: the
    tool's request is the MCP request's, which the endpoint checked (its ``Origin``, JSON only),
    as a Django view tool's is. A browser's POST to the view is still refused."""
    app = exposed_app.create_app(make_app(SQLALCHEMY_DATABASE_URI=f"sqlite:///{tmp_path / 'shop.sqlite3'}"), csrf=True)
    try:
        stock_shop(app)
        clerk = Caller(app, None, era, headers={"Authorization": "Bearer clerk"})
        done = clerk.call("cancel_order", number="A-2", reason="changed my mind")
        assert done["structuredContent"] == {"number": "A-2", "status": "cancelled", "reason": "changed my mind"}, done
        # A FlaskForm in the view skips its own token check, as behind CSRFProtect's.
        assert clerk.call("add_note", note="call back")["structuredContent"] == {"note": "call back"}
        browser = app.test_client().post(
            "/orders/A-3/cancel", json={"reason": "forged"}, headers={"Authorization": "Bearer clerk"}
        )
        assert browser.status_code == 400 and status_of(app, "A-3") is Status.SHIPPED
    finally:
        with app.app_context():
            db.engine.dispose()


def test_a_class_based_view_without_a_docstring_is_not_described_by_flasks_view() -> None:
    # inspect.getdoc() would hand the client MethodView's own docstring as what the tool does.
    from flask.views import MethodView

    from mcp_common import _sdk

    class Tally(MethodView):
        def get(self) -> str:
            return "3"

    server = MCPServer("undocumented")
    view_tool(server, Tally)
    (tool,) = _sdk.registered_tools(server)
    assert tool.description == "Calls the view tally."


def test_tools_are_named_from_a_class_name_with_an_acronym_as_one_word() -> None:
    # As Django's verbose names read a class name ("HTTPLog": "http log"), not a word per letter.
    from flask.views import MethodView

    from mcp_common import _sdk

    class OrderAPI(MethodView):
        def get(self) -> str:
            return "3"

    class Base(DeclarativeBase):
        pass

    class HTTPLog(Base):
        __tablename__ = "http_log"
        id: Mapped[int] = mapped_column(primary_key=True)

    server = MCPServer("names")
    view_tool(server, OrderAPI)
    model_tools(server, HTTPLog, fields=["id"])
    assert [tool.name for tool in _sdk.registered_tools(server)] == ["order_api", "list_http_logs", "get_http_log"]


@pytest.mark.parametrize("era", ERAS)
def test_class_based_and_async_views(app: Flask, era: str, shop: dict[str, int]) -> None:
    caller = Caller(app, "bob", era)
    tools = caller.tools()
    assert tools["order_count"]["description"] == "How many orders the shop has (a class-based view)."
    # Routed: it runs at its own URL; not routed: at the MCP endpoint's.
    assert caller.call("order_count")["structuredContent"] == {"count": 4, "path": "/orders/count"}
    assert caller.call("order_count_view")["structuredContent"] == {"count": 4, "path": "/mcp"}
    assert caller.call("whoami")["structuredContent"] == {"user": "bob", "method": "GET", "path": "/whoami"}


def test_a_routed_view_whose_url_cannot_be_built_is_not_called(app: Flask, shop: dict[str, int]) -> None:
    refused = Caller(app, "alice", "modern").call("post_order_list")
    assert refused["isError"] is True and text(refused) == "405 Method Not Allowed", refused


def test_a_path_argument_its_url_would_not_match_does_not_reach_the_view(app: Flask, shop: dict[str, int]) -> None:
    check_a_path_argument_its_url_refuses(Caller(app, "bob", "modern"), "404 Not Found")


def test_a_views_parameters_without_annotations_get_what_its_url_converters_make(
    app: Flask, shop: dict[str, int]
) -> None:
    """``def receipt(year, number, token)`` at ``/receipts/<yyyy:year>/<int:number>/<uuid:token>``,
    as Flask's tutorial writes a view: the tool takes text, and the URL routed back to the view
    with an ``int`` and a ``UUID`` that differed from it (every call answered 404 Not Found), or
    a custom converter's ``to_url`` failed on it (an error from the SDK). The text is read as
    the converters read a browser's URL, and the view gets their values."""
    caller = Caller(app, "bob", "modern")
    token = "0f8fad5b-d9cb-469f-a165-70867728950e"
    answer = caller.call("receipt", year="2026", number="7", token=token.upper())
    assert answer["structuredContent"] == {"year": 2026, "number": 7, "token": token, "types": ["int", "int", "UUID"]}
    for bad in ({"year": "26"}, {"number": "-7"}, {"number": "seven"}, {"token": "not-a-uuid"}):
        refused = caller.call("receipt", **{"year": "2026", "number": "7", "token": token, **bad})
        assert refused["isError"] is True and text(refused) == "404 Not Found", (bad, refused)


def test_a_converter_answering_for_its_url_answers_for_the_tool(app: Flask, shop: dict[str, int]) -> None:
    """A converter that loads the row its URL names, ``first_or_404`` for one there is not: a
    browser gets 404 Not Found (and for a converter that fails, a server error); the tool's call
    failed outside it (the SDK's "Error executing tool")."""
    caller = Caller(app, "bob", "modern")
    assert caller.call("order_total", order="B-1")["structuredContent"] == {"number": "B-1", "total": "120.00"}
    missing = caller.call("order_total", order="Z-9")
    assert missing["isError"] is True and text(missing) == "404 Not Found", missing
    failing = caller.call("order_total", order="X-0")  # a crash, as in the view: nothing of it told
    assert failing["isError"] is True and text(failing) == "500 Internal Server Error: the view failed.", failing


@pytest.mark.parametrize("era", ERAS)
def test_a_view_gets_the_url_values_its_blueprints_url_processor_leaves(app: Flask, era: str) -> None:
    """``/branches/<branch>/shelves/<int:shelf>`` behind a ``url_value_preprocessor`` that pops
    ``branch`` into ``g``, as Flask's documentation shows for a language code: Flask calls the
    view with ``shelf`` only; the tool passed ``branch`` too, and every call failed as a server
    error (an unexpected keyword argument)."""
    answer = Caller(app, "bob", era).call("branch_shelf", branch="leeds", shelf=3)
    assert answer["structuredContent"] == {"branch": "leeds", "shelf": 3}, answer


@pytest.mark.parametrize("era", ERAS)
def test_a_caller_signed_in_by_a_request_loader_is_the_views_user(app: Flask, era: str, shop: dict[str, int]) -> None:
    caller = Caller(app, None, era, headers={"Authorization": "Bearer bob"})
    assert caller.call("whoami")["structuredContent"]["user"] == "bob"
    assert caller.call("order_list")["structuredContent"]["user"] == "bob"
    assert caller.call("list_orders")["structuredContent"]["count"] == 1


@pytest.mark.parametrize("era", ERAS)
def test_what_a_tool_cannot_return_is_a_clear_error_and_a_crash_tells_nothing(
    app: Flask, era: str, shop: dict[str, int], caplog: pytest.LogCaptureFixture
) -> None:
    check_what_a_tool_cannot_return(Caller(app, "bob", era), caplog, "I'm a teapot")
    sent = Caller(app, "bob", era).call("price_list")  # send_file's passthrough body is read
    assert not sent.get("isError") and text(sent) == "teapot 12.00"
    # abort() with a description: the client reads it, as on Flask's error page (not for a 5xx).
    closed = Caller(app, "bob", era).call("refuse_with_reason", code=409)
    assert closed["isError"] is True
    assert text(closed) == "409 Conflict: The till is closed until 9:00 (database password is hunter2)."
    failed = Caller(app, "bob", era).call("refuse_with_reason", code=503)
    assert text(failed) == "503 Service Unavailable: the view failed."


@pytest.mark.parametrize("era", ERAS)
def test_a_permission_on_the_view_hides_its_tool_and_its_blueprints_guard_applies(
    app: Flask, era: str, shop: dict[str, int]
) -> None:
    bob = Caller(app, "bob", era)
    assert "staff_note" not in bob.tools()
    clerk = Caller(app, "clerk", era)
    assert "staff_note" in clerk.tools()
    assert text(clerk.call("staff_note")) == "for staff only"
    # The staff blueprint's before_request function refuses Bob, as it would in a browser.
    refused = bob.call("takings")
    assert refused["isError"] is True and text(refused) == "403 Forbidden"
    assert clerk.call("takings")["structuredContent"] == {"total": "152.15"}


@pytest.mark.parametrize("era", ERAS)
def test_the_checks_its_url_wraps_a_bare_view_in_apply_to_its_tool(app: Flask, era: str, shop: dict[str, int]) -> None:
    """``shop.add_url_rule("/ledger", view_func=login_required(ledger))`` with the tool of the
    bare ``ledger`` (an async ``vault`` too; or of the class, where the URL routes a decorated
    ``as_view()``): an anonymous caller is refused as a browser at that URL is, not served the
    view unchecked."""
    anonymous = Caller(app, None, era)
    for name in ("ledger", "safe", "vault"):
        refused = anonymous.call(name)
        assert refused["isError"] is True and text(refused).startswith("Authentication required"), (name, refused)
    bob = Caller(app, "bob", era)
    assert bob.call("ledger")["structuredContent"] == {"ledger": "Bob & Sons owe 120.00"}
    assert bob.call("safe")["structuredContent"] == {"safe": "the day's takings"}
    assert bob.call("vault")["structuredContent"] == {"vault": "the deeds"}


# -- models ------------------------------------------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
def test_a_model_is_listed_page_by_page_through_the_callers_query(app: Flask, era: str, shop: dict[str, int]) -> None:
    check_pages_filters_and_search(Caller(app, "alice", era), Caller(app, "clerk", era), "owner_id", shop)


@pytest.mark.parametrize("era", ERAS)
def test_one_row_by_key_only_within_the_callers_query(app: Flask, era: str, shop: dict[str, int]) -> None:
    with app.app_context():
        ids = {number: key for number, key in db.session.execute(select(Order.number, Order.id))}
    alice = Caller(app, "alice", era)
    assert alice.call("get_order", id=ids["A-1"])["structuredContent"]["number"] == "A-1"
    refused = alice.call("get_order", id=ids["B-1"])
    assert refused["isError"] is True and text(refused) == f"No order with id {ids['B-1']}."


def test_a_key_no_column_can_hold_matches_no_row(
    app: Flask, shop: dict[str, int], caplog: pytest.LogCaptureFixture
) -> None:
    """An integer past what the column holds (past 64 bits on SQLite, past 32 bits for an
    ``Integer`` on PostgreSQL) cannot be a row's: the driver refused it, and the call failed as
    a server error. It matches nothing, as under Django."""
    clerk = Caller(app, "clerk", "modern")
    for key in (2**31, -(2**31) - 1, 2**63, 2**70):
        missing = clerk.call("get_order", id=key)
        assert missing["isError"] is True and text(missing) == f"No order with id {key}.", missing
        listed = clerk.call("list_orders", owner_id=key)["structuredContent"]
        assert (listed["results"], listed["count"]) == ([], 0), key
    assert not [record for record in caplog.records if record.exc_info], caplog.text
    assert clerk.call("list_orders", owner_id=shop["bob"])["structuredContent"]["count"] == 1


@pytest.mark.parametrize("era", ERAS)
def test_model_tools_follow_their_permission_and_check_their_arguments(
    app: Flask, era: str, shop: dict[str, int]
) -> None:
    assert not {"list_orders", "get_order"} & set(Caller(app, None, era).tools())
    alice = Caller(app, "alice", era)
    for bad in ({"page": 0}, {"page": 10**7}, {"page_size": 500}, {"status": "lost"}):
        answer = alice.send("tools/call", {"name": "list_orders", "arguments": bad})
        assert answer["result"]["isError"] is True, bad
        assert "validation error" in text(answer["result"]), bad


@pytest.mark.parametrize("era", ERAS)
def test_text_no_database_or_url_can_carry_is_a_clear_argument_error(
    app: Flask, era: str, shop: dict[str, int], caplog: pytest.LogCaptureFixture
) -> None:
    check_text_nothing_downstream_can_carry_is_refused(Caller(app, "clerk", era), caplog)
    check_a_search_too_long_to_match_is_refused(Caller(app, "clerk", era), caplog)


# -- configuration -----------------------------------------------------------------------------


def test_bad_options_fail_at_start_up_naming_the_option() -> None:
    server = MCPServer("misconfigured")
    for options, message in (
        ({"fields": ["number", "nope"]}, "fields names 'nope'"),
        ({"fields": "number"}, "fields= must name the columns"),
        ({"fields": "__all__", "filters": ["colour"]}, "filters names 'colour'"),
        ({"fields": "__all__", "search": ["total"]}, "search column 'total' is not a text column"),
        ({"fields": "__all__", "search": ["status"]}, "search column 'status' is not a text column"),
        ({"fields": "__all__", "ordering": ["-when"]}, "ordering names 'when'"),
        ({"fields": "__all__", "actions": ("list", "delete")}, "actions are"),
        ({"fields": "__all__", "page_size": 0}, "page_size must be between 1 and max_page_size"),
        ({"fields": "__all__", "page_size": 50, "max_page_size": 20}, "page_size must be"),
    ):
        with pytest.raises(ValueError, match=message):
            model_tools(server, Order, **options)
    with pytest.raises(TypeError, match="not a SQLAlchemy mapped class"):
        model_tools(server, dict, fields="__all__")
    with pytest.raises(TypeError, match=r"neither a view function nor a flask\.views\.View"):
        view_tool(server, dict)
    with pytest.raises(ValueError, match="give the tool a name="):
        view_tool(server, lambda: "anonymous")
    with pytest.raises(TypeError, match="the tool would take number twice"):
        view_tool(server, exposed_app.order_page, arguments={"number": str})
    assert not asyncio.run(server.list_tools())  # nothing half-registered


def test_model_tools_read_with_the_session_given_or_say_how_to_get_one(
    make_app: Callable[..., Flask], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'plain.sqlite3'}")
    exposed_app.Base.metadata.create_all(engine)
    with Session(engine) as session, session.begin():
        owner = User(name="ann")
        session.add(owner)
        session.flush()
        placed = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
        session.add(Order(number="C-1", customer="Ann", total=Decimal("1.50"), placed=placed, owner_id=owner.id))
    server = MCPServer("plain SQLAlchemy")
    model_tools(server, Order, fields=["number", "total"], names={"list": "orders"}, session=lambda: Session(engine))
    model_tools(server, User, fields=["name"], actions=("list",))  # no session: Flask-SQLAlchemy's
    app = make_app()
    MCP(app, server=server)
    MCP.migrate(app)
    caller = Caller(app, None, "modern")
    assert set(caller.tools()) == {"orders", "get_order", "list_users"}
    assert caller.call("orders")["structuredContent"]["results"] == [{"number": "C-1", "total": "1.50"}]
    missing = caller.call("list_users")
    assert missing["isError"] is True and text(missing) == "500 Internal Server Error: the query failed."
    assert any("db.init_app(app)" in str(record.exc_info) for record in caplog.records if record.exc_info)
    engine.dispose()


def test_a_session_given_returns_its_connection_after_each_call(make_app: Callable[..., Flask], tmp_path: Path) -> None:
    """``session=lambda: Session(engine)``, as a plain SQLAlchemy app writes it: the session a
    call read with kept its connection checked out until the garbage collector found it, so
    a busy server ran out of its pool's connections and calls waited, then failed."""
    engine = create_engine(f"sqlite:///{tmp_path / 'pool.sqlite3'}", pool_size=1, max_overflow=0, pool_timeout=1)
    exposed_app.Base.metadata.create_all(engine)
    server = MCPServer("plain SQLAlchemy")
    model_tools(server, User, fields=["name"], session=lambda: Session(engine))
    app = make_app()
    MCP(app, server=server)
    MCP.migrate(app)
    caller = Caller(app, None, "modern")
    gc.disable()  # the session is in a reference cycle: only the collector would free it
    try:
        for _ in range(3):
            assert caller.call("list_users")["structuredContent"]["count"] == 0
            assert engine.pool.checkedout() == 0
        assert caller.call("get_user", id=1)["isError"] is True
        assert engine.pool.checkedout() == 0
    finally:
        gc.enable()
        engine.dispose()


class _Plain(DeclarativeBase):
    pass


class Delivery(_Plain):
    """A model as an application writes it: SQLAlchemy's own ``DateTime`` columns."""

    __tablename__ = "delivery"

    id: Mapped[int] = mapped_column(primary_key=True)
    shipped: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))
    local_noon: Mapped[dt.datetime] = mapped_column(DateTime())


def test_model_tools_give_an_aware_column_its_utc_marker_on_sqlite(
    make_app: Callable[..., Flask], tmp_path: Path
) -> None:
    """SQLite keeps no offset: a ``DateTime(timezone=True)`` column reads back naive there, and
    the same row would read ``...Z`` on PostgreSQL (and under Django). The tool says UTC; a
    column declared naive stays naive, as Django writes a naive time."""
    engine = create_engine(f"sqlite:///{tmp_path / 'deliveries.sqlite3'}")
    _Plain.metadata.create_all(engine)
    with Session(engine) as session, session.begin():
        session.add(
            Delivery(
                id=1,
                shipped=dt.datetime(2026, 3, 1, 9, 30, 15, 250000, tzinfo=dt.UTC),
                local_noon=dt.datetime(2026, 3, 1, 12, 0),
            )
        )
    server = MCPServer("deliveries")
    model_tools(server, Delivery, fields=["id", "shipped", "local_noon"], session=lambda: Session(engine))
    app = make_app()
    MCP(app, server=server)
    MCP.migrate(app)
    expected = {"id": 1, "shipped": "2026-03-01T09:30:15.250Z", "local_noon": "2026-03-01T12:00:00"}
    for era in ERAS:
        caller = Caller(app, None, era)
        assert caller.call("list_deliveries")["structuredContent"]["results"] == [expected]
        assert caller.call("get_delivery", id=1)["structuredContent"] == expected
    engine.dispose()


class Crate(_Plain):
    """A model loading its bottles with it (a joined eager collection), its manifest on demand."""

    __tablename__ = "crate"

    id: Mapped[int] = mapped_column(primary_key=True)
    label: Mapped[str] = mapped_column(String(20))
    manifest: Mapped[str] = mapped_column(Text, deferred=True)
    bottles: Mapped[list[Bottle]] = relationship(lazy="joined")


class Bottle(_Plain):
    __tablename__ = "bottle"

    id: Mapped[int] = mapped_column(primary_key=True)
    crate_id: Mapped[int] = mapped_column(ForeignKey("crate.id"))


@pytest.fixture
def crates(make_app: Callable[..., Flask], tmp_path: Path) -> Iterator[tuple[Caller, list[str]]]:
    """Two crates of two bottles each, listed one to a page; and the SQL each call runs."""
    engine = create_engine(f"sqlite:///{tmp_path / 'crates.sqlite3'}")
    _Plain.metadata.create_all(engine)
    with Session(engine) as session, session.begin():
        for crate in (1, 2):
            session.add(Crate(id=crate, label=f"crate {crate}", manifest=f"manifest {crate}"))
            session.add_all([Bottle(id=crate * 10 + n, crate_id=crate) for n in (1, 2)])
    server = MCPServer("crates")
    model_tools(server, Crate, fields=["id", "label"], page_size=1, session=lambda: Session(engine))
    model_tools(
        server, Crate, fields=["id", "manifest"], session=lambda: Session(engine),
        names={"list": "list_manifests", "get": "get_manifest"},
    )  # fmt: skip
    model_tools(
        server, Crate, fields=["id"], page_size=2, session=lambda: Session(engine),
        query=lambda: select(Crate).join(Bottle), names={"list": "list_bottled", "get": "get_bottled"},
    )  # fmt: skip
    app = make_app()
    MCP(app, server=server)
    MCP.migrate(app)
    statements: list[str] = []
    event.listen(engine, "before_cursor_execute", lambda *args: statements.append(args[2]))
    yield Caller(app, None, "modern"), statements
    engine.dispose()


def test_a_model_with_a_joined_eager_collection_is_listed(crates: tuple[Caller, list[str]]) -> None:
    """``relationship(lazy="joined")`` on a collection: SQLAlchemy refuses to hand out the
    rows of such a query without ``unique()``, so every call failed as a server error."""
    caller, _ = crates
    first = caller.call("list_crates")["structuredContent"]
    assert (first["results"], first["count"], first["pages"]) == ([{"id": 1, "label": "crate 1"}], 2, 2)
    assert caller.call("list_crates", page=2)["structuredContent"]["results"] == [{"id": 2, "label": "crate 2"}]
    assert caller.call("get_crate", id=2)["structuredContent"] == {"id": 2, "label": "crate 2"}


def test_a_page_of_a_query_joining_a_collection_is_counted(crates: tuple[Caller, list[str]]) -> None:
    """A query joining a collection reads a row per bottle, and a page holds each crate once:
    a page with fewer crates than its size is not the last, and the count says so."""
    caller, _ = crates
    first = caller.call("list_bottled")["structuredContent"]
    assert first["results"] == [{"id": 1}] and first["pages"] > 1, first
    assert caller.call("list_bottled", page=2)["structuredContent"]["results"] == [{"id": 2}]


def test_a_deferred_column_shown_is_read_with_its_rows(crates: tuple[Caller, list[str]]) -> None:
    """A column mapped ``deferred=True`` that the tool shows was loaded by a query of its own
    for every row of the page (N+1): it is read with the rows."""
    caller, statements = crates
    listed = caller.call("list_manifests")["structuredContent"]["results"]
    assert listed == [{"id": 1, "manifest": "manifest 1"}, {"id": 2, "manifest": "manifest 2"}]
    assert len(statements) == 1, statements  # the page: it is not full, so it holds the last row
    statements.clear()
    assert caller.call("get_manifest", id=2)["structuredContent"] == {"id": 2, "manifest": "manifest 2"}
    assert len(statements) == 1, statements


class _PostgresOnly(DeclarativeBase):
    pass


class Lease(_PostgresOnly):
    """An address leased for a while: PostgreSQL's own column types."""

    __tablename__ = "lease"

    id: Mapped[int] = mapped_column(primary_key=True)
    address: Mapped[str] = mapped_column(postgresql.INET)
    during: Mapped[Any] = mapped_column(postgresql.DATERANGE)


@pytest.mark.postgres
def test_postgresql_addresses_and_ranges_read_as_json(
    make_app: Callable[..., Flask], pg_databases: PostgresDatabases
) -> None:
    """psycopg reads ``inet`` as an ``ipaddress`` object and a range as a ``Range``, which no
    JSON encoder writes: every call reading one failed as a server error."""
    engine = create_engine(pg_databases.new().replace("postgresql://", "postgresql+psycopg://", 1))
    _PostgresOnly.metadata.create_all(engine)
    with Session(engine) as session, session.begin():
        session.add(Lease(id=1, address="10.0.0.7", during=postgresql.Range(dt.date(2026, 1, 1), dt.date(2026, 2, 1))))
    server = MCPServer("leases")
    model_tools(server, Lease, fields="__all__", session=lambda: Session(engine))
    app = make_app()
    MCP(app, server=server)
    MCP.migrate(app)
    expected = {
        "id": 1,
        "address": "10.0.0.7",
        "during": {"lower": "2026-01-01", "upper": "2026-02-01", "bounds": "[)"},
    }
    caller = Caller(app, None, "modern")
    assert caller.call("list_leases")["structuredContent"]["results"] == [expected]
    assert caller.call("get_lease", id=1)["structuredContent"] == expected
    engine.dispose()


class Reading(_Plain):
    """A meter's reading, to the microsecond, and what the meter said (a plain ``JSON`` column,
    ``json`` on PostgreSQL, which has no equality operator)."""

    __tablename__ = "reading"

    id: Mapped[int] = mapped_column(primary_key=True)
    taken: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql"))
    at: Mapped[dt.time] = mapped_column(Time().with_variant(mysql.TIME(fsp=6), "mysql"))
    said: Mapped[Any] = mapped_column(JSON)


@pytest.fixture(params=BACKENDS)
def readings(request: pytest.FixtureRequest, make_app: Callable[..., Flask], tmp_path: Path) -> Iterator[Caller]:
    """Three readings in one second, on each database, filtered on every column."""
    engine: Engine
    if request.param == "sqlite":
        engine = create_engine(f"sqlite:///{tmp_path / 'readings.sqlite3'}")
    elif request.param == "postgres":
        url = request.getfixturevalue("pg_databases").new()
        engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    else:
        engine = make_engine(request.getfixturevalue("mariadb_databases").new())
    _Plain.metadata.create_all(engine)
    second = dt.datetime(2026, 3, 1, 9, 30, 15, tzinfo=dt.UTC)
    with Session(engine) as session, session.begin():
        for key, micro, said in ((1, 250123, {"volts": 230, "notes": ["é", None]}), (2, 0, "idle"), (3, 999, 12.5)):
            taken = second + dt.timedelta(microseconds=micro)
            session.add(Reading(id=key, taken=taken, at=taken.time(), said=said))
    server = MCPServer("readings")
    model_tools(server, Reading, fields="__all__", filters=["taken", "at", "said"], session=lambda: Session(engine))
    app = make_app()
    MCP(app, server=server)
    MCP.migrate(app)
    yield Caller(app, None, "modern")
    engine.dispose()


def test_a_value_a_model_tool_shows_finds_its_row_as_a_filter(
    readings: Caller, caplog: pytest.LogCaptureFixture
) -> None:
    """Times are shown to the millisecond: a time with microseconds sent back as shown missed
    its row. A plain ``JSON`` column's filter failed as a server error on PostgreSQL (``json``
    has no ``=``). Each value shown finds its row, and those showing the same value (the same
    millisecond, the same document whatever the order of its keys)."""
    check_a_value_shown_finds_its_row(readings, "id", caplog)


def test_view_tool_without_its_server_is_refused() -> None:
    check_view_tool_needs_its_server_first(view_tool, "mcp_flask")
