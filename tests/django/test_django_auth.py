"""``MCP["AUTHENTICATION_CLASSES"]``: Django REST framework's authentication decides who calls,
under WSGI and ASGI alike, as it does for the project's ``APIView``s."""

from __future__ import annotations

import base64
import json
import logging
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.contrib import auth as django_auth
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.checks import run_checks
from django.test import AsyncClient, Client, override_settings
from django.urls import include, path
from mcp.server import MCPServer
from rest_framework.authentication import BaseAuthentication, BasicAuthentication
from rest_framework.exceptions import AuthenticationFailed, PermissionDenied, Throttled

from mcp_django.models import MCPSession
from mcp_django.store import DjangoStore
from mcp_django.views import default_view
from tests.django.test_django_asgi import ASYNC, LEGACY_INIT, SYNC

pytestmark = pytest.mark.django_db(transaction=True)


class KeyAuthentication(BaseAuthentication):
    """``Authorization: Key <username>``: a stand-in for an API-key scheme of the project's."""

    def authenticate(self, request: Any) -> tuple[User, str] | None:
        scheme, _, key = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
        if scheme != "Key":
            return None
        user = User.objects.filter(username=key).first()
        if user is None:
            raise AuthenticationFailed("Unknown key.")
        return user, key

    def authenticate_header(self, request: Any) -> str:
        return 'Key realm="mcp"'


class Broken(BaseAuthentication):
    def authenticate(self, request: Any) -> None:
        raise RuntimeError("the key server is down")


def classes(*entries: Any) -> Any:
    return override_settings(
        ROOT_URLCONF="tests.django.asgi_site", MCP={**settings.MCP, "AUTHENTICATION_CLASSES": list(entries)}
    )


def initialize(path: str, headers: dict[str, str], login: User | None = None) -> Any:
    """A legacy ``initialize`` at ``path`` (ASGI for the async view, WSGI for the sync one)."""
    headers = {"Accept": "application/json, text/event-stream", **headers}
    body = json.dumps(LEGACY_INIT)
    if path == ASYNC or path.endswith("-async"):

        async def post() -> Any:
            client = AsyncClient()
            if login is not None:
                await client.aforce_login(login)
            return await client.post(path, body, content_type="application/json", headers=headers)

        return async_to_sync(post)()
    client = Client()
    if login is not None:
        client.force_login(login)
    return client.post(path, body, content_type="application/json", headers=headers)


def principal(response: Any) -> str | None:
    assert response.status_code == 200, response.content
    record = DjangoStore().get_session(response["Mcp-Session-Id"])
    assert record is not None
    return record.principal


@pytest.fixture
def alice() -> User:
    return User.objects.create_user("alice", password="pw-for-tests-only")


@pytest.mark.parametrize("path", [ASYNC, SYNC])
def test_the_first_class_that_authenticates_names_the_caller(path: str, alice: User) -> None:
    basic = "Basic " + base64.b64encode(b"alice:pw-for-tests-only").decode()
    with classes(KeyAuthentication, "rest_framework.authentication.BasicAuthentication"):
        assert principal(initialize(path, {"Authorization": "Key alice"})) == f"django-user:{alice.pk}"
        assert principal(initialize(path, {"Authorization": basic})) == f"django-user:{alice.pk}"
        # As in an APIView: a session counts only when SessionAuthentication is listed.
        assert principal(initialize(path, {}, login=alice)) is None
    # Without the setting, the project's middleware decides, as before.
    with override_settings(ROOT_URLCONF="tests.django.asgi_site"):
        assert principal(initialize(path, {"Authorization": "Key alice"})) is None
        assert principal(initialize(path, {}, login=alice)) == f"django-user:{alice.pk}"


