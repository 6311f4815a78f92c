"""The example shop's existing pages, which ``shop/mcp.py`` also offers as tools."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.utils.html import format_html

from example_project.django_site.shop.models import Order


def order_page(request: HttpRequest, number: str) -> HttpResponse:
    """An order's page: its customer, status and total."""
    if not (number.isascii() and number.isdigit()):
        # Order numbers are digits: anything else is no order, on every database (PostgreSQL
        # refuses a NUL in a query outright, which would be a server error).
        raise Http404("No such order")
    order = get_object_or_404(Order, number=number)
    return HttpResponse(
        format_html(
            "<!doctype html><title>Order {}</title><h1>Order {}</h1><p>Customer: {}</p><p>Status: {}</p>"
            "<p>Total: {} EUR</p>",
            order.number,
            order.number,
            order.customer,
            order.get_status_display(),
            order.total,
        )
    )


def seed_demo_orders() -> None:
    """A few orders for the demo's tools to find (only into an empty table)."""
    if Order.objects.exists():
        return
    placed = dt.datetime(2026, 11, 2, 10, 30, tzinfo=dt.UTC)
    for day, (number, customer, status, total) in enumerate(
        [
            ("1001", "Ada Lovelace", "paid", "42.00"),
            ("1002", "Grace Hopper", "shipped", "17.50"),
            ("1003", "Ada Lovelace", "new", "8.90"),
        ]
    ):
        Order.objects.create(
            number=number,
            customer=customer,
            status=status,
            total=Decimal(total),
            placed=placed + dt.timedelta(days=day),
        )
