"""Tools this app adds to the demo server. mcp_django imports every installed app's ``mcp.py``
at start-up (like ``admin.py``), so nothing else has to import this module."""

from __future__ import annotations

from django.conf import settings

import mcp_django
from example_project.django_site.shop.models import Order
from example_project.django_site.shop.views import order_page
from example_project.servers.demo import mcp


@mcp.tool()
def shop_opening_hours() -> str:
    """When the shop is open (registered by the Django app's own mcp.py)."""
    return f"Open 9:00-18:00 ({settings.TIME_ZONE})"


# An existing page, offered as a tool: order_page(number) returns the page's text.
mcp_django.view_tool(mcp, order_page)

# list_orders(status, search, page, page_size) and get_order(id). The demo's orders are for
# everyone; by default only users with the shop.view_order permission would get these tools.
mcp_django.model_tools(
    mcp,
    Order,
    fields=["id", "number", "customer", "status", "total", "placed"],
    filters=["status"],
    search=["customer", "number"],
    permission=None,
)