@pytest.mark.parametrize("path", [ASYNC, SYNC])
def test_refused_credentials_get_a_json_rpc_401_naming_the_scheme(path: str, alice: User) -> None:
    wrong = "Basic " + base64.b64encode(b"alice:wrong").decode()
    with classes(KeyAuthentication, BasicAuthentication):
        for credentials, message in (("Key mallory", "Unknown key."), (wrong, "Invalid username/password.")):
            response = initialize(path, {"Authorization": credentials})
            assert response.status_code == 401
            assert response["WWW-Authenticate"] == 'Key realm="mcp"'  # the first class's scheme
            assert response.json() == {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": message}}
    with classes(BasicAuthentication):
        assert initialize(path, {"Authorization": wrong})["WWW-Authenticate"] == 'Basic realm="api"'
    assert not MCPSession.objects.exists()  # refused before anything was written


@pytest.mark.parametrize("path", [ASYNC, SYNC])
def test_a_failing_authentication_class_is_a_json_500_and_logged(path: str, caplog: pytest.LogCaptureFixture) -> None:
    with classes(Broken), caplog.at_level(logging.ERROR, logger="mcp_django"):
        response = initialize(path, {})
    assert response.status_code == 500 and response["Content-Type"] == "application/json"
    assert response.json()["error"] == {"code": -32603, "message": "Internal server error"}
    assert "the key server is down" not in response.content.decode()
    assert any("authentication class Broken failed" in r.getMessage() for r in caplog.records)


def test_a_class_that_cannot_be_loaded_fails_the_system_check() -> None:
    with override_settings(MCP={**settings.MCP, "AUTHENTICATION_CLASSES": ["no.such.Authentication", dict]}):
        errors = [m for m in run_checks(tags=["mcp"]) if m.id == "mcp_django.E005"]
    assert [e.msg.split(" is not usable")[0] for e in errors] == [
        "MCP[\"AUTHENTICATION_CLASSES\"] entry 'no.such.Authentication'",
        "MCP[\"AUTHENTICATION_CLASSES\"] entry <class 'dict'>",
    ]


class Suspended(BaseAuthentication):
    """Refuses with DRF exceptions that are not about credentials: an APIView keeps their status."""

    def authenticate(self, request: Any) -> None:
        key = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")[2]
        if key == "blocked":
            raise PermissionDenied("This key is suspended.")
        if key == "hasty":
            raise Throttled(wait=30)
        return None


@pytest.mark.parametrize("path", [ASYNC, SYNC])
def test_a_refusal_that_is_not_about_credentials_keeps_its_status(path: str) -> None:
    # DRF answers 401 (or 403 without a scheme) only for AuthenticationFailed and
    # NotAuthenticated; a suspended key is a 403 and a throttled one a 429, scheme or not.
    with classes(KeyAuthentication, Suspended):
        blocked = initialize(path, {"Authorization": "Other blocked"})
        assert blocked.status_code == 403 and "WWW-Authenticate" not in blocked
        assert blocked.json()["error"]["message"] == "This key is suspended."
        hasty = initialize(path, {"Authorization": "Other hasty"})
        assert hasty.status_code == 429 and "WWW-Authenticate" not in hasty
        assert hasty["Retry-After"] == "30"


@pytest.mark.parametrize("path", ["/mcp-sync", "/mcp-async"])
def test_request_auser_is_the_caller_the_classes_named(path: str, alice: User) -> None:
    """An async view (and Django's async ``login_required``) asks ``await request.auser()``:
    it is the user the classes named, as ``request.user`` is, not the session's user, which
    counts only with ``SessionAuthentication`` listed."""
    from tests.django import inprocess

    whoami = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "whoami", "arguments": {}}}
    whoami["params"]["_meta"] = inprocess.MODERN_META  # type: ignore[index]
    headers = {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "whoami"}

    def seen(user: User | None, extra: dict[str, str]) -> Any:
        answer = inprocess.reply(inprocess.post("tests.django.exposed_site", path, whoami, user, {**headers, **extra}))
        return answer["result"]["structuredContent"]["user"]

    with override_settings(MCP={**settings.MCP, "AUTHENTICATION_CLASSES": [KeyAuthentication]}):
        assert seen(alice, {}) is None
        assert seen(None, {"Authorization": "Key alice"}) == "alice"


def test_a_token_endpoint_behind_login_required_middleware_fails_the_check_and_is_refused() -> None:
    """``LoginRequiredMiddleware`` runs before the endpoint authenticates a token: a caller with
    a good key and no session is turned away (a JSON-RPC 401 naming the scheme, not the login
    page's redirect). ``manage.py check`` says so, naming the route, unless the route is
    ``login_not_required``."""
    user = User.objects.create_user("keyed")
    middleware = [*settings.MIDDLEWARE, "django.contrib.auth.middleware.LoginRequiredMiddleware"]
    keyed = {"Authorization": "Key keyed"}
    with override_settings(
        MIDDLEWARE=middleware,
        ROOT_URLCONF="tests.django.exposed_site",
        MCP={**settings.MCP, "AUTHENTICATION_CLASSES": [KeyAuthentication]},
    ):
        warned = {m.msg.split(" ")[0] for m in run_checks(tags=["mcp"]) if m.id == "mcp_django.W003"}
        assert warned == {"/mcp-sync", "/mcp-async"}
        for route in ("/mcp-sync", "/mcp-async"):
            refused = initialize(route, keyed)
            assert refused.status_code == 401 and refused["WWW-Authenticate"] == 'Key realm="mcp"', route
        assert principal(initialize("/mcp-open", keyed)) == f"django-user:{user.pk}"
    with override_settings(MIDDLEWARE=middleware, ROOT_URLCONF="tests.django.exposed_site"):
        # The endpoint's user is the session's, as for any view: the middleware is right.
        assert "mcp_django.W003" not in {m.id for m in run_checks(tags=["mcp"])}
    with override_settings(
        ROOT_URLCONF="tests.django.exposed_site",
        MCP={**settings.MCP, "AUTHENTICATION_CLASSES": [KeyAuthentication]},
    ):
        assert "mcp_django.W003" not in {m.id for m in run_checks(tags=["mcp"])}


