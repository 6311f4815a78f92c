"""Existing Django views and models as tools (``mcp_django.view_tool``, ``model_tools``): the
view runs as the caller, its answer becomes the tool's result, and the model's rows are read
through the caller's queryset, on both views and both protocol eras."""

from __future__ import annotations

import datetime as dt
import io
import json
import warnings
from decimal import Decimal
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.http import HttpRequest, HttpResponse
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from example_project.django_site.shop.models import Order
from mcp_django import view_tool
from tests.django import inprocess
from tests.django.exposed_site import Document, Profile, Reading, Shift
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

pytestmark = pytest.mark.django_db(transaction=True)

PATHS = ["/mcp-sync", "/mcp-async"]
ERAS = ["legacy", "modern"]


class Caller(inprocess.Caller):
    """One user on the exposed shop's server at ``path``, on one protocol era."""

    def __init__(self, path: str, era: str, user: User | None = None) -> None:
        super().__init__("tests.django.exposed_site", path, era, user)

    def tools(self) -> dict[str, dict[str, Any]]:
        return {tool["name"]: tool for tool in self.tool_list()}

    def call(self, name: str, **arguments: Any) -> dict[str, Any]:
        answer = self.call_tool(name, arguments)
        assert "result" in answer, answer
        return dict(answer["result"])


@pytest.fixture
def shop() -> dict[str, User]:
    alice = User.objects.create_user("alice")
    bob = User.objects.create_user("bob")
    clerk = User.objects.create_user("clerk", is_staff=True)
    for user in (alice, bob, clerk):
        user.user_permissions.add(Permission.objects.get(codename="view_order"))
    clerk.user_permissions.add(Permission.objects.get(codename="change_order"))
    placed = dt.datetime(2026, 11, 1, 9, 0, tzinfo=dt.UTC)
    for number, customer, status, total, owner in (
        ("A-1", "Alice Ltd", "paid", "19.90", alice),
        ("A-2", "Alice Ltd", "new", "5.00", alice),
        ("A-3", "Alice Ltd", "shipped", "7.25", alice),
        ("B-1", "Bob & Sons", "paid", "120.00", bob),
    ):
        Order.objects.create(
            number=number, customer=customer, status=status, total=Decimal(total), owner=owner,
            placed=placed + dt.timedelta(days=int(number[-1]) + (10 if owner is bob else 0)),
        )  # fmt: skip
    return {"alice": alice, "bob": bob, "clerk": clerk}


# -- views -------------------------------------------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("path", PATHS)
def test_a_json_view_answers_as_structured_content_for_the_caller(path: str, era: str, shop: dict[str, User]) -> None:
    caller = Caller(path, era, shop["alice"])
    tools = caller.tools()
    schema = tools["order_list"]["inputSchema"]
    assert set(schema["properties"]) == {"status", "page"} and not schema.get("required")
    assert tools["order_list"]["description"] == "The shop's orders, as its JSON API lists them."
    result = caller.call("order_list", status="paid", page=2)
    expected = {
        "orders": ["A-1", "B-1"], "page": "2", "user": "alice", "path": "/orders", "link": "/orders/A-1",
        "language": "en-us",
    }  # fmt: skip
    assert result["structuredContent"] == expected
    assert json.loads(text(result)) == expected and not result.get("isError")
    # Unset optional arguments are not sent: the view sees no status at all.
    assert Caller(path, era).call("order_list")["structuredContent"]["orders"] == ["A-1", "A-2", "A-3", "B-1"]


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("path", PATHS)
def test_an_html_view_answers_its_text_and_its_decorators_apply(path: str, era: str, shop: dict[str, User]) -> None:
    check_an_html_page(Caller(path, era, shop["alice"]), Caller(path, era))


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("path", PATHS)
def test_a_view_adding_a_message_shows_it(path: str, era: str, shop: dict[str, User]) -> None:
    """``messages.success(request, ...)`` failed the call as a server error: the view's request
    had none of the storage ``MessageMiddleware`` put on the MCP request."""
    saved = Caller(path, era, shop["alice"]).call("save_note")
    assert not saved.get("isError") and text(saved) == "Note saved.", saved


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("path", PATHS)
def test_a_post_view_gets_its_arguments_as_a_json_body_under_its_own_permission(
    path: str, era: str, shop: dict[str, User]
) -> None:
    refused = Caller(path, era, shop["alice"]).call("cancel_order", number="A-2", reason="changed my mind")
    assert refused["isError"] is True and text(refused) == "403 Forbidden"
    assert Order.objects.get(number="A-2").status == "new"
    done = Caller(path, era, shop["clerk"]).call("cancel_order", number="A-2", reason="changed my mind")
    assert done["structuredContent"] == {"number": "A-2", "status": "cancelled", "reason": "changed my mind"}
    assert Order.objects.get(number="A-2").status == "cancelled"


def test_a_class_based_view_without_a_docstring_is_not_described_by_djangos_view() -> None:
    # inspect.getdoc() would hand the client View's own docstring ("Intentionally simple parent
    # class for all views...") as what the tool does.
    from django.views import View
    from mcp.server import MCPServer

    from mcp_common import _sdk

    class Tally(View):
        def get(self, request: HttpRequest) -> HttpResponse:
            return HttpResponse("3")

    server = MCPServer("undocumented")
    view_tool(server, Tally)
    (tool,) = _sdk.registered_tools(server)
    assert tool.description == "Calls the view tally."


def test_a_class_based_views_tool_is_named_as_django_names_a_class() -> None:
    # As Django's verbose names read a model's class name ("HTTPLog": "http log"): an acronym
    # is one word, not one per letter ("order_a_p_i_view").
    from django.views import View
    from mcp.server import MCPServer

    from mcp_common import _sdk

    class OrderAPIView(View):
        def get(self, request: HttpRequest) -> HttpResponse:
            return HttpResponse("3")

    server = MCPServer("names")
    view_tool(server, OrderAPIView)
    assert [tool.name for tool in _sdk.registered_tools(server)] == ["order_api_view"]


