"""A shop's existing views and its ``Order`` model, exposed as tools of one server, served by
``MCPView`` and ``AsyncMCPView`` (``ROOT_URLCONF`` for ``test_django_expose``)."""

from __future__ import annotations

import enum
import json
from typing import Annotated, Any

from django.contrib import messages
from django.contrib.auth import decorators as django_auth
from django.contrib.auth.decorators import login_not_required, login_required, permission_required
from django.db import models
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.template import engines
from django.template.response import TemplateResponse
from django.urls import include, path, re_path, register_converter, reverse
from django.utils.translation import get_language
from django.views import View
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from mcp.server import MCPServer
from mcp.server.mcpserver import Resolve
from pydantic import BaseModel

from example_project.django_site.shop.models import Order
from mcp_django import model_tools, view_tool
from mcp_django.permissions import user_passes_test
from mcp_django.views import AsyncMCPView, MCPView

mcp = MCPServer("Exposed shop")


@view_tool(mcp, arguments={"status": (str | None, None), "page": (int, 1)})
def order_list(request: HttpRequest) -> JsonResponse:
    """The shop's orders, as its JSON API lists them."""
    orders = Order.objects.order_by("number")
    if status := request.GET.get("status"):
        orders = orders.filter(status=status)
    return JsonResponse(
        {
            "orders": [order.number for order in orders],
            "page": request.GET.get("page"),
            "user": request.user.get_username() or None,
            "path": request.path,
            "link": reverse(order_page, kwargs={"number": "A-1"}),
            "language": get_language(),
        }
    )


@view_tool(mcp)
@login_required
def order_page(request: HttpRequest, number: str) -> HttpResponse:
    """An order's page, for signed-in customers."""
    order = get_object_or_404(Order, number=number)
    return HttpResponse(
        "<!doctype html><html><head><title>Order</title><style>h1 {color: red}</style>"
        "<script>var secret = 1;</script></head><body>"
        f"<h1>Order {order.number}</h1><p>Customer: {order.customer} &amp; co.</p>"
        f"<p>Status: {order.get_status_display()}</p></body></html>"
    )


@view_tool(mcp, method="POST", arguments={"reason": str})
@require_POST
@permission_required("shop.change_order", raise_exception=True)
def cancel_order(request: HttpRequest, number: str) -> JsonResponse:
    """Cancel an order (staff with the shop.change_order permission)."""
    order = get_object_or_404(Order, number=number)
    reason = json.loads(request.body)["reason"]
    order.status = "cancelled"
    order.save(update_fields=["status"])
    return JsonResponse({"number": order.number, "status": order.status, "reason": reason})


class Priority(enum.Enum):
    LOW = "low"
    HIGH = "high"


@view_tool(mcp, method="POST", arguments={"priority": Priority, "tags": (list[Priority] | None, None)})
def flag_order(request: HttpRequest) -> JsonResponse:
    """Echoes the JSON body it was sent."""
    return JsonResponse(json.loads(request.body))


@view_tool(mcp, name="flag_query", arguments={"priority": Priority})
def flag_query(request: HttpRequest) -> HttpResponse:
    return HttpResponse(request.GET.urlencode(), content_type="text/plain")


@view_tool(mcp, name="order_count")
class OrderCount(View):
    """How many orders the shop has (a class-based view)."""

    def get(self, request: HttpRequest) -> JsonResponse:
        return JsonResponse({"count": Order.objects.count()})


view_tool(mcp, OrderCount.as_view(), name="order_count_view")


@view_tool(mcp)
async def whoami(request: HttpRequest) -> JsonResponse:
    """Who the shop thinks is calling (an async view)."""
    user = await request.auser()  # type: ignore[attr-defined]
    return JsonResponse({"user": user.get_username() or None, "method": request.method})


@view_tool(mcp)
async def till_roll(request: HttpRequest) -> StreamingHttpResponse:
    """The till roll, streamed by an async view from an async generator."""

    async def lines() -> Any:
        for n in range(3):
            yield f"receipt {n}\n"

    return StreamingHttpResponse(lines(), content_type="text/plain")


