"""What the Django and Flask tests of existing views and models as tools both check, against
the same shop (orders A-1, A-2, A-3 of Alice's, B-1 of Bob's, a clerk who sees them all)."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any, Protocol

import pytest


class Caller(Protocol):
    def tools(self) -> dict[str, dict[str, Any]]: ...

    def call(self, name: str, **arguments: Any) -> dict[str, Any]: ...


def text(result: dict[str, Any]) -> str:
    return "\n".join(item["text"] for item in result["content"])


def check_an_html_page(alice: Caller, anonymous: Caller) -> None:
    """``order_page(number)``: an order's page behind ``login_required``, as its text."""
    schema = alice.tools()["order_page"]["inputSchema"]
    assert schema["required"] == ["number"] and schema["properties"]["number"]["type"] == "string"
    page = alice.call("order_page", number="A-2")
    assert text(page) == "Order\n\nOrder A-2\nCustomer: Alice Ltd & co.\nStatus: New" and not page.get("isError")
    missing = alice.call("order_page", number="Z-9")
    assert missing["isError"] is True and text(missing) == "404 Not Found"
    # login_required sends anonymous callers to the login page: the tool says so.
    refused = anonymous.call("order_page", number="A-2")
    assert refused["isError"] is True and text(refused).startswith("Authentication required")


def check_what_a_tool_cannot_return(caller: Caller, caplog: pytest.LogCaptureFixture, teapot: str) -> None:
    """A crash tells the client nothing (and the log everything); a redirect, a 4xx and a body
    that is not text are errors saying so. ``teapot``: the framework's reason for 418."""
    broken = caller.call("broken")
    assert broken["isError"] is True and text(broken) == "500 Internal Server Error: the view failed."
    assert "hunter2" not in json.dumps(broken)
    assert any("hunter2" in str(record.exc_info) for record in caplog.records if record.exc_info)
    moved = caller.call("moved")
    assert moved["isError"] is True and "redirected (302) to /somewhere/else" in text(moved)
    answer = caller.call("teapot")
    assert answer["isError"] is True and text(answer) == f"418 {teapot}: short and stout"
    invoice = caller.call("invoice")
    assert invoice["isError"] is True and "application/pdf" in text(invoice)
    page = caller.call("template_page")  # rendered by the framework's templates
    assert not page.get("isError") and text(page) == "Hello bob"


def check_pages_filters_and_search(alice: Caller, clerk: Caller, owner: str, owners: dict[str, Any]) -> None:
    """``list_orders`` of a model listed two to a page, newest first, through the caller's own
    rows; ``owner`` is the owner filter's name, ``owners`` the users' keys by name."""
    schema = alice.tools()["list_orders"]["inputSchema"]
    assert set(schema["properties"]) == {"status", owner, "search", "page", "page_size"}
    status = {"enum": ["new", "paid", "shipped", "cancelled"], "type": "string"}
    assert status in schema["properties"]["status"]["anyOf"]
    first = alice.call("list_orders")["structuredContent"]
    assert [row["number"] for row in first["results"]] == ["A-3", "A-2"]  # newest first
    assert (first["count"], first["page"], first["pages"]) == (3, 1, 2)
    assert first["results"][0] == {
        "number": "A-3", "customer": "Alice Ltd", "status": "shipped", "total": "7.25",
        "placed": "2026-11-04T09:00:00Z", owner: owners["alice"],
    }  # fmt: skip
    second = alice.call("list_orders", page=2)["structuredContent"]
    assert [row["number"] for row in second["results"]] == ["A-1"]
    assert (second["count"], second["pages"]) == (3, 2)  # told by the page, which is not full
    beyond = alice.call("list_orders", page=5)["structuredContent"]
    assert (beyond["results"], beyond["count"], beyond["page"], beyond["pages"]) == ([], 3, 5, 2)
    assert alice.call("list_orders", status="paid")["structuredContent"]["count"] == 1
    # Bob's order is not among Alice's rows, whatever she asks.
    assert alice.call("list_orders", search="bob")["structuredContent"]["count"] == 0
    assert alice.call("list_orders", **{owner: owners["bob"]})["structuredContent"]["results"] == []
    staff = clerk.call("list_orders", search="BOB", page_size=5)["structuredContent"]
    assert [row["number"] for row in staff["results"]] == ["B-1"]
    # The search text is matched literally: % and _ are not wildcards.
    assert clerk.call("list_orders", search="%")["structuredContent"]["count"] == 0


def check_a_path_argument_its_url_refuses(caller: Caller, refusal: str) -> None:
    """``shop_file(slug)`` at ``files/<slug>``: the view trusts its URL to hold a single path
    segment (no ``/``, no ``..`` above it), as routing guarantees; called as a tool with a value
    its URL would not match, it is not run and ``refusal`` begins the tool's error."""
    assert text(caller.call("shop_file", slug="price-list")) == "file price-list"
    for bad in ("../../settings.py", "a/b", ""):
        refused = caller.call("shop_file", slug=bad)
        assert refused["isError"] is True and text(refused).startswith(refusal), (bad, refused)