@pytest.mark.parametrize("path", PATHS)
def test_class_based_and_async_views(path: str, shop: dict[str, User]) -> None:
    caller = Caller(path, "modern", shop["bob"])
    tools = caller.tools()
    assert tools["order_count"]["description"] == "How many orders the shop has (a class-based view)."
    assert caller.call("order_count")["structuredContent"] == {"count": 4}
    assert caller.call("order_count_view")["structuredContent"] == {"count": 4}
    assert caller.call("whoami")["structuredContent"] == {"user": "bob", "method": "GET"}
    # An async view's stream from an async generator is read, as Django's ASGI handler reads it.
    roll = caller.call("till_roll")
    assert not roll.get("isError") and text(roll) == "receipt 0\nreceipt 1\nreceipt 2\n", roll


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("path", PATHS)
def test_what_a_tool_cannot_return_is_a_clear_error_and_a_crash_tells_nothing(
    path: str, era: str, shop: dict[str, User], caplog: pytest.LogCaptureFixture
) -> None:
    check_what_a_tool_cannot_return(Caller(path, era, shop["bob"]), caplog, "I'm a Teapot")


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("path", PATHS)
def test_a_signed_in_caller_sent_to_the_login_page_is_told_the_view_refuses_them(
    path: str, era: str, shop: dict[str, User]
) -> None:
    """``permission_required`` (and ``user_passes_test``) without ``raise_exception`` redirect
    to the login page whoever fails: signing in is no answer for a caller who already is."""
    anonymous = Caller(path, era).call("purge_orders")
    assert anonymous["isError"] is True and text(anonymous).startswith("Authentication required")
    alice = Caller(path, era, shop["alice"]).call("purge_orders")
    assert alice["isError"] is True and text(alice) == (
        "403 Forbidden: the view sends the caller, who is signed in, to its login page "
        "(a permission or test it requires refuses them)."
    )


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("path", PATHS)
def test_a_login_page_of_the_views_own_is_known_by_the_way_back_it_is_given(
    path: str, era: str, shop: dict[str, User]
) -> None:
    """A view that sends callers to a login page other than ``LOGIN_URL`` (``staff_member_required``
    to the admin's, ``login_url=`` of its own) was answered "redirected (302) to ...": Django's
    checks all send them there with the way back (``?next=`` and the view's path), and that is
    what says it is a login page."""
    anonymous = Caller(path, era).call("sales_report")
    assert anonymous["isError"] is True and text(anonymous).startswith("Authentication required"), anonymous
    alice = Caller(path, era, shop["alice"]).call("sales_report")
    assert alice["isError"] is True and text(alice).startswith("403 Forbidden"), alice
    assert text(Caller(path, era, shop["clerk"]).call("sales_report")) == "sales: 3 orders"


LOGIN_REQUIRED = "django.contrib.auth.middleware.LoginRequiredMiddleware"


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("path", ["/mcp-open", "/mcp-open-async"])
def test_login_required_middleware_guards_a_view_tool_as_it_guards_the_views_url(
    path: str, era: str, shop: dict[str, User]
) -> None:
    """A project guarding every view with ``LoginRequiredMiddleware`` (its endpoint opened to
    token or anonymous callers with ``login_not_required``): a view it guards is refused to an
    anonymous caller of its tool, as its URL refuses a browser; a ``login_not_required`` one is not."""
    with override_settings(MIDDLEWARE=[*settings.MIDDLEWARE, LOGIN_REQUIRED]):
        anonymous = Caller(path, era)
        refused = anonymous.call("price_list")
        assert refused["isError"] is True and text(refused).startswith("Authentication required"), refused
        assert text(anonymous.call("opening_hours")) == "9 to 5"
        alice = Caller(path, era, shop["alice"]).call("price_list")
        assert alice["structuredContent"] == {"prices": {"tea": "2.50"}, "user": "alice"}
    # Without the middleware, the view is open (nothing else guards it).
    assert Caller(path, era).call("price_list")["structuredContent"]["user"] is None


@pytest.mark.parametrize("era", ERAS)
def test_a_permission_on_the_view_hides_its_tool(era: str, shop: dict[str, User]) -> None:
    """Below or above ``view_tool``, on a function or a class-based view."""
    guarded = {"staff_note", "staff_note_above", "staff_count"}
    bob = Caller("/mcp-sync", era, shop["bob"])
    assert not guarded & set(bob.tools())
    assert bob.call_tool("staff_note_above", {})["result"]["content"][0]["text"] == "Unknown tool: staff_note_above"
    clerk = Caller("/mcp-sync", era, shop["clerk"])
    assert guarded <= set(clerk.tools())
    assert text(clerk.call("staff_note")) == "for staff only"
    assert text(clerk.call("staff_note_above")) == "for staff only, too"
    assert clerk.call("staff_count")["structuredContent"] == {"count": 4}


@pytest.mark.parametrize("path", PATHS)
def test_an_enum_argument_reaches_the_view_as_its_value(path: str, shop: dict[str, User]) -> None:
    caller = Caller(path, "modern", shop["bob"])
    body = caller.call("flag_order", priority="high", tags=["low"])
    assert body["structuredContent"] == {"priority": "high", "tags": ["low"]}, body
    assert text(caller.call("flag_query", priority="low")) == "priority=low"


@pytest.mark.parametrize("path", PATHS)
def test_a_path_argument_its_url_would_not_match_does_not_reach_the_view(path: str, shop: dict[str, User]) -> None:
    """``files/<slug:slug>``: the view trusts its URL's converter, as Django's routing lets it."""
    caller = Caller(path, "modern", shop["bob"])
    check_a_path_argument_its_url_refuses(caller, "404 Not Found")
    for bad in ("a?b=c", "a#b", "caf\u00e9"):  # a slug's converter refuses these too
        refused = caller.call("shop_file", slug=bad)
        assert refused["isError"] is True and text(refused) == "404 Not Found", bad


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(
    ("tool", "answer"),
    [
        ("catalog_item", "item price-list at /catalog/items/price-list"),  # inside a namespace
        ("shelf", "shelf price-list at /shelves/price-list"),  # a class given as its class
        ("aisle", "aisle price-list at /catalog/aisles/price-list"),  # url_name=
    ],
)
def test_a_view_routed_by_namespace_or_class_still_gets_only_what_its_url_admits(
    path: str, tool: str, answer: str, shop: dict[str, User]
) -> None:
    """``reverse(view)`` finds neither a view inside a namespaced ``include()`` nor a class
    routed through its own ``as_view()``: the view's URL is found all the same, the view sees
    it as its path, and a value its converter refuses does not reach it."""
    caller = Caller(path, "modern", shop["bob"])
    assert text(caller.call(tool, slug="price-list")) == answer
    for bad in ("../../settings.py", "a/b", ""):
        refused = caller.call(tool, slug=bad)
        assert refused["isError"] is True and text(refused) == "404 Not Found", (tool, bad, refused)


@pytest.mark.parametrize("path", PATHS)
def test_a_value_its_url_admits_reaches_the_view_even_when_the_url_encodes_it(path: str, shop: dict[str, User]) -> None:
    """``tags/(?P<slug>[-\\w]+)``: ``reverse()`` percent-encodes "crème-brûlée", which is not
    what Django routes (nor what the view's request has as its path): the decoded path is. A
    value the pattern refuses still does not reach the view."""
    caller = Caller(path, "modern", shop["bob"])
    for slug in ("price-list", "cr\u00e8me-br\u00fbl\u00e9e", "\u0447\u0430\u0439"):
        assert text(caller.call("tag", slug=slug)) == f"tag {slug} at /tags/{slug}", slug
    for bad in ("a b", "a/b", "caf%C3%A9", ""):
        refused = caller.call("tag", slug=bad)
        assert refused["isError"] is True and text(refused) == "404 Not Found", (bad, refused)


