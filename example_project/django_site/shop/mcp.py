"""Tools this app adds to the demo server. mcp_django imports every installed app's ``mcp.py``
at start-up (like ``admin.py``), so nothing else has to import this module."""

from __future__ import annotations

from django.conf import settings

from example_project.servers.demo import mcp


@mcp.tool()
def shop_opening_hours() -> str:
    """When the shop is open (registered by the Django app's own mcp.py)."""
    return f"Open 9:00-18:00 ({settings.TIME_ZONE})"
