"""Django under ASGI: who the principal is, and how the body is read.

``AsyncMCPView`` runs on the event loop, where Django refuses synchronous database queries;
``tests.django.asgi_site`` serves it next to ``MCPView``, whose answers it must match.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.contrib.auth.middleware import AuthenticationMiddleware
from django.contrib.auth.models import User
from django.contrib.sessions.middleware import SessionMiddleware
from django.http import HttpResponse
from django.test import AsyncClient, RequestFactory, override_settings
from django.utils.functional import SimpleLazyObject

from mcp_django.store import DjangoStore
from mcp_django.views import _is_django_lazy_user

pytestmark = pytest.mark.django_db(transaction=True)

ASYNC, SYNC = "/asgi-mcp", "/asgi-mcp-sync"
LEGACY_INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
}
ACCEPT = "application/json, text/event-stream"
MIDDLEWARE = [*settings.MIDDLEWARE, "tests.django.asgi_site.replace_user"]


def session_principal(path: str, login: User | None, replace: str | None = None) -> str | None:
    """The principal a legacy session opened at ``path`` is bound to, over ASGI."""

    async def initialize() -> Any:
        client = AsyncClient()
        if login is not None:
            await client.aforce_login(login)
        headers = {"Accept": ACCEPT, **({"X-Test-User": replace} if replace else {})}
        return await client.post(path, json.dumps(LEGACY_INIT), content_type="application/json", headers=headers)

    with override_settings(ROOT_URLCONF="tests.django.asgi_site", MIDDLEWARE=MIDDLEWARE):
        response = async_to_sync(initialize)()
    assert response.status_code == 200, response.content
    record = DjangoStore().get_session(response["Mcp-Session-Id"])
    assert record is not None
    return record.principal


@pytest.mark.parametrize("path", [ASYNC, SYNC])
def test_a_session_cookie_binds_the_logged_in_user(path: str) -> None:
    # The lazy request.user of AuthenticationMiddleware reads the session from the database:
    # the async view must not evaluate it on the event loop (SynchronousOnlyOperation).
    alice = User.objects.create_user("alice")
    assert session_principal(path, alice) == f"django-user:{alice.pk}"
    assert session_principal(path, None) is None


@pytest.mark.parametrize("path", [ASYNC, SYNC])
def test_a_user_replaced_by_the_app_is_used_as_it_is(path: str) -> None:
    alice = User.objects.create_user("alice")
    bob = User.objects.create_user("bob")
    # A suspended account: the app says anonymous although the session cookie is still valid.
    assert session_principal(path, alice, "anonymous") is None
    assert session_principal(path, alice, "concrete:bob") == f"django-user:{bob.pk}"
    # A lazy user of the app's own, which queries the database when first used.
    assert session_principal(path, None, "lazy:bob") == f"django-user:{bob.pk}"


def test_djangos_lazy_user_is_recognised() -> None:
    # Fails loudly if Django changes how AuthenticationMiddleware builds request.user: the
    # async view would then load every user in a thread instead of with request.auser().
    request = RequestFactory().get("/")
    SessionMiddleware(lambda r: HttpResponse()).process_request(request)
    AuthenticationMiddleware(lambda r: HttpResponse()).process_request(request)
    assert _is_django_lazy_user(request.user)
    assert not _is_django_lazy_user(SimpleLazyObject(lambda: User(username="x")))