FILES = MCPServer("W003 files")
urlpatterns = [
    path("mcp", include("mcp_django.urls")),
    path("mcp/shop", default_view(server="tests.django.exposed_site.mcp")),
    path("mcp/files", default_view(server=FILES)),
]


@override_settings(
    ROOT_URLCONF=__name__,
    MIDDLEWARE=[*settings.MIDDLEWARE, "django.contrib.auth.middleware.LoginRequiredMiddleware"],
    MCP={**settings.MCP, "AUTHENTICATION_CLASSES": [KeyAuthentication]},
)
def test_the_login_required_middleware_check_hints_at_the_server_each_route_serves() -> None:
    """The hint is code to paste into urls.py: for a route of another server than
    ``MCP["SERVER"]``, a bare ``default_view()`` would serve the wrong server there."""
    hints = {m.msg.split(" ")[0]: m.hint for m in run_checks(tags=["mcp"]) if m.id == "mcp_django.W003"}
    assert hints == {
        "/mcp": 'Route it with login_not_required: path("mcp", login_not_required(default_view())).',
        "/mcp/shop": "Route it with login_not_required: "
        'path("mcp/shop", login_not_required(default_view(server="tests.django.exposed_site.mcp"))).',
        "/mcp/files": "Route it with login_not_required: "
        'path("mcp/files", login_not_required(default_view(server=...))), with the server it serves now.',
    }


@pytest.mark.parametrize("path", ["/mcp-sync", "/mcp-async"])
def test_login_required_middleware_turns_anonymous_callers_away_with_json_rpc(path: str, alice: User) -> None:
    """Session authentication behind ``LoginRequiredMiddleware``: a caller without a session is
    told so in JSON-RPC (403, as an ``APIView`` with only ``SessionAuthentication`` answers), not
    redirected to the HTML login page, which no MCP client follows; a signed-in one is served.
    Other pages keep the middleware's redirect."""
    with override_settings(
        MIDDLEWARE=[*settings.MIDDLEWARE, "django.contrib.auth.middleware.LoginRequiredMiddleware"],
        ROOT_URLCONF="tests.django.exposed_site",
    ):
        refused = initialize(path, {})
        assert refused.status_code == 403 and refused["Content-Type"] == "application/json", refused
        assert "WWW-Authenticate" not in refused and "Location" not in refused
        assert json.loads(refused.content)["error"] == {"code": -32600, "message": "Authentication required"}
        assert principal(initialize(path, {}, login=alice)) == f"django-user:{alice.pk}"
        page = Client().get("/orders")
        assert page.status_code == 302 and page["Location"].startswith(settings.LOGIN_URL)


class GuardedURLs:
    """A URLconf (Django takes any object with ``urlpatterns``)."""

    urlpatterns = [path("mcp", login_required(default_view(server="tests.django.exposed_site.mcp")))]


@override_settings(ROOT_URLCONF=GuardedURLs)
def test_an_endpoint_routed_login_required_turns_anonymous_callers_away_with_json_rpc(alice: User) -> None:
    """``path("mcp", login_required(default_view()))``: the decorator's redirect, likewise."""
    refused = initialize("/mcp", {})
    assert refused.status_code == 403, refused
    assert json.loads(refused.content)["error"]["message"] == "Authentication required"
    assert principal(initialize("/mcp", {}, login=alice)) == f"django-user:{alice.pk}"


@pytest.mark.parametrize("path", [ASYNC, SYNC])
def test_a_user_the_database_cannot_load_is_a_json_error(
    path: str, alice: User, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The signed-in user is read (session, user row) when the view first asks who calls: with
    Django's connection pool exhausted that fails, and the client gets the endpoint's JSON 503
    to retry, not Django's HTML error page."""
    from tests.django.test_django_store import _pool_timeout

    def no_connection(*_args: Any) -> Any:
        raise _pool_timeout()

    async def ano_connection(*_args: Any) -> Any:
        raise _pool_timeout()

    monkeypatch.setattr(django_auth, "get_user", no_connection)
    monkeypatch.setattr(django_auth, "aget_user", ano_connection)
    with (
        override_settings(ROOT_URLCONF="tests.django.asgi_site"),
        caplog.at_level(logging.WARNING, logger="mcp_common"),
    ):
        response = initialize(path, {}, login=alice)
    assert (response.status_code, response["Content-Type"]) == (503, "application/json"), response.content
    assert response["Retry-After"] == "1"
    assert response.json()["error"]["message"] == "Server busy: no database connection is free; retry shortly"
    assert not MCPSession.objects.exists()