@view_tool(mcp)
def shop_file(request: HttpRequest, slug: str) -> HttpResponse:
    """One of the shop's files; its URL admits only a slug, which the view relies on."""
    return HttpResponse(f"file {slug}", content_type="text/plain")


@view_tool(mcp)
def catalog_item(request: HttpRequest, slug: str) -> HttpResponse:
    """An item, routed by name inside the namespaced ``catalog`` include; trusts its slug."""
    return HttpResponse(f"item {slug} at {request.path}", content_type="text/plain")


@view_tool(mcp)
def catalog_unnamed(request: HttpRequest, slug: str) -> HttpResponse:
    """Routed inside the ``catalog`` namespace without a name: Django cannot reverse it."""
    return HttpResponse(f"unnamed {slug}", content_type="text/plain")


@view_tool(mcp, name="shelf", path_arguments={"slug": str})
class Shelf(View):
    """A shelf (a class-based view given as its class, routed through its own ``as_view()``)."""

    def get(self, request: HttpRequest, slug: str) -> HttpResponse:
        return HttpResponse(f"shelf {slug} at {request.path}", content_type="text/plain")


@view_tool(mcp, name="bin", path_arguments={"slug": str})
class Bin(View):
    """Bins and one bin, one class routed by two ``as_view()`` (its list also with a format
    suffix, as DRF's ``format_suffix_patterns`` adds)."""

    def get(self, request: HttpRequest, slug: str | None = None, fmt: str | None = None) -> HttpResponse:
        return HttpResponse(f"bin {slug} at {request.path}", content_type="text/plain")


bin_list = Bin.as_view()


@view_tool(mcp, path_arguments={"slug": str})
class Crate(View):
    """A crate's contents: its URL (below) lets only clerks read them, as a URLconf may guard a
    class-based view."""

    def get(self, request: HttpRequest, slug: str) -> JsonResponse:
        return JsonResponse({"crate": slug, "items": 4})


class Hamper(View):
    """A hamper's contents: its URL (below) lets only clerks read them; its tool wraps its own
    ``as_view()`` otherwise, as ``view_tool(mcp, csrf_exempt(Hamper.as_view()))`` would."""

    def get(self, request: HttpRequest, slug: str) -> JsonResponse:
        return JsonResponse({"hamper": slug, "items": 5})


view_tool(mcp, csrf_exempt(Hamper.as_view()), name="hamper", path_arguments={"slug": str})


class Basket(View):
    """A basket: routed guarded for the back office and open for the shop (below); its tool
    wraps its own ``as_view()``, and reaches it at the open URL."""

    def get(self, request: HttpRequest, slug: str) -> JsonResponse:
        return JsonResponse({"basket": slug, "path": request.path})


view_tool(mcp, csrf_exempt(Basket.as_view()), name="basket", path_arguments={"slug": str})


@view_tool(mcp, url_name="catalog:aisle")
def aisle(request: HttpRequest, slug: str) -> HttpResponse:
    """An aisle, its URL named by ``url_name``."""
    return HttpResponse(f"aisle {slug} at {request.path}", content_type="text/plain")


@view_tool(mcp, url_name="catalog:item")
def misnamed(request: HttpRequest, slug: str) -> HttpResponse:
    """Its ``url_name`` names another view's URL."""
    return HttpResponse(f"misnamed {slug}", content_type="text/plain")


@view_tool(mcp, url_name="catalog:isle")
def mistyped(request: HttpRequest, slug: str) -> HttpResponse:
    """Its ``url_name`` names no URL."""
    return HttpResponse(f"mistyped {slug}", content_type="text/plain")


@view_tool(mcp)
def tag(request: HttpRequest, slug: str) -> HttpResponse:
    """A tag, its URL a ``re_path`` whose ``\\w`` admits Unicode slugs ("crème-brûlée")."""
    return HttpResponse(f"tag {slug} at {request.path}", content_type="text/plain")


