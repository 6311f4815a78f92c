"""Existing Flask views and SQLAlchemy models as tools (``mcp_flask.view_tool``, ``model_tools``):
the view runs as the Flask-Login user calling, its answer becomes the tool's result, and the
model's rows are read through the caller's query, on both protocol eras."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from flask import Flask
from sqlalchemy import select

from mcp_common.fast import FastPath
from tests.expose_checks import (
    check_an_html_page,
    check_pages_filters_and_search,
    check_what_a_tool_cannot_return,
    text,
)
from tests.flask import exposed_app
from tests.flask.exposed_app import Order, Status, User, db
from tests.flask.inprocess import Caller

ERAS = ["legacy", "modern"]


@pytest.fixture(params=["fast", "sdk"])
def app(
    request: pytest.FixtureRequest, make_app: Callable[..., Flask], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Flask]:
    """The shop, its tools run on the core's fast path (in the request's thread and app context)
    or, as when the fast path declines a call, on the SDK's (in an application context of their
    own, on another thread)."""
    if request.param == "sdk":
        monkeypatch.setattr(FastPath, "handle_sync", lambda self, request: None)
        monkeypatch.setattr(FastPath, "handle_resolving_sync", lambda self, request: None)
    app = exposed_app.create_app(make_app(SQLALCHEMY_DATABASE_URI=f"sqlite:///{tmp_path / 'shop.sqlite3'}"))
    yield app
    with app.app_context():
        db.engine.dispose()


@pytest.fixture
def shop(app: Flask) -> dict[str, int]:
    """Alice's three orders, Bob's one, and a clerk; the users' ids by name."""
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
def test_a_post_view_gets_its_arguments_as_a_json_body_under_its_own_checks(
    app: Flask, era: str, shop: dict[str, int]
) -> None:
    refused = Caller(app, "alice", era).call("cancel_order", number="A-2", reason="changed my mind")
    assert refused["isError"] is True and text(refused) == "403 Forbidden"
    assert status_of(app, "A-2") is Status.NEW
    done = Caller(app, "clerk", era).call("cancel_order", number="A-2", reason="changed my mind")
    assert done["structuredContent"] == {"number": "A-2", "status": "cancelled", "reason": "changed my mind"}
    assert status_of(app, "A-2") is Status.CANCELLED


@pytest.mark.parametrize("era", ERAS)
def test_class_based_and_async_views(app: Flask, era: str, shop: dict[str, int]) -> None:
    caller = Caller(app, "bob", era)
    tools = caller.tools()
    assert tools["order_count"]["description"] == "How many orders the shop has (a class-based view)."
    # Routed: it runs at its own URL; not routed: at the MCP endpoint's.
    assert caller.call("order_count")["structuredContent"] == {"count": 4, "path": "/orders/count"}
    assert caller.call("order_count_view")["structuredContent"] == {"count": 4, "path": "/mcp"}
    assert caller.call("whoami")["structuredContent"] == {"user": "bob", "method": "GET", "path": "/whoami"}


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


@pytest.mark.parametrize("era", ERAS)
def test_model_tools_follow_their_permission_and_check_their_arguments(
    app: Flask, era: str, shop: dict[str, int]
) -> None:
    assert not {"list_orders", "get_order"} & set(Caller(app, None, era).tools())
    alice = Caller(app, "alice", era)
    for bad in ({"page": 0}, {"page_size": 500}, {"status": "lost"}):
        answer = alice.send("tools/call", {"name": "list_orders", "arguments": bad})
        assert answer["result"]["isError"] is True, bad
        assert "validation error" in text(answer["result"]), bad