def check_text_nothing_downstream_can_carry_is_refused(caller: Caller, caplog: pytest.LogCaptureFixture) -> None:
    """A NUL (which PostgreSQL text cannot hold, and SQLite compares as the end of the text)
    or a lone surrogate (which has no UTF-8, so no URL, body or driver can carry it) in a
    model tool's text, or a lone surrogate in a view tool's, is the caller's mistake: an
    error naming the argument, as for any argument of the wrong type, not a server error
    with a traceback in the log (nor, on SQLite, every row matching a search for "\\x00")."""
    calls = [
        ("list_orders", {"search": "\x00"}, "search"),
        ("list_orders", {"search": "A\ud800"}, "search"),
        ("order_page", {"number": "A-\udfff"}, "number"),
    ]
    for name, arguments, argument in calls:
        caplog.clear()
        refused = caller.call(name, **arguments)
        assert refused["isError"] is True, (arguments, refused)
        assert "500" not in text(refused) and repr(argument) in text(refused), (arguments, refused)
        assert not [record for record in caplog.records if record.exc_info], (arguments, caplog.text)


def check_a_search_too_long_to_match_is_refused(caller: Caller, caplog: pytest.LogCaptureFixture) -> None:
    """SQLite refuses a LIKE pattern over 50,000 bytes ("LIKE or GLOB pattern too complex"): a
    search that long is the caller's mistake, refused as an argument on every database, as the
    schema says, not a server error with a traceback in the log."""
    caplog.clear()
    refused = caller.call("list_orders", search="%" * 60_000)
    assert refused["isError"] is True and "search" in text(refused) and "500" not in text(refused), refused
    assert not [record for record in caplog.records if record.exc_info], caplog.text
    search = caller.tools()["list_orders"]["inputSchema"]["properties"]["search"]
    longest = next(kind["maxLength"] for kind in search["anyOf"] if kind["type"] == "string")
    assert caller.call("list_orders", search="%" * longest)["structuredContent"]["count"] == 0


def check_a_value_shown_finds_its_row(caller: Caller, key: str, caplog: pytest.LogCaptureFixture) -> None:
    """``list_readings`` of three readings in one second (``key`` their key): 1 at .250123, 2
    on the second, 3 at .000999; ``taken`` a datetime, ``at`` a time of day, ``said`` JSON
    (1 an object, 2 a string, 3 a number), each a filter. A value the tool shows, sent back
    as a filter, finds the rows showing it: times to the millisecond shown (``15Z`` and
    ``15.000Z`` are one), documents whatever the order of their keys."""
    caplog.clear()
    rows = {row[key]: row for row in caller.call("list_readings")["structuredContent"]["results"]}
    assert rows[1]["taken"] == "2026-03-01T09:30:15.250Z" and rows[1]["at"] == "09:30:15.250"
    assert rows[1]["said"] == {"volts": 230, "notes": ["é", None]}
    same = {
        "taken": lambda a, b: dt.datetime.fromisoformat(a) == dt.datetime.fromisoformat(b),
        "at": lambda a, b: dt.time.fromisoformat(a) == dt.time.fromisoformat(b),
        "said": lambda a, b: a == b,
    }
    for number, row in rows.items():
        for name, equal in same.items():
            found = caller.call("list_readings", **{name: row[name]})
            assert not found.get("isError"), (name, found)
            shown = [other for other in rows.values() if equal(other[name], row[name])]
            assert found["structuredContent"]["results"] == shown, (number, name, found)
    reordered = caller.call("list_readings", said={"notes": ["é", None], "volts": 230})["structuredContent"]
    assert [row[key] for row in reordered["results"]] == [1]
    # A time given to the microsecond is matched to the microsecond.
    exact = caller.call("list_readings", taken="2026-03-01T09:30:15.250123Z")["structuredContent"]
    assert [row[key] for row in exact["results"]] == [1]
    assert caller.call("list_readings", at="09:30:15.250124")["structuredContent"]["results"] == []
    assert not [record for record in caplog.records if record.exc_info], caplog.text


def check_view_tool_needs_its_server_first(view_tool: Any, adapter: str) -> None:
    """``@view_tool`` without ``(mcp)`` took the view for the server and put a decorator in its
    place, silently: the URL then served that decorator and the server had no tool."""

    def orders() -> None: ...

    for mistake in (lambda: view_tool(orders), lambda: view_tool(orders, orders)):
        with pytest.raises(TypeError, match=rf"@{adapter}\.view_tool\(mcp\).*got 'orders'"):
            mistake()