@view_tool(mcp)
def printed_edition(request: HttpRequest, slug: str, **options: Any) -> HttpResponse:
    """Routed with an extra option (``{"edition": "print"}``), which is no tool argument."""
    return HttpResponse(f"printed {slug} ({options}) at {request.path}", content_type="text/plain")


@view_tool(mcp)
def report(request: HttpRequest, pk: int, fmt: str = "html") -> HttpResponse:
    """Routed with ``{"fmt": "csv"}``: Django passes the option as ``fmt``, whatever a caller says."""
    return HttpResponse(f"report {pk!r} as {fmt} at {request.path}", content_type="text/plain")


@view_tool(mcp)
def ledger(request: HttpRequest, pk: int, fmt: str = "html") -> HttpResponse:
    """Routed by ``ledgers/<int:pk>/`` only: Django never passes ``fmt``, the view's default applies."""
    return HttpResponse(f"ledger {pk!r} as {fmt} at {request.path}", content_type="text/plain")


@view_tool(mcp)
def yearbook(request: HttpRequest, year: str) -> HttpResponse:
    """Routed by a ``re_path`` with an unnamed group: Django passes the year positionally."""
    return HttpResponse(f"yearbook {year} at {request.path}", content_type="text/plain")


class FourDigitYearConverter:
    """Django's documented custom converter: ``to_url`` takes the year ``to_python`` makes."""

    regex = "[0-9]{4}"

    def to_python(self, value: str) -> int:
        return int(value)

    def to_url(self, value: int) -> str:
        return "%04d" % value  # noqa: UP031  # as documented: a TypeError for text, not a ValueError


register_converter(FourDigitYearConverter, "yyyy")


@view_tool(mcp)
def almanac(request: HttpRequest, year):  # no annotation, as Django's documentation writes it
    """Routed by ``almanacs/<yyyy:year>/``; its parameter has no annotation: the tool takes text."""
    return JsonResponse({"year": year, "path": request.path})


@view_tool(mcp)
def month_page(request: HttpRequest, year: str, month: str) -> HttpResponse:
    """Two unnamed groups, filled in the order of the view's parameters."""
    return HttpResponse(f"month {month} of {year} at {request.path}", content_type="text/plain")


@view_tool(mcp)
def keyword_year(request: HttpRequest, *, year: str) -> HttpResponse:
    """Takes its year by keyword only, but its URL's group has no name: Django could not call it."""
    return HttpResponse(f"keyword year {year}", content_type="text/plain")


@view_tool(mcp)
def mixed_groups(request: HttpRequest, year: str, slug: str) -> HttpResponse:
    """Its URL mixes a named and an unnamed group: Django passes only the named one."""
    return HttpResponse(f"mixed {year} {slug}", content_type="text/plain")


@view_tool(mcp, url_name="catalog:shelf-page")
def shelf_page(request: HttpRequest, slug: str, page: int | None = None) -> HttpResponse:
    """Its ``url_name`` names a URL that takes both the slug and the page."""
    return HttpResponse(f"shelf page {page} of {slug}", content_type="text/plain")


@view_tool(mcp, url_name="branch-item")
def branch_item(request: HttpRequest, branch: str, slug: str) -> HttpResponse:
    """Routed inside an ``include()`` whose prefix captures the branch, by ``url_name``."""
    return HttpResponse(f"item {slug} of {branch} at {request.path}", content_type="text/plain")


@view_tool(mcp)
def branch_stock(request: HttpRequest, branch: str, slug: str) -> HttpResponse:
    """The same, found by the view."""
    return HttpResponse(f"stock {slug} of {branch} at {request.path}", content_type="text/plain")


@view_tool(mcp, url_name="catalog:aisle-map")
def aisle_map(request: HttpRequest, slug: str, zoom: int | None = None) -> HttpResponse:
    """Its ``url_name`` names a URL that takes the slug only, not the zoom."""
    return HttpResponse(f"aisle map {slug} at zoom {zoom}", content_type="text/plain")