@pytest.mark.parametrize("path", PATHS)
def test_a_view_routed_with_extra_options_is_reached(path: str, shop: dict[str, User]) -> None:
    """``path("printed/<slug:slug>", view, {"edition": "print"})``: the URL's match carries the
    option besides the captured slug; the tool, whose only path argument is the slug, still
    reaches the view at that URL."""
    caller = Caller(path, "modern", shop["bob"])
    printed = text(caller.call("printed_edition", slug="price-list"))
    assert printed == "printed price-list ({'edition': 'print'}) at /printed/price-list"
    refused = caller.call("printed_edition", slug="a/b")
    assert refused["isError"] is True and text(refused) == "404 Not Found", refused


@pytest.mark.parametrize("path", PATHS)
def test_a_urls_extra_options_reach_the_view_as_django_passes_them_and_are_no_tool_arguments(
    path: str, shop: dict[str, User]
) -> None:
    """``path("reports/<int:pk>/", report, {"fmt": "csv"})`` with ``report(request, pk, fmt="html")``:
    Django calls ``report(request, pk=3, fmt="csv")``. The tool does the same, and ``fmt`` is not
    an argument a caller can set: the URL decides it."""
    caller = Caller(path, "modern", shop["bob"])
    schema = caller.tools()["report"]["inputSchema"]
    assert set(schema["properties"]) == {"pk"} and schema.get("required") == ["pk"], schema
    assert text(caller.call("report", pk=3)) == "report 3 as csv at /reports/3/"
    assert text(caller.call("report", pk=3, fmt="pdf")) == "report 3 as csv at /reports/3/"


@pytest.mark.parametrize("path", PATHS)
def test_a_view_parameter_no_url_captures_keeps_its_default_and_is_no_tool_argument(
    path: str, shop: dict[str, User]
) -> None:
    """``path("ledgers/<int:pk>/", ledger)`` with ``ledger(request, pk, fmt="html")``: Django
    calls ``ledger(request, pk=3)``, so ``fmt`` is the view's default. The tool reaches the view
    the same way (it answered 404, its URL having no place for ``fmt``) and does not offer
    ``fmt`` to a caller, whose value no URL could carry."""
    caller = Caller(path, "modern", shop["bob"])
    schema = caller.tools()["ledger"]["inputSchema"]
    assert set(schema["properties"]) == {"pk"} and schema.get("required") == ["pk"], schema
    assert text(caller.call("ledger", pk=3)) == "ledger 3 as html at /ledgers/3/"


@pytest.mark.parametrize("path", PATHS)
def test_a_view_whose_url_name_another_view_shares_is_reached(path: str, shop: dict[str, User]) -> None:
    """Two apps' URLs named "detail", included without a namespace: each view's tool reaches
    its own URL (``reverse`` by the view, as before namespaces were looked at, not by the
    name, which finds only one of them)."""
    caller = Caller(path, "modern", shop["bob"])
    assert text(caller.call("blog_post", slug="launch")) == "post launch at /blog/launch"
    assert text(caller.call("news_story", slug="launch")) == "story launch at /news/launch"
    refused = caller.call("blog_post", slug="a/b")
    assert refused["isError"] is True and text(refused) == "404 Not Found", refused


@pytest.mark.parametrize("path", PATHS)
def test_a_view_routed_with_and_without_an_optional_argument_is_reached_both_ways(
    path: str, shop: dict[str, User]
) -> None:
    caller = Caller(path, "modern", shop["bob"])
    assert text(caller.call("archive")) == "archive None at /archive/"
    assert text(caller.call("archive", year=2024)) == "archive 2024 at /archive/2024"
    refused = caller.call("archive", year=-1)  # <int:...> admits digits only
    assert refused["isError"] is True and text(refused) == "404 Not Found", refused


@pytest.mark.parametrize("path", PATHS)
def test_a_view_routed_by_unnamed_groups_gets_its_arguments_positionally(path: str, shop: dict[str, User]) -> None:
    """``re_path(r"^yearbooks/(\\d{4})$", yearbook)``: Django calls ``yearbook(request, "2024")``.
    The tool maps the view's parameters to the groups in their order, and a value the pattern
    refuses still does not reach the view."""
    caller = Caller(path, "modern", shop["bob"])
    assert text(caller.call("yearbook", year="2024")) == "yearbook 2024 at /yearbooks/2024"
    assert text(caller.call("month_page", year="2024", month="05")) == "month 05 of 2024 at /months/2024/05"
    for bad in ("24", "../2024", "2024/05"):
        refused = caller.call("yearbook", year=bad)
        assert refused["isError"] is True and text(refused) == "404 Not Found", (bad, refused)


@pytest.mark.parametrize("path", PATHS)
def test_a_custom_converters_text_reaches_the_view_as_its_url_would(path: str, shop: dict[str, User]) -> None:
    """``<yyyy:year>`` with Django's documented converter, whose ``to_url`` formats an integer,
    and a view whose ``year`` has no annotation, so the tool takes text: building the URL
    failed on it as a server error. The text is read as the URL's converter reads it from a
    browser's URL, and the view gets what it would get there."""
    caller = Caller(path, "modern", shop["bob"])
    assert caller.call("almanac", year="2026")["structuredContent"] == {"year": 2026, "path": "/almanacs/2026/"}
    for bad in ("26", "20261", "year"):
        refused = caller.call("almanac", year=bad)
        assert refused["isError"] is True and text(refused) == "404 Not Found", (bad, refused)


@pytest.mark.parametrize("path", PATHS)
def test_a_class_routed_twice_is_reached_past_a_pattern_of_the_other_route(path: str, shop: dict[str, User]) -> None:
    """``Bin`` routed by ``bins/``, ``bins.<str:fmt>`` (one ``as_view()``) and ``bins/<slug:slug>/``
    (another): the slug fills no group of the first, whose ``fmt`` the tool's slug would fill
    by position; the tool goes on to the second (it answered that the URL mixes named and
    unnamed groups)."""
    caller = Caller(path, "modern", shop["bob"])
    assert text(caller.call("bin", slug="top")) == "bin top at /bins/top/"


@pytest.mark.parametrize("path", PATHS)
def test_a_view_its_unnamed_groups_cannot_call_is_a_clear_error(path: str, shop: dict[str, User]) -> None:
    """A keyword-only parameter routed by an unnamed group, or a pattern mixing named and
    unnamed groups (Django passes only the named ones): Django itself could not call the view,
    so the tool says what to change instead of answering 404."""
    caller = Caller(path, "modern", shop["bob"])
    keyword = caller.call("keyword_year", year="2024")
    assert keyword["isError"] is True, keyword
    assert "keyword_year" in text(keyword) and "(?P<year>" in text(keyword), keyword
    mixed = caller.call("mixed_groups", year="2024", slug="launch")
    assert mixed["isError"] is True, mixed
    assert "mixed_groups" in text(mixed) and "(?P<year>" in text(mixed) and "unnamed" in text(mixed), mixed


@pytest.mark.parametrize("path", PATHS)
def test_an_exposed_wrapper_of_a_routed_view_gets_only_what_its_url_admits(path: str, shop: dict[str, User]) -> None:
    """``view_tool(mcp, csrf_exempt(view))`` while the URLconf routes ``view`` itself: the
    wrapper's tool is still the routed view's URL, converters included."""
    caller = Caller(path, "modern", shop["bob"])
    assert text(caller.call("shelf_label", slug="top")) == "label top at /labels/top"
    for bad in ("../../settings.py", "a/b"):
        refused = caller.call("shelf_label", slug=bad)
        assert refused["isError"] is True and text(refused) == "404 Not Found", (bad, refused)


