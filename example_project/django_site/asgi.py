from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.django_site.settings")
os.environ.setdefault("MCP_EXAMPLE_ASGI", "1")

from django.core.asgi import get_asgi_application

application = get_asgi_application()