@view_tool(mcp)
def blog_post(request: HttpRequest, slug: str) -> HttpResponse:
    """Its URL is named "detail", as another app's is (both included without a namespace):
    ``reverse("detail")`` finds the other's."""
    return HttpResponse(f"post {slug} at {request.path}", content_type="text/plain")


@view_tool(mcp)
def news_story(request: HttpRequest, slug: str) -> HttpResponse:
    return HttpResponse(f"story {slug} at {request.path}", content_type="text/plain")


@view_tool(mcp)
def archive(request: HttpRequest, year: int | None = None) -> HttpResponse:
    """The archive, or one year of it: routed with and without the year, as Django lets one view be."""
    return HttpResponse(f"archive {year} at {request.path}", content_type="text/plain")


def shelf_label(request: HttpRequest, slug: str) -> HttpResponse:
    """Routed bare; exposed wrapped (below), as ``view_tool(mcp, csrf_exempt(view))`` would."""
    return HttpResponse(f"label {slug} at {request.path}", content_type="text/plain")


view_tool(mcp, csrf_exempt(shelf_label), name="shelf_label")


@view_tool(mcp)
def stock_count(request: HttpRequest, slug: str) -> JsonResponse:
    """An item's stock: its URL (below) lets only clerks read it, as a URLconf may guard a view."""
    return JsonResponse({"slug": slug, "count": 3})


def bin_count(request: HttpRequest, slug: str) -> JsonResponse:
    """A bin's count: its URL (below) lets only clerks read it; its tool wraps it otherwise, as
    ``view_tool(mcp, csrf_exempt(view))`` of a view routed ``login_required(view)`` would."""
    return JsonResponse({"bin": slug, "count": 7})


view_tool(mcp, csrf_exempt(bin_count), name="bin_count")


@mcp.tool()
def where_am_i() -> dict[str, str]:
    """A plain SDK tool: where reverse() and the active language point."""
    return {"link": reverse(order_page, kwargs={"number": "A-1"}), "language": get_language()}


@mcp.tool()
async def where_am_i_async() -> dict[str, str]:
    return {"link": reverse(order_page, kwargs={"number": "A-1"}), "language": get_language()}


class Seen(BaseModel):
    link: str
    language: str


def where_from_a_resolver() -> Seen:
    """A synchronous resolver that asks nothing: the SDK runs it on a worker thread."""
    return Seen(link=reverse(order_page, kwargs={"number": "A-1"}), language=get_language())


async def where_from_an_async_resolver() -> Seen:
    return Seen(link=reverse(order_page, kwargs={"number": "A-1"}), language=get_language())


@mcp.tool()
def where_resolved(
    seen: Annotated[Seen, Resolve(where_from_a_resolver)],
    seen_async: Annotated[Seen, Resolve(where_from_an_async_resolver)],
) -> dict[str, str]:
    """What a tool's resolvers saw: both must agree with each other."""
    assert seen == seen_async, (seen, seen_async)
    return seen.model_dump()