@pytest.mark.parametrize("path", PATHS)
def test_a_view_whose_url_cannot_be_built_is_not_run(path: str, shop: dict[str, User]) -> None:
    """Unnamed inside a namespace (Django cannot reverse it), or ``url_name`` naming another
    view's URL or none: the tool errs, telling the developer what to fix, and the view never runs."""
    caller = Caller(path, "modern", shop["bob"])
    unnamed = caller.call("catalog_unnamed", slug="price-list")
    assert unnamed["isError"] is True, unnamed
    assert "catalog_unnamed" in text(unnamed) and "url_name" in text(unnamed), unnamed
    misnamed = caller.call("misnamed", slug="price-list")
    assert misnamed["isError"] is True, misnamed
    assert "catalog:item" in text(misnamed) and "misnamed" in text(misnamed), misnamed
    mistyped = caller.call("mistyped", slug="price-list")
    assert mistyped["isError"] is True, mistyped
    assert text(mistyped).startswith("No URL is named 'catalog:isle'"), mistyped


@pytest.mark.parametrize("path", PATHS)
def test_arguments_the_named_url_does_not_take_are_named_as_the_error(path: str, shop: dict[str, User]) -> None:
    """``url_name`` names the view's own URL, but the call leaves out an argument it captures:
    the error says so (not that the URL routes to another view)."""
    caller = Caller(path, "modern", shop["bob"])
    assert text(caller.call("shelf_page", slug="top", page=2)) == "shelf page 2 of top"
    missing = caller.call("shelf_page", slug="top")
    assert missing["isError"] is True, missing
    assert "another view" not in text(missing) and "catalog:shelf-page" in text(missing), missing
    assert "page" in text(missing).split("catalog:shelf-page")[1], missing
    # The zoom, which the URL does not take, is the view's default (None), no tool argument.
    assert "zoom" not in caller.tools()["aisle_map"]["inputSchema"]["properties"]
    assert text(caller.call("aisle_map", slug="top", zoom=3)) == "aisle map top at zoom None"
    refused = caller.call("shelf_page", slug="a/b", page=2)  # a value, not the arguments: 404
    assert refused["isError"] is True and text(refused) == "404 Not Found", refused


@pytest.mark.parametrize("path", PATHS)
def test_a_view_inside_an_include_whose_prefix_captures_is_reached(path: str, shop: dict[str, User]) -> None:
    """``path("branches/<slug:branch>/", include([...]))``: the branch is the view's argument
    too (Django's match counts only the innermost pattern's as captured, the include's besides);
    by ``url_name`` it was said to route "to another view", found by the view it answered 404."""
    caller = Caller(path, "modern", shop["bob"])
    item = caller.call("branch_item", branch="north", slug="top")
    assert text(item) == "item top of north at /branches/north/items/top", item
    stock = caller.call("branch_stock", branch="north", slug="top")
    assert text(stock) == "stock top of north at /branches/north/stock/top", stock
    for tool in ("branch_item", "branch_stock"):
        refused = caller.call(tool, branch="a/b", slug="top")
        assert refused["isError"] is True and text(refused) == "404 Not Found", (tool, refused)


# -- models ------------------------------------------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("path", PATHS)
def test_a_model_is_listed_page_by_page_through_the_callers_queryset(
    path: str, era: str, shop: dict[str, User]
) -> None:
    owners = {name: user.pk for name, user in shop.items()}
    check_pages_filters_and_search(Caller(path, era, shop["alice"]), Caller(path, era, shop["clerk"]), "owner", owners)


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("path", PATHS)
def test_one_row_by_key_only_within_the_callers_queryset(path: str, era: str, shop: dict[str, User]) -> None:
    alice = Caller(path, era, shop["alice"])
    own = Order.objects.get(number="A-1")
    assert alice.call("get_order", id=own.pk)["structuredContent"]["number"] == "A-1"
    bobs = Order.objects.get(number="B-1")
    refused = alice.call("get_order", id=bobs.pk)
    assert refused["isError"] is True and text(refused) == f"No order with id {bobs.pk}."


def test_a_key_no_column_can_hold_matches_no_row(shop: dict[str, User], caplog: pytest.LogCaptureFixture) -> None:
    """A foreign key's filter given an integer past what its column holds (past 64 bits on
    SQLite, past 32 bits for ``auth_user.id`` on PostgreSQL) failed as a server error: Django
    matches nothing for such an integer column, not for a foreign key to one. It matches
    nothing, as the key of ``get_order`` does."""
    clerk = Caller("/mcp-sync", "modern", shop["clerk"])
    for key in (2**31, -(2**31) - 1, 2**63, 2**70):
        missing = clerk.call("get_order", id=key)
        assert missing["isError"] is True and text(missing) == f"No order with id {key}.", missing
        listed = clerk.call("list_orders", owner=key)
        assert (listed["structuredContent"]["results"], listed["structuredContent"]["count"]) == ([], 0), listed
    assert not [record for record in caplog.records if record.exc_info], caplog.text
    assert clerk.call("list_orders", owner=shop["bob"].pk)["structuredContent"]["count"] == 1


def test_a_key_that_is_a_relation_past_what_its_column_holds_matches_no_row(
    shop: dict[str, User], caplog: pytest.LogCaptureFixture
) -> None:
    """A profile keyed by its user (``OneToOneField(primary_key=True)``, as a multi-table
    child's ``place_ptr`` is): ``get_profile`` given an integer past the column failed as a
    server error, as the foreign key's filter did."""
    with connection.schema_editor() as editor:
        editor.create_model(Profile)
    try:
        Profile.objects.create(user=shop["bob"], nickname="Bobby")
        caller = Caller("/mcp-sync", "modern")
        for key in (2**63, 2**70):
            missing = caller.call("get_profile", user=key)
            assert missing["isError"] is True and text(missing) == f"No profile with user {key}.", missing
            assert caller.call("list_profiles", user=key)["structuredContent"]["count"] == 0
        assert not [record for record in caplog.records if record.exc_info], caplog.text
        found = caller.call("get_profile", user=shop["bob"].pk)["structuredContent"]
        assert found == {"user": shop["bob"].pk, "nickname": "Bobby"}
    finally:
        with connection.schema_editor() as editor:
            editor.delete_model(Profile)


@pytest.mark.parametrize("era", ERAS)
def test_model_tools_need_the_models_view_permission_and_check_their_arguments(era: str, shop: dict[str, User]) -> None:
    anonymous = Caller("/mcp-sync", era)
    assert not {"list_orders", "get_order"} & set(anonymous.tools())
    nobody = Caller("/mcp-sync", era, User.objects.create_user("nobody"))
    assert "list_orders" not in nobody.tools()
    alice = Caller("/mcp-sync", era, shop["alice"])
    for bad in ({"page": 0}, {"page": 10**7}, {"page_size": 500}, {"status": "lost"}):
        answer = alice.send("tools/call", {"name": "list_orders", "arguments": bad}, "list_orders")
        assert answer["result"]["isError"] is True, bad
        assert "validation error" in text(answer["result"]), bad


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("path", PATHS)
def test_text_no_database_or_url_can_carry_is_a_clear_argument_error(
    path: str, era: str, shop: dict[str, User], caplog: pytest.LogCaptureFixture
) -> None:
    check_text_nothing_downstream_can_carry_is_refused(Caller(path, era, shop["clerk"]), caplog)
    check_a_search_too_long_to_match_is_refused(Caller(path, era, shop["clerk"]), caplog)


