"""The WSGI application of ``tests.django.loop_site`` (its database: ``LOOP_SITE_DB``)."""

from __future__ import annotations

import os

from django.conf import settings

settings.configure(
    SECRET_KEY="loop-site-secret-key-0123456789abcdef-0123456789",
    ALLOWED_HOSTS=["127.0.0.1"],
    ROOT_URLCONF="tests.django.loop_site",
    INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "mcp_django"],
    MIDDLEWARE=[],
    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["LOOP_SITE_DB"]}},
    USE_TZ=True,
    MCP={},
)

from django.core.wsgi import get_wsgi_application  # noqa: E402

application = get_wsgi_application()