@view_tool(mcp)
def broken(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("database password is hunter2")


@view_tool(mcp)
def moved(request: HttpRequest) -> HttpResponse:
    return redirect("/somewhere/else")


@view_tool(mcp)
def teapot(request: HttpRequest) -> HttpResponse:
    return HttpResponse("short and stout", status=418, content_type="text/plain")


@view_tool(mcp)
def invoice(request: HttpRequest) -> HttpResponse:
    return HttpResponse(b"%PDF-1.7", content_type="application/pdf")


@view_tool(mcp)
def template_page(request: HttpRequest) -> TemplateResponse:
    template = engines["django"].from_string("<main><h2>Hello {{ user.get_username }}</h2></main>")
    return TemplateResponse(request, template, {})


@view_tool(mcp)
@user_passes_test(lambda user: user.is_staff)
def staff_note(request: HttpRequest) -> HttpResponse:
    return HttpResponse("for staff only", content_type="text/plain")


@user_passes_test(lambda user: user.is_staff)
@view_tool(mcp)
def staff_note_above(request: HttpRequest) -> HttpResponse:
    return HttpResponse("for staff only, too", content_type="text/plain")


@user_passes_test(lambda user: user.is_staff)
@view_tool(mcp, name="staff_count")
class StaffCount(View):
    def get(self, request: HttpRequest) -> JsonResponse:
        return JsonResponse({"count": Order.objects.count()})


@view_tool(mcp)
@permission_required("shop.delete_order")
def purge_orders(request: HttpRequest) -> HttpResponse:
    """Django's ``permission_required`` sends callers without it to the login page, signed in or not."""
    return HttpResponse("purged", content_type="text/plain")


@view_tool(mcp)
@django_auth.user_passes_test(lambda user: user.is_staff, login_url="/backoffice/sign-in/")
def sales_report(request: HttpRequest) -> HttpResponse:
    """Staff only, sent to a login page of its own (as ``staff_member_required`` sends others to
    the admin's): not ``LOGIN_URL``, but the page returns them here (``?next=``)."""
    return HttpResponse("sales: 3 orders", content_type="text/plain")


@view_tool(mcp)
def price_list(request: HttpRequest) -> JsonResponse:
    """The price list: only the project's ``LoginRequiredMiddleware`` (when set up) guards it."""
    return JsonResponse({"prices": {"tea": "2.50"}, "user": request.user.get_username() or None})


@view_tool(mcp)
@login_required
def save_note(request: HttpRequest) -> HttpResponse:
    """Save a note: the page tells the user so, as the messages framework passes it on."""
    messages.success(request, "Note saved.")
    return HttpResponse(" ".join(str(message) for message in messages.get_messages(request)), content_type="text/plain")


@view_tool(mcp)
@login_not_required
def opening_hours(request: HttpRequest) -> HttpResponse:
    """Open to everyone, under ``LoginRequiredMiddleware`` too."""
    return HttpResponse("9 to 5", content_type="text/plain")


model_tools(
    mcp,
    Order,
    fields=["number", "customer", "status", "total", "placed", "owner"],
    filters=["status", "owner"],
    search=["customer", "number"],
    page_size=2,
    queryset=lambda request: (
        Order.objects.all() if request.user.is_staff else Order.objects.filter(owner_id=request.user.pk)
    ),
)


class Document(models.Model):
    """A model with a file and a binary column, of an app of the tests' own (its table is made
    by the test that reads it)."""

    title = models.CharField(max_length=50)
    scan = models.FileField(upload_to="scans/", blank=True)
    digest = models.BinaryField(default=b"")

    class Meta:
        app_label = "expose_tests"


model_tools(mcp, Document, fields="__all__", permission=None)


class Shift(models.Model):
    """A rota's shift: a time of day and a duration (its table is made by the test that reads it)."""

    starts = models.TimeField()
    length = models.DurationField()
    rostered = models.DateTimeField(null=True)

    class Meta:
        app_label = "expose_tests"


model_tools(mcp, Shift, fields="__all__", filters=["starts", "length", "rostered"], permission=None)


class Reading(models.Model):
    """A meter's reading, to the microsecond, who took it, and what the meter said (its table
    is made by the test that reads it)."""

    owner = models.ForeignKey("auth.User", null=True, on_delete=models.CASCADE)
    taken = models.DateTimeField()
    at = models.TimeField()
    said = models.JSONField()

    class Meta:
        app_label = "expose_tests"


model_tools(
    mcp,
    Reading,
    fields=["id", "owner_id", "taken", "at", "said"],
    filters=["owner_id", "taken", "at", "said"],
    permission=None,
)


class Profile(models.Model):
    """A user's profile, keyed by its user (a one-to-one primary key; its table is made by the
    test that reads it)."""

    user = models.OneToOneField("auth.User", primary_key=True, on_delete=models.CASCADE)
    nickname = models.CharField(max_length=50)

    class Meta:
        app_label = "expose_tests"


model_tools(mcp, Profile, fields="__all__", filters=["user"], permission=None)


def broken_queryset(request: HttpRequest) -> Any:
    raise RuntimeError("table orders_secret is gone")


model_tools(
    mcp,
    Order,
    fields=["number"],
    queryset=broken_queryset,
    permission=None,
    names={"list": "list_broken_orders", "get": "get_broken_order"},
)

catalog = (
    [
        path("items/<slug:slug>", catalog_item, name="item"),
        path("aisles/<slug:slug>", aisle, name="aisle"),
        path("unnamed/<slug:slug>", catalog_unnamed),
        path("shelf-pages/<slug:slug>/<int:page>", shelf_page, name="shelf-page"),
        path("aisle-maps/<slug:slug>", aisle_map, name="aisle-map"),
    ],
    "catalog",
)

urlpatterns = [
    path("catalog/", include(catalog)),
    path("shelves/<slug:slug>", Shelf.as_view(), name="shelf"),
    path("bins/", bin_list),
    path("bins.<str:fmt>", bin_list),
    path("bins/<slug:slug>/", Bin.as_view()),
    path("orders", order_list),
    path("orders/<str:number>", order_page),
    path("orders/<str:number>/cancel", cancel_order),
    path("files/<slug:slug>", shop_file),
    re_path(r"^tags/(?P<slug>[-\w]+)$", tag),
    path("printed/<slug:slug>", printed_edition, {"edition": "print"}),
    path("reports/<int:pk>/", report, {"fmt": "csv"}),
    path("ledgers/<int:pk>/", ledger),
    re_path(r"^yearbooks/(\d{4})$", yearbook),
    path("almanacs/<yyyy:year>/", almanac),
    re_path(r"^months/(\d{4})/(\d{2})$", month_page),
    re_path(r"^keyword-years/(\d{4})$", keyword_year),
    re_path(r"^mixed/(\d{4})/(?P<slug>[-\w]+)$", mixed_groups),
    path(
        "branches/<slug:branch>/",
        include(
            [
                path("items/<slug:slug>", branch_item, name="branch-item"),
                path("stock/<slug:slug>", branch_stock),
            ]
        ),
    ),
    path("archive/", archive),
    path("archive/<int:year>", archive),
    path("labels/<slug:slug>", shelf_label),
    path("stock-counts/<slug:slug>", permission_required("shop.change_order", raise_exception=True)(stock_count)),
    path("bin-counts/<slug:slug>", permission_required("shop.change_order", raise_exception=True)(bin_count)),
    path("hampers/<slug:slug>", permission_required("shop.change_order", raise_exception=True)(Hamper.as_view())),
    path("office/baskets/<slug:slug>", permission_required("shop.view_order", raise_exception=True)(Basket.as_view())),
    path("baskets/<slug:slug>", Basket.as_view()),
    path("crates/<slug:slug>", permission_required("shop.change_order", raise_exception=True)(Crate.as_view())),
    path("blog/", include([path("<slug:slug>", blog_post, name="detail")])),
    path("news/", include([path("<slug:slug>", news_story, name="detail")])),
    path("prices", price_list),
    path("orders-purge", purge_orders),
    path("sales-report", sales_report),
    path("hours", opening_hours),
    path("notes", save_note),
    path("mcp-sync", MCPView.as_view(server="tests.django.exposed_site.mcp")),
    path("mcp-async", AsyncMCPView.as_view(server="tests.django.exposed_site.mcp")),
    # Open to anonymous callers under ``LoginRequiredMiddleware`` (their tools must still apply it).
    path("mcp-open", login_not_required(MCPView.as_view(server="tests.django.exposed_site.mcp"))),
    path("mcp-open-async", login_not_required(AsyncMCPView.as_view(server="tests.django.exposed_site.mcp"))),
]