def test_an_ordering_naming_no_field_fails_at_start_up() -> None:
    """A misspelt ``ordering=`` was accepted, and every call of the list tool then failed as a
    server error: it is refused when the tools are registered, naming it, as Flask's are."""
    from django.core.exceptions import ImproperlyConfigured
    from mcp.server import MCPServer

    from mcp_django import model_tools

    server = MCPServer("Misconfigured")
    for ordering in (["-plaaced"], ["customer", "owner__nickname"], ["?"]):
        with pytest.raises(ImproperlyConfigured, match="ordering"):
            model_tools(server, Order, fields=["number"], ordering=ordering, permission=None)
    model_tools(server, Order, fields=["number"], ordering=["-placed", "owner__username", "pk"], permission=None)


def test_model_tool_names_do_not_follow_the_language_active_at_registration() -> None:
    """The server module may be imported during a request (the URLconf loads lazily), with
    LocaleMiddleware's language active: ``User``'s verbose name is "utilisateur" in French, yet
    the tools are ``list_users`` and ``get_user`` in every worker, whoever came first."""
    from django.utils import translation
    from mcp.server import MCPServer

    from mcp_common import _sdk
    from mcp_django import model_tools

    server = MCPServer("Names")
    with translation.override("fr"):
        assert str(User._meta.verbose_name) == "utilisateur"  # the translation is there
        model_tools(server, User, fields=["id", "username"], permission=None)
    assert sorted(tool.name for tool in _sdk.all_tools(server)) == ["get_user", "list_users"]


def test_model_tool_names_are_ascii_whatever_the_models_verbose_name() -> None:
    """A project naming its models in its own language (``verbose_name = "pièce jointe"``) got
    ``list_pièces_jointes``: outside the characters MCP tool names may hold (SEP-986; the SDK
    warns at start-up, and clients that check names refuse the tool). Accents are dropped; a
    verbose name with no ASCII letter at all is refused at start-up, asking for ``names=``."""
    from mcp.server import MCPServer
    from mcp.shared.tool_name_validation import validate_tool_name

    from mcp_common import _sdk
    from mcp_django import model_tools

    meta = Document._meta
    original = meta.verbose_name, meta.verbose_name_plural
    french, chinese = MCPServer("Noms"), MCPServer("名称")
    try:
        meta.verbose_name, meta.verbose_name_plural = "pièce jointe", "pièces jointes"
        model_tools(french, Document, fields=["title"], permission=None)
        meta.verbose_name = meta.verbose_name_plural = "文件"
        with pytest.raises(ValueError, match="names="):
            model_tools(chinese, Document, fields=["title"], permission=None)
        named = {"list": "list_files", "get": "get_file"}
        model_tools(chinese, Document, fields=["title"], permission=None, names=named)
    finally:
        meta.verbose_name, meta.verbose_name_plural = original
    assert sorted(tool.name for tool in _sdk.all_tools(french)) == ["get_piece_jointe", "list_pieces_jointes"]
    assert sorted(tool.name for tool in _sdk.all_tools(chinese)) == ["get_file", "list_files"]
    for server in (french, chinese):
        assert all(validate_tool_name(tool.name).is_valid for tool in _sdk.all_tools(server))


@pytest.mark.parametrize("path", PATHS)
def test_a_file_column_reads_as_its_name_and_a_binary_one_as_null(path: str) -> None:
    with connection.schema_editor() as editor:
        editor.create_model(Document)
    try:
        Document.objects.create(title="Receipt", scan="scans/receipt.pdf", digest=b"\x00\xff")
        Document.objects.create(title="Blank")
        caller = Caller(path, "modern")
        listed = caller.call("list_documents")
        assert not listed.get("isError"), listed
        assert [(row["title"], row["scan"], row["digest"]) for row in listed["structuredContent"]["results"]] == [
            ("Receipt", "scans/receipt.pdf", None),
            ("Blank", None, None),
        ]
        one = caller.call("get_document", id=Document.objects.get(title="Receipt").pk)
        assert one["structuredContent"]["scan"] == "scans/receipt.pdf"
    finally:
        with connection.schema_editor() as editor:
            editor.delete_model(Document)


@pytest.mark.parametrize("path", PATHS)
def test_time_and_duration_filters_take_the_values_the_rows_show(path: str, caplog: pytest.LogCaptureFixture) -> None:
    """A duration filter reached the query as text, which Django cannot store as a duration on
    SQLite or MySQL: every call failed as a server error. A time or duration is typed as one
    (ISO 8601, as the rows show them), and a value that is neither is the caller's mistake."""
    with connection.schema_editor() as editor:
        editor.create_model(Shift)
    try:
        Shift.objects.create(starts=dt.time(9, 30), length=dt.timedelta(hours=8))
        Shift.objects.create(starts=dt.time(22, 0), length=dt.timedelta(hours=10, minutes=30))
        caller = Caller(path, "modern")
        night = caller.call("list_shifts", length="P0DT10H30M00S")["structuredContent"]["results"]
        assert [(row["starts"], row["length"]) for row in night] == [("22:00:00", "P0DT10H30M00S")]
        day = caller.call("list_shifts", starts="09:30:00")["structuredContent"]["results"]
        assert [row["length"] for row in day] == ["P0DT08H00M00S"]
        properties = caller.tools()["list_shifts"]["inputSchema"]["properties"]
        assert {"type": "string", "format": "duration"} in properties["length"]["anyOf"]
        assert {"type": "string", "format": "time"} in properties["starts"]["anyOf"]
        caplog.clear()
        # A time of day with an offset: Django cannot compare one with a TimeField on SQLite or MySQL.
        for bad in ({"length": "a while"}, {"starts": "teatime"}, {"starts": "09:30:00Z"}):
            refused = caller.call("list_shifts", **bad)
            assert refused["isError"] is True and "validation error" in text(refused), (bad, refused)
        assert not [record for record in caplog.records if record.exc_info], caplog.text
    finally:
        with connection.schema_editor() as editor:
            editor.delete_model(Shift)


