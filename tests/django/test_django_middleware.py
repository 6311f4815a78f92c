"""The endpoint behind the middleware production Django sites install around every view, on a
real socket (Django's live server), driven by the official client in both eras."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from example_project.servers import files
from tests.protocol.clients import modern_tools_list, timed_elicitations

pytestmark = pytest.mark.django_db(transaction=True)


def test_compression_conditional_get_and_locale_middleware_leave_the_endpoint_working(
    settings: Any, serve: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``GZipMiddleware``, ``ConditionalGetMiddleware`` and ``LocaleMiddleware`` (outside
    ``i18n_patterns``), where their docs place them: a legacy call's question reaches the client
    while the call waits for it (compressed, it would be held back until the stream ended,
    here ``WAIT_DETACH_SECONDS`` later), a 2026-07-28 one by the retry; JSON answers are
    compressed for a client that accepts it, as the application asked."""
    monkeypatch.setattr(files, "_FOLDERS", {"/tmp/project": ["main.py"]})
    middleware = list(settings.MIDDLEWARE)
    middleware[1:1] = ["django.middleware.gzip.GZipMiddleware", "django.middleware.http.ConditionalGetMiddleware"]
    middleware.insert(
        middleware.index("django.contrib.sessions.middleware.SessionMiddleware") + 1,
        "django.middleware.locale.LocaleMiddleware",
    )
    settings.MIDDLEWARE = middleware
    settings.MCP = {**settings.MCP, "WAIT_DETACH_SECONDS": 5.0}
    url = serve()

    seen = timed_elicitations(f"{url}/files", "delete_folder", {"path": "/tmp/project"}, {"ok": False})

    assert seen["legacy"][1] == seen["2026-07-28"][1] == "kept the folder", seen
    assert seen["legacy"][0] < 2.0, seen  # not held back for WAIT_DETACH_SECONDS
    listed = modern_tools_list(f"{url}/files", {"Accept-Encoding": "gzip"})
    assert (listed.headers["Content-Type"], listed.headers.get("Content-Encoding")) == ("application/json", "gzip")
    assert "delete_folder" in listed.text
