"""The framework-free part of exposing views and models: what both adapters' tools return for a
page, and how a row's values are written as JSON."""

from __future__ import annotations

import datetime as dt
import enum
import ipaddress
import json
import uuid
from decimal import Decimal

import pytest
from mcp.server import MCPServer
from mcp.types import CallToolResult
from pydantic import BaseModel

from mcp_common import _sdk
from mcp_common.expose import (
    ViewResponse,
    add_tool,
    error,
    html_to_text,
    json_value,
    page_result,
    pluralize,
    query_pairs,
    tool_arguments,
    tool_function,
    view_result,
)


def test_a_page_reads_as_its_text_without_scripts_and_with_its_blocks_on_lines() -> None:
    page = (
        "<html><head><title>Order</title><style>h1 {color: red}</style><script>if (a < b) x();</script></head>"
        "<body><h1>Order A-2</h1><p>Customer: Alice &amp; co.<br>Paid</p><ul><li>one</li><li>two</li></ul>"
        "<template><p>hidden</p></template></body></html>"
    )
    result = view_result(ViewResponse(200, "text/html; charset=utf-8", page.encode()))
    assert result.content[0].text == "Order\n\nOrder A-2\nCustomer: Alice & co.\nPaid\none\ntwo"  # type: ignore[union-attr]
    assert html_to_text("a<hr/>b") == "a\nb"


class Colour(enum.Enum):
    RED = "red"


def test_values_are_written_as_djangos_json_encoder_writes_them() -> None:
    assert json_value(dt.datetime(2026, 11, 4, 9, 0, tzinfo=dt.UTC)) == "2026-11-04T09:00:00Z"
    assert json_value(dt.datetime(2026, 11, 4, 9, 0, 0, 123456)) == "2026-11-04T09:00:00.123"
    assert json_value(dt.date(2026, 11, 4)) == "2026-11-04"
    assert json_value(dt.time(9, 30, 0, 500000)) == "09:30:00.500"
    assert json_value(dt.timedelta(days=1, hours=2, seconds=3)) == "P1DT02H00M03S"
    assert json_value(Decimal("7.25")) == "7.25"
    key = uuid.uuid4()
    assert json_value([key, Colour.RED]) == [str(key), "red"]


def test_postgresql_addresses_and_ranges_are_written_as_json() -> None:
    """psycopg reads an ``inet``/``cidr`` column as an ``ipaddress`` object (under SQLAlchemy)
    and a range column as a ``Range``: JSON has no such values, and a page holding one failed
    as a server error. An address is its text; a range is written as Django's ``dumpdata``
    writes a ``RangeField``'s value, its bounds as values are written."""
    from psycopg.types.range import Range as PsycopgRange
    from sqlalchemy.dialects.postgresql import Range as SQLAlchemyRange

    assert json_value([ipaddress.ip_address("10.0.0.1"), ipaddress.ip_network("2001:db8::/32")]) == [
        "10.0.0.1", "2001:db8::/32",
    ]  # fmt: skip
    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    for kind in (PsycopgRange, SQLAlchemyRange):
        assert json_value(kind(start, None)) == {"lower": "2026-01-01T00:00:00Z", "upper": None, "bounds": "[)"}
        assert json_value(kind(1, 10, bounds="[]")) == {"lower": 1, "upper": 10, "bounds": "[]"}
    assert json_value(PsycopgRange(empty=True)) == {"empty": True}
    assert json_value(SQLAlchemyRange(empty=True)) == {"empty": True}


def test_a_float_json_cannot_write_is_null_in_the_text_as_in_the_structured_content() -> None:
    """PostgreSQL's float columns hold ``NaN`` and the infinities: the page's text said ``NaN``,
    which is not JSON (a client parsing it fails), while its structured content said ``null``."""
    row = {"weight": json_value(float("nan")), "depth": json_value([float("inf"), -float("inf"), 1.5])}
    page = page_result([row], 1, 1, 20)
    assert json.loads(page.content[0].text, parse_constant=pytest.fail) == page.structured_content  # type: ignore[union-attr]
    assert page.structured_content == {
        "results": [{"weight": None, "depth": [None, None, 1.5]}], "count": 1, "page": 1, "pages": 1,
    }  # fmt: skip


def test_query_strings_and_plurals() -> None:
    assert query_pairs({"tag": ["a", "b"], "open": True, "day": dt.date(2026, 1, 2)}) == [
        ("tag", "a"), ("tag", "b"), ("open", "true"), ("day", "2026-01-02"),
    ]  # fmt: skip
    assert [pluralize(n) for n in ("order", "category", "box", "day")] == ["orders", "categories", "boxes", "days"]


class Window(BaseModel):
    start: dt.date
    days: int


def test_a_views_arguments_reach_it_as_their_json_values() -> None:
    """An enum is sent as its value (never ``Colour.RED``), a nested model as its fields: as the
    query string and as a JSON body alike."""
    spec = tool_arguments({}, {"colour": Colour, "window": (Window | None, None), "total": (Decimal, 0)}, "test")
    path, rest = spec.split({"colour": Colour.RED, "window": Window(start=dt.date(2026, 1, 2), days=3), "total": 0})
    assert path == {} and rest == {"colour": "red", "window": {"start": "2026-01-02", "days": 3}, "total": 0}
    assert query_pairs(spec.split({"colour": Colour.RED, "window": None})[1]) == [("colour", "red")]


def test_a_tool_name_the_server_already_has_is_refused_at_start_up() -> None:
    server = MCPServer("Shop")

    @server.tool()
    def list_orders() -> str:
        return "the hand-written one"

    def call(values: dict[str, object]) -> CallToolResult:
        return error("never called")

    spec = tool_arguments({}, None, "test")
    with pytest.raises(ValueError, match="already has a tool named 'list_orders'"):
        add_tool(server, "list_orders", "Generated.", spec, call, None)
    add_tool(server, "list_all_orders", "Generated.", spec, call, None)
    assert sorted(tool.name for tool in _sdk.all_tools(server)) == ["list_all_orders", "list_orders"]


def test_an_argument_nested_too_deeply_to_pass_on_is_the_callers_mistake(caplog: pytest.LogCaptureFixture) -> None:
    """A view tool's ``dict`` argument nested hundreds of levels deep cannot be written as JSON
    for the view (pydantic stops at 255 levels): the caller is told, naming the argument, and
    the log holds no traceback, rather than "Error executing tool" and an ERROR with one."""
    reached: list[dict[str, object]] = []

    def call(values: dict[str, object]) -> CallToolResult:
        reached.append(values)
        return CallToolResult(content=[])

    fn = tool_function("echo", None, tool_arguments({}, {"payload": dict}, "test"), call)

    def nested(depth: int) -> dict[str, object]:
        value: dict[str, object] = {"leaf": 1}
        for _ in range(depth - 1):
            value = {"a": value}
        return value

    refused = fn(payload=nested(300))
    assert refused.is_error is True and "'payload'" in refused.content[0].text and not reached  # type: ignore[union-attr]
    assert not [record for record in caplog.records if record.exc_info]
    fn(payload=nested(50))
    assert len(reached) == 1