@pytest.mark.parametrize("use_tz", [True, False])
def test_a_date_time_filter_takes_a_time_with_or_without_an_offset(use_tz: bool) -> None:
    """Without ``USE_TZ`` Django cannot compare a time with an offset on SQLite or MySQL (it
    raises: the call failed as a server error); with it, a naive one warned on every call. A
    filter's time is read as Django reads a form's: in the current time zone, when it has no
    offset (``TIME_ZONE``, UTC here)."""
    with override_settings(USE_TZ=use_tz), connection.schema_editor() as editor:
        editor.create_model(Shift)
    try:
        with override_settings(USE_TZ=use_tz, TIME_ZONE="UTC"), warnings.catch_warnings():
            warnings.simplefilter("error")  # a naive datetime while time zone support is active
            at = dt.datetime(2026, 3, 1, 9, 30, tzinfo=dt.UTC if use_tz else None)
            Shift.objects.create(starts=dt.time(9, 30), length=dt.timedelta(hours=8), rostered=at)
            caller = Caller("/mcp-sync", "modern")
            for rostered in ("2026-03-01T09:30:00Z", "2026-03-01T10:30:00+01:00", "2026-03-01T09:30:00"):
                found = caller.call("list_shifts", rostered=rostered)
                assert found.get("structuredContent", {}).get("count") == 1, (rostered, found)
    finally:
        with connection.schema_editor() as editor:
            editor.delete_model(Shift)


@pytest.mark.parametrize("path", PATHS)
def test_a_value_a_model_tool_shows_finds_its_row_as_a_filter(path: str, caplog: pytest.LogCaptureFixture) -> None:
    """Times are shown to the millisecond: a time with microseconds sent back as shown missed
    its row. A ``JSONField`` filter took only text (a JSON string); sent an object in another
    key order, it missed on SQLite and MariaDB, which compare JSON as text. Each value shown
    finds its row, and those showing the same value."""
    with connection.schema_editor() as editor:
        editor.create_model(Reading)
    try:
        second = dt.datetime(2026, 3, 1, 9, 30, 15, tzinfo=dt.UTC)
        for key, micro, said in ((1, 250123, {"volts": 230, "notes": ["é", None]}), (2, 0, "idle"), (3, 999, 12.5)):
            taken = second + dt.timedelta(microseconds=micro)
            Reading.objects.create(id=key, taken=taken, at=taken.time(), said=said)
        check_a_value_shown_finds_its_row(Caller(path, "modern"), "id", caplog)
    finally:
        with connection.schema_editor() as editor:
            editor.delete_model(Reading)


@pytest.mark.parametrize("path", PATHS)
def test_a_foreign_key_named_by_its_column_is_shown_and_filtered_by_that_name(path: str, shop: dict[str, User]) -> None:
    """``fields=["owner_id"]`` and ``filters=["owner_id"]``, as the model's column is named:
    they were shown, and taken, as ``owner``, not the name the project wrote."""
    with connection.schema_editor() as editor:
        editor.create_model(Reading)
    try:
        at = dt.datetime(2026, 3, 1, 9, 30, tzinfo=dt.UTC)
        Reading.objects.create(owner=shop["bob"], taken=at, at=at.time(), said=1)
        Reading.objects.create(owner=None, taken=at, at=at.time(), said=2)
        caller = Caller(path, "modern")
        properties = caller.tools()["list_readings"]["inputSchema"]["properties"]
        assert "owner_id" in properties and "owner" not in properties
        found = caller.call("list_readings", owner_id=shop["bob"].pk)["structuredContent"]["results"]
        assert [(row["owner_id"], row["said"]) for row in found] == [(shop["bob"].pk, 1)]
        assert "owner" not in found[0]
    finally:
        with connection.schema_editor() as editor:
            editor.delete_model(Reading)


def test_a_page_tells_the_count_when_it_is_not_full() -> None:
    """Every page paid a ``COUNT(*)`` of the whole listing: a page neither full nor past the
    end holds the last row, and so tells the count; the others still count."""
    with connection.schema_editor() as editor:
        editor.create_model(Reading)
    try:
        at = dt.datetime(2026, 3, 1, 9, 30, tzinfo=dt.UTC)
        for key in (1, 2, 3):
            Reading.objects.create(id=key, taken=at, at=at.time(), said=key)
        caller = Caller("/mcp-sync", "modern")
        for arguments, shown, counts in (
            ({}, [1, 2, 3], 0),
            ({"page_size": 2, "page": 2}, [3], 0),
            ({"page_size": 2}, [1, 2], 1),
            ({"page_size": 2, "page": 3}, [], 1),
        ):
            with CaptureQueriesContext(connection) as queries:
                listed = caller.call("list_readings", **arguments)["structuredContent"]
            assert [row["id"] for row in listed["results"]] == shown and listed["count"] == 3, (arguments, listed)
            assert listed["pages"] == (2 if arguments else 1), listed
            counted = [query["sql"] for query in queries.captured_queries if "COUNT(" in query["sql"].upper()]
            assert len(counted) == counts, (arguments, counted)
    finally:
        with connection.schema_editor() as editor:
            editor.delete_model(Reading)


def test_a_range_fields_value_reads_as_its_bounds() -> None:
    """psycopg reads a ``contrib.postgres`` range field as a ``Range``, which
    ``DjangoJSONEncoder`` cannot write: a page holding one failed as a server error."""
    from psycopg.types.range import Range

    from mcp_django.expose import _value

    during = Range(dt.date(2026, 1, 1), dt.date(2026, 2, 1))
    assert json.loads(json.dumps(_value(during))) == {"lower": "2026-01-01", "upper": "2026-02-01", "bounds": "[)"}


@pytest.mark.parametrize("path", PATHS)
def test_a_failing_query_is_a_bare_server_error(path: str, caplog: pytest.LogCaptureFixture) -> None:
    caller = Caller(path, "modern")
    for name, arguments in (("list_broken_orders", {}), ("get_broken_order", {"id": 1})):
        answer = caller.call(name, **arguments)
        assert answer["isError"] is True and text(answer) == "500 Internal Server Error: the query failed.", name
        assert "orders_secret" not in json.dumps(answer)
    assert sum("orders_secret" in str(record.exc_info) for record in caplog.records if record.exc_info) == 2


def wsgi_call(path: str, tool: str, cookie: str, era: str = "modern") -> dict[str, Any]:
    """``tool`` called through Django's own WSGI handler (which sets the script prefix; the
    test client does not), deployed at /shop, with LocaleMiddleware and ``Accept-Language: fr``;
    on a legacy session (``era="legacy"``) or on the 2026-07-28 wire."""
    from django.core.handlers.wsgi import WSGIHandler
    from django.urls import get_script_prefix, set_script_prefix
    from django.utils import translation

    def post(message: dict[str, Any], headers: dict[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
        body = json.dumps(message).encode()
        environ = {
            "REQUEST_METHOD": "POST", "SCRIPT_NAME": "/shop", "PATH_INFO": path, "QUERY_STRING": "",
            "SERVER_NAME": "localhost", "SERVER_PORT": "80", "SERVER_PROTOCOL": "HTTP/1.1", "HTTP_HOST": "localhost",
            "CONTENT_TYPE": "application/json", "CONTENT_LENGTH": str(len(body)), "HTTP_ACCEPT": inprocess.ACCEPT,
            "HTTP_COOKIE": f"sessionid={cookie}", "HTTP_ACCEPT_LANGUAGE": "fr",
            "wsgi.input": io.BytesIO(body), "wsgi.url_scheme": "http", "wsgi.errors": io.StringIO(),
            **{"HTTP_" + name.upper().replace("-", "_"): value for name, value in headers.items()},
        }  # fmt: skip
        statuses: list[tuple[str, dict[str, str]]] = []
        # The handler sets the script prefix, and LocaleMiddleware the language, of the thread
        # it serves on, for a server to set again at its next request: here the test's own
        # thread, whose later tests would reverse() under /shop and speak French.
        prefix = get_script_prefix()
        try:
            chunks = WSGIHandler()(environ, lambda status, headers: statuses.append((status, dict(headers))))
            data = b"".join(chunks)
        finally:
            set_script_prefix(prefix)
            translation.deactivate()
        assert statuses[0][0] == "200 OK", data
        got = {name.lower(): value for name, value in statuses[0][1].items()}
        return _answer(got, data), got

    with override_settings(
        ROOT_URLCONF="tests.django.exposed_site",
        MIDDLEWARE=[*settings.MIDDLEWARE, "django.middleware.locale.LocaleMiddleware"],
    ):
        return _call_tool(post, tool, era)


def _answer(headers: dict[str, str], data: bytes) -> dict[str, Any]:
    """The JSON-RPC answer of a JSON body, or of an SSE one's last event."""
    if headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[6:] for line in data.splitlines() if line.startswith(b"data: ") and line[6:]][-1]
    return dict(json.loads(data))


def _call_tool(post: Any, tool: str, era: str) -> dict[str, Any]:
    """``tool``'s structured content, called with ``post(message, headers)``, on a legacy session
    or on the 2026-07-28 wire."""
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": {}}}
    if era == "legacy":
        _, opened = post(inprocess.LEGACY_INIT, {})
        session = {"Mcp-Session-Id": opened["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
        answer, _ = post(call, session)
    else:
        call["params"]["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        }
        headers = {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": tool}
        answer, _ = post(call, headers)
    assert "structuredContent" in answer.get("result", {}), answer
    return dict(answer["result"]["structuredContent"])


def asgi_call(path: str, tool: str, cookie: str, era: str = "modern") -> dict[str, Any]:
    """:func:`wsgi_call` through Django's ASGI handler, behind a proxy that strips the /shop
    prefix (``FORCE_SCRIPT_NAME = "/shop"``, the scope's path without it)."""
    from tests.django.test_django_asgi import asgi_post

    def post(message: dict[str, Any], headers: dict[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
        body = json.dumps(message).encode()
        sent = {"Content-Length": str(len(body)), "Cookie": f"sessionid={cookie}", "Accept-Language": "fr", **headers}
        status, got, data = asgi_post(path, [body], sent, urlconf=None)
        assert status == 200, data
        return _answer(got, data), got

    with override_settings(
        ROOT_URLCONF="tests.django.exposed_site",
        FORCE_SCRIPT_NAME="/shop",
        MIDDLEWARE=[*settings.MIDDLEWARE, "django.middleware.locale.LocaleMiddleware"],
    ):
        return _call_tool(post, tool, era)


@pytest.mark.parametrize(
    # A legacy call answers as a stream, which Django's WSGI handler cannot take from the async
    # view (it is served under ASGI).
    ("call", "path", "era"),
    [
        (wsgi_call, "/mcp-sync", "legacy"),
        (wsgi_call, "/mcp-sync", "modern"),
        (wsgi_call, "/mcp-async", "modern"),
        (asgi_call, "/mcp-async", "legacy"),
        (asgi_call, "/mcp-async", "modern"),
        (asgi_call, "/mcp-sync", "modern"),
    ],
    ids=lambda value: getattr(value, "__name__", value),
)
@pytest.mark.parametrize("tool", ["order_list", "where_am_i", "where_am_i_async", "where_resolved"])
def test_tools_run_with_the_mcp_requests_script_prefix_and_language(
    call: Any, path: str, tool: str, era: str, shop: dict[str, User]
) -> None:
    """Deployed at /shop with LocaleMiddleware: in a view tool, in plain SDK tools, sync or
    async, and in a tool's resolvers (``where_resolved``), ``reverse()`` and the active language
    are the MCP request's, on whichever thread they run; a view tool's request has the prefix
    once. Under ASGI too, where Django leaves ``FORCE_SCRIPT_NAME`` out of the MCP request's
    own path."""
    from django.test import Client

    login = Client()
    login.force_login(shop["alice"])
    seen = call(path, tool, login.cookies["sessionid"].value, era)
    assert (seen["link"], seen["language"]) == ("/shop/orders/A-1", "fr")
    if tool == "order_list":
        assert (seen["user"], seen["path"]) == ("alice", "/shop/orders")


def test_a_view_tool_the_app_removed_or_replaced_leaves_the_others_narrowed(caplog: pytest.LogCaptureFixture) -> None:
    """``mcp.remove_tool()`` of a view tool (and another tool registered under its name): the
    endpoint still narrows the server's other view tools, and leaves the replacement as it was
    registered, without logging a failure."""
    from django.urls import path, set_urlconf
    from mcp.server import MCPServer

    from mcp_common import _sdk
    from mcp_django import view_tool
    from mcp_django.expose import settle_view_tools

    server = MCPServer("Removed")

    def removed(request: HttpRequest, pk: int, fmt: str = "html") -> HttpResponse:
        return HttpResponse(f"removed {pk}")

    def kept(request: HttpRequest, pk: int, fmt: str = "html") -> HttpResponse:
        return HttpResponse(f"kept {pk} as {fmt}")

    view_tool(server, removed)
    view_tool(server, removed, name="gone")
    view_tool(server, kept)
    server.remove_tool("removed")
    server.remove_tool("gone")

    @server.tool(name="removed", structured_output=False)
    def replacement(pk: int, fmt: str = "html") -> dict[str, Any]:
        return {"pk": pk, "fmt": fmt}

    class urls:  # a URLconf module's stand-in
        urlpatterns = [
            path("removed/<int:pk>/", removed, {"fmt": "csv"}),
            path("kept/<int:pk>/", kept, {"fmt": "csv"}),
        ]

    set_urlconf(urls)
    try:
        settle_view_tools(server)
    finally:
        set_urlconf(None)
    assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text
    assert set(_sdk.get_tool(server, "kept").parameters["properties"]) == {"pk"}
    replaced = _sdk.get_tool(server, "removed")
    assert replaced.fn is replacement and replaced.output_schema is None, replaced


@pytest.mark.parametrize("path", PATHS)
def test_a_drf_viewsets_actions_are_tools_at_their_routers_urls(path: str, shop: dict[str, User]) -> None:
    """``view_tool(mcp, ShelfViewSet.as_view({"get": "list"}))`` and its ``retrieve`` action,
    routed by a DRF router: the list tool takes no argument (it required one named
    ``request``), and the detail tool's ``pk`` builds the router's URL, whose
    ``lookup_value_regex`` still refuses what it refuses (the view ran at the MCP path)."""
    caller = inprocess.Caller("tests.django.viewset_site", path, "modern", shop["bob"])
    tools = {tool["name"]: tool for tool in caller.tool_list()}
    assert tools["list_shelves"]["inputSchema"].get("properties", {}) == {}, tools["list_shelves"]
    listed = caller.call_tool("list_shelves", {})["result"]
    assert listed["structuredContent"] == {"shelves": ["top", "bottom"], "path": "/api/shelves/"}, listed
    shelf = caller.call_tool("get_shelf", {"pk": "top"})["result"]
    assert shelf["structuredContent"] == {"shelf": "top", "path": "/api/shelves/top/"}, shelf
    refused = caller.call_tool("get_shelf", {"pk": "TOP"})["result"]
    assert refused["isError"] is True and text(refused) == "404 Not Found", refused


@pytest.mark.parametrize("path", PATHS)
def test_a_drf_viewsets_action_keeps_the_permissions_its_router_gives_it(path: str, shop: dict[str, User]) -> None:
    """``@action(detail=True, permission_classes=[IsAdminUser])``: the router builds the
    action's view with those permissions, so its tool must run that view, not the tool's own
    ``as_view({"get": "stock"})``, which has only the class's (anyone read the staff-only stock)."""
    refused = inprocess.Caller("tests.django.viewset_site", path, "modern", shop["bob"]).call_tool(
        "shelf_stock", {"pk": "top"}
    )["result"]
    assert refused["isError"] is True and text(refused).startswith("403 Forbidden"), refused
    served = inprocess.Caller("tests.django.viewset_site", path, "modern", shop["clerk"]).call_tool(
        "shelf_stock", {"pk": "top"}
    )["result"]
    assert served["structuredContent"] == {"shelf": "top", "stock": 12, "path": "/api/shelves/top/stock/"}, served
    # A ViewSet's view the application decorated keeps its decorator (the router's has none):
    # ``user_passes_test`` sends bob, signed in, to the login page.
    staff_only = inprocess.Caller("tests.django.viewset_site", path, "modern", shop["bob"]).call_tool(
        "staff_shelves", {}
    )["result"]
    assert staff_only["isError"] is True and text(staff_only).startswith("403 Forbidden"), staff_only


@pytest.mark.parametrize("path", PATHS)
def test_a_view_tool_runs_the_decorators_its_url_wraps_the_view_in(path: str, shop: dict[str, User]) -> None:
    """``path("stock-counts/<slug:slug>", permission_required(...)(stock_count))``: Django runs
    the permission check there, and so must the tool of ``stock_count`` (it ran the bare view,
    and anyone read what the URL lets only clerks read)."""
    refused = Caller(path, "modern", shop["bob"]).call_tool("stock_count", {"slug": "bolts"})
    assert refused["result"]["isError"] is True and text(refused["result"]) == "403 Forbidden", refused
    served = Caller(path, "modern", shop["clerk"]).call_tool("stock_count", {"slug": "bolts"})
    assert served["result"]["structuredContent"] == {"slug": "bolts", "count": 3}, served


@pytest.mark.parametrize("path", PATHS)
def test_a_view_tool_without_the_path_arguments_its_url_takes_says_so(path: str, shop: dict[str, User]) -> None:
    """A ViewSet's detail action registered without ``path_arguments``: every call of its tool
    answered "404 Not Found", as if the caller had asked for a shelf that is not there."""
    caller = inprocess.Caller("tests.django.viewset_site", path, "modern", shop["bob"])
    refused = caller.call_tool("get_shelf_unaddressed", {})["result"]
    assert refused["isError"] is True, refused
    assert text(refused) == (
        "The URL of get_shelf_unaddressed takes pk or format, pk, and the tool takes no path arguments: "
        "pass path_arguments= to its view_tool() (a class-based view's are not read from its methods)."
    ), refused


@pytest.mark.parametrize("path", PATHS)
def test_a_class_based_view_tool_runs_the_decorators_its_url_wraps_it_in(path: str, shop: dict[str, User]) -> None:
    """``view_tool(mcp, Crate)`` of ``permission_required(...)(Crate.as_view())`` in the
    URLconf: the tool ran its own ``as_view()``, past the URL's permission check."""
    refused = Caller(path, "modern", shop["bob"]).call_tool("crate", {"slug": "c1"})["result"]
    assert refused["isError"] is True and text(refused) == "403 Forbidden", refused
    served = Caller(path, "modern", shop["clerk"]).call_tool("crate", {"slug": "c1"})["result"]
    assert served["structuredContent"] == {"crate": "c1", "items": 4}, served


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(
    ("tool", "arguments", "route"),
    [("bin_count", {"slug": "b1"}, "bin-counts/<slug:slug>"), ("hamper", {"slug": "h1"}, "hampers/<slug:slug>")],
)
def test_a_view_tool_wrapped_otherwise_than_its_url_does_not_skip_the_urls_decorators(
    path: str, tool: str, arguments: dict[str, Any], route: str, shop: dict[str, User]
) -> None:
    """``view_tool(mcp, csrf_exempt(bin_count))`` of a view routed
    ``permission_required(...)(bin_count)``, and ``csrf_exempt(Hamper.as_view())`` of a class
    routed ``permission_required(...)(Hamper.as_view())``: neither runs the other's decorators,
    and the tool ran its own view past the URL's permission check, for any caller."""
    for user in ("bob", "clerk"):
        refused = Caller(path, "modern", shop[user]).call_tool(tool, arguments)["result"]
        assert refused["isError"] is True, refused
        assert text(refused) == (
            f"The view of {tool} is routed wrapped in other decorators than its tool's "
            f"({route}): pass view_tool() the URL's view, or route the tool's."
        ), refused


@pytest.mark.parametrize("path", PATHS)
def test_a_drf_view_tool_runs_the_decorators_its_url_wraps_it_in(path: str, shop: dict[str, User]) -> None:
    """``view_tool(mcp, Till)`` of a DRF ``APIView`` routed
    ``permission_required(...)(Till.as_view())``: DRF's ``as_view()`` is ``csrf_exempt`` already,
    so the tool's own view counted as decorated and ran past the URL's permission check."""
    refused = inprocess.Caller("tests.django.viewset_site", path, "modern", shop["bob"]).call_tool("till", {})
    assert refused["result"]["isError"] is True and text(refused["result"]) == "403 Forbidden", refused
    served = inprocess.Caller("tests.django.viewset_site", path, "modern", shop["clerk"]).call_tool("till", {})
    assert served["result"]["structuredContent"] == {"takings": 42}, served


@pytest.mark.parametrize("path", PATHS)
def test_a_view_tool_wrapped_otherwise_than_one_url_reaches_its_view_at_another(
    path: str, shop: dict[str, User]
) -> None:
    """``csrf_exempt(Basket.as_view())`` of a class routed guarded first and open after: the
    tool is not refused for the guarded URL while the open one serves it, as a browser's
    request there would be served."""
    served = Caller(path, "modern", shop["bob"]).call_tool("basket", {"slug": "k1"})["result"]
    assert served["structuredContent"] == {"basket": "k1", "path": "/baskets/k1"}, served


def test_view_tool_without_its_server_is_refused() -> None:
    check_view_tool_needs_its_server_first(view_tool, "mcp_django")
