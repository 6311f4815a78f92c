"""Django-only behaviour: settings, system checks, discovery of apps' mcp.py, the ORM store."""

from __future__ import annotations

import io
import json
import logging
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.checks import run_checks
from django.http import HttpResponse
from django.test import Client, override_settings
from django.urls import path

from mcp_common.store import SessionRecord
from mcp_django.conf import mcp_settings
from mcp_django.store import DjangoStore
from mcp_django.views import MCPView
from tests.conftest import ROOT

LEGACY_INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
}
HEADERS = {"HTTP_ACCEPT": "application/json, text/event-stream"}
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


def check_ids() -> set[str]:
    return {m.id for m in run_checks(tags=["mcp"]) if m.id}


def test_settings_defaults_and_override() -> None:
    assert mcp_settings.MAX_BODY_SIZE == 4 * 1024 * 1024
    with override_settings(MCP={"SERVER": "example_project.servers.library.mcp", "MAX_BODY_SIZE": 10}):
        assert mcp_settings.MAX_BODY_SIZE == 10
        assert mcp_settings.build_config().max_body_size == 10
    assert mcp_settings.MAX_BODY_SIZE == 4 * 1024 * 1024


def test_system_checks() -> None:
    assert check_ids() == set()
    with override_settings(MCP={"SERVR": "x"}):
        assert "mcp_django.E001" in check_ids()
    with override_settings(MCP={"SERVER": "no.such.module.mcp"}):
        assert "mcp_django.E002" in check_ids()
    with override_settings(MCP={"SERVER": "django.conf.settings"}):
        assert "mcp_django.E002" in check_ids()
    with override_settings(MCP={"POLL_INTERVAL": 0}):
        assert "mcp_django.E003" in check_ids()
    # Durations past ten years: an expiry past the year 9999 fails every resolver call, a purge
    # cut-off before year 1 fails the purge, an infinite hold or poll never ends.
    for key, value in (
        ("REQUEST_STATE_TTL", float("inf")),
        ("REQUEST_STATE_TTL", 1e12),
        ("SESSION_TTL", 1e11),
        ("STREAM_HOLD_SECONDS", float("inf")),
        ("POLL_INTERVAL", float("nan")),
        ("WAIT_DETACH_SECONDS", float("inf")),
        ("WAIT_DETACH_SECONDS", float("nan")),
        ("SQLITE_CHECKPOINT_INTERVAL", -0.05),
        ("SQLITE_CHECKPOINT_INTERVAL", float("nan")),
        ("SQLITE_CHECKPOINT_INTERVAL", None),
    ):
        with override_settings(MCP={**settings.MCP, key: value}):
            errors = [m.msg for m in run_checks(tags=["mcp"]) if m.id == "mcp_django.E003"]
            assert len(errors) == 1 and f'MCP["{key}"]' in errors[0], (key, value, errors)
    with override_settings(MCP={**settings.MCP, "SESSION_TTL": 3 * 365 * 24 * 3600}):
        assert check_ids() == set()
    for threads in (0, 2.5, True):
        with override_settings(MCP={"DB_THREADS": threads}):
            assert "mcp_django.E003" in check_ids()
    with override_settings(MCP={**settings.MCP, "DB_THREADS": 2}):
        assert check_ids() == set() and mcp_settings.build_config().db_threads == 2
    assert mcp_settings.build_config().sqlite_checkpoint_interval == 0.2
    with override_settings(MCP={**settings.MCP, "SQLITE_CHECKPOINT_INTERVAL": 0}):
        assert check_ids() == set() and mcp_settings.build_config().sqlite_checkpoint_interval == 0
    with override_settings(MIDDLEWARE=["django.middleware.common.CommonMiddleware"]):
        assert "mcp_django.W002" in check_ids()
    with override_settings(SECRET_KEY="short"):
        assert "mcp_django.W001" in check_ids()


MIGRATE_A_FILE_DATABASE = """
import json, os, sys
from django.conf import settings
settings.configure(
    SECRET_KEY="journal-check-secret-key-0123456789abcdef-0123456789",
    INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "mcp_django"],
    DATABASES={"default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ["JOURNAL_CHECK_DB"],
        "OPTIONS": json.loads(os.environ["JOURNAL_CHECK_OPTIONS"]),
    }},
    USE_TZ=True,
    MCP={"SERVER": "example_project.servers.library.mcp"},
)
import django
django.setup()
from django.core.management import execute_from_command_line
execute_from_command_line(["manage.py", "migrate", "--verbosity", "0"])
"""


def _run_project(script: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``script`` run by a new interpreter: a project of its own (``settings.configure``)."""
    environment = {**os.environ, **env}
    environment.pop("DJANGO_SETTINGS_MODULE", None)
    command = [sys.executable, "-c", script]
    done = subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done


def _migrate_file_database(path: Path, options: dict[str, str]) -> str:
    """What ``manage.py migrate`` prints for a project on the SQLite file ``path``."""
    done = _run_project(MIGRATE_A_FILE_DATABASE, JOURNAL_CHECK_DB=str(path), JOURNAL_CHECK_OPTIONS=json.dumps(options))
    return done.stdout + done.stderr


def test_migrate_warns_of_a_sqlite_file_in_rollback_journal_mode(tmp_path: Path) -> None:
    # Django's default SQLite setup syncs a rollback journal at every commit: each question's
    # two transactions cost several times what they cost in WAL mode, and readers wait for
    # every commit of another worker. The warning names the setting that fixes it.
    output = _migrate_file_database(tmp_path / "default.sqlite3", {})
    assert "mcp_django.W004" in output
    assert "'default'" in output and "journal mode 'delete'" in output
    assert "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;" in output
    # Set in OPTIONS, as the hint says: nothing to warn of.
    wal = {"init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"}
    assert "mcp_django.W004" not in _migrate_file_database(tmp_path / "wal.sqlite3", wal)
    # WAL mode is kept in the file: a database switched once needs no OPTIONS.
    switched = tmp_path / "switched.sqlite3"
    with sqlite3.connect(switched) as connection:
        assert connection.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
    assert "mcp_django.W004" not in _migrate_file_database(switched, {})


SERVE_WITH_A_READ_REPLICA = """
import json, os, sys, time
from django.conf import settings
WAL = {"init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"}
settings.configure(
    SECRET_KEY="replica-tests-secret-key-0123456789abcdef-0123456789",
    ALLOWED_HOSTS=["testserver"],
    INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "mcp_django"],
    MIDDLEWARE=["mcp_django.middleware.MCPMiddleware"],
    DATABASES={
        "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["PRIMARY_DB"], "OPTIONS": WAL},
        "replica": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["REPLICA_DB"], "OPTIONS": WAL},
    },
    DATABASE_ROUTERS=["tests.django.replica_site.PrimaryReplicaRouter"],
    ROOT_URLCONF="tests.django.replica_site",
    USE_TZ=True,
    MCP={"SERVER": "benchmarks.bench_server.mcp"},
)
import django
django.setup()
from django.core.management import call_command
from django.test import Client
call_command("migrate", verbosity=0)
call_command("migrate", database="replica", verbosity=0)
import mcp_django
from mcp_common.elicitation import new_record
from mcp_django.store import DjangoStore

client, seen = Client(), {}
ACCEPT = "application/json, text/event-stream"
def post(body, **headers):
    return client.post("/mcp", json.dumps(body), content_type="application/json", HTTP_ACCEPT=ACCEPT, **headers)
def call(id, params, version="2025-11-25", **headers):
    return post({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params},
                HTTP_MCP_PROTOCOL_VERSION=version, **headers)

init = post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}})
sid = init["Mcp-Session-Id"]
post({"jsonrpc": "2.0", "method": "notifications/initialized"},
     HTTP_MCP_SESSION_ID=sid, HTTP_MCP_PROTOCOL_VERSION="2025-11-25")
legacy = call(1, {"name": "echo", "arguments": {"text": "hi"}}, HTTP_MCP_SESSION_ID=sid)
seen["legacy call"] = [legacy.status_code, legacy.content.decode()]

META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}
modern = dict(version="2026-07-28", HTTP_MCP_METHOD="tools/call", HTTP_MCP_NAME="confirm_echo")
params = {"name": "confirm_echo", "arguments": {"text": "hi"}, "_meta": META}
asked = call(2, params, **modern).json()["result"]
(key,) = asked["inputRequests"]
answer = {key: {"action": "accept", "content": {"ok": True}}}
done = call(3, {**params, "inputResponses": answer, "requestState": asked["requestState"]}, **modern)
seen["2026 round trip"] = [done.status_code, done.content.decode()]

store, now = DjangoStore(), time.time()
question = new_record(server_name="Bench", tool="pay", request_key="srv-1", principal=None,
                      params={"mode": "url", "message": "Pay", "url": "https://pay.example.com/1",
                              "elicitationId": "deposit-1"},
                      expires=now + 600, session_id=sid)
store.create_pending(sid, "srv-1", "elicitation/create", "{}", question)
seen["completed"] = mcp_django.complete_elicitation("deposit-1")
row = store.get_elicitation(question.id)
seen["status"] = row.status if row is not None else None
from mcp_common.store import GET_STREAM
seen["notified"] = [json.loads(e.message)["method"] for e in store.events_after(sid, GET_STREAM, 0)]
print(json.dumps(seen))
"""


def test_the_store_reads_where_it_writes_under_a_read_replica_router(tmp_path: Path) -> None:
    """The Django docs' primary/replica router sends reads to a replica, which lags behind the
    primary. The store's ORM reads went there: a payment's completion found no question to
    complete (the webhook got 0, the question stayed open), and the session's event log read
    back empty, so its client would never hear of the completion."""
    done = _run_project(
        SERVE_WITH_A_READ_REPLICA, PRIMARY_DB=str(tmp_path / "primary.db"), REPLICA_DB=str(tmp_path / "replica.db")
    )
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    status, body = seen["legacy call"]
    assert status == 200 and '"echo: hi"' in body, seen
    status, body = seen["2026 round trip"]
    assert status == 200 and '"echo: hi"' in body, seen
    assert (seen["completed"], seen["status"]) == (1, "completed"), seen
    assert seen["notified"] == ["notifications/elicitation/complete"], seen


@pytest.mark.django_db
def test_the_journal_check_leaves_databases_it_was_not_asked_about() -> None:
    # As every database check: only where the command names the database (migrate, check
    # --database), never a query at runserver's or the test runner's start.
    assert not [m for m in run_checks(tags=["database"]) if m.id == "mcp_django.W004"]
    # The test database is in memory, which has no journal on disk to warn of.
    assert not [m for m in run_checks(tags=["database"], databases=["default"]) if m.id == "mcp_django.W004"]


def test_an_endpoint_routed_without_a_server_fails_the_system_check() -> None:
    # The README's urls.py line routes mcp_django.urls, which serves MCP["SERVER"]: without it
    # every request raised ImproperlyConfigured, an HTML 500 page, while `check` said nothing.
    with override_settings(MCP={}):
        errors = [m for m in run_checks(tags=["mcp"]) if m.id == "mcp_django.E002"]
    assert len(errors) == 1
    assert 'MCP["SERVER"]' in errors[0].msg and "/mcp" in errors[0].msg
    # Views that name their own server, by argument or by class, need no MCP["SERVER"].
    with override_settings(MCP={}, ROOT_URLCONF="tests.django.exposed_site"):
        assert "mcp_django.E002" not in check_ids()
    with override_settings(MCP={}, ROOT_URLCONF=__name__):
        assert "mcp_django.E002" not in check_ids()


class LibraryView(MCPView):
    server = "example_project.servers.library.mcp"


urlpatterns = [path("library", LibraryView.as_view())]  # ROOT_URLCONF of the test above


@pytest.mark.django_db(transaction=True)
def test_apps_mcp_modules_are_discovered() -> None:
    client = Client()
    init = client.post("/mcp", json.dumps(LEGACY_INIT), content_type="application/json", **HEADERS)
    assert init.status_code == 200, init.content
    session = init["Mcp-Session-Id"]
    listed = client.post(
        "/mcp",
        json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        content_type="application/json",
        HTTP_MCP_SESSION_ID=session,
        HTTP_MCP_PROTOCOL_VERSION="2025-11-25",
        **HEADERS,
    )
    names = {tool["name"] for tool in listed.json()["result"]["tools"]}
    assert "shop_opening_hours" in names and "add_to_cart" in names


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("host", "allowed_hosts"),
    [
        ("", None),  # not a missing Host (HTTP/1.0): an empty one, which Django refuses
        ("[::1]x", None),
        ("[::1]:80:80", None),
        ("evil.example", None),
        ("a_b.example.com", [".example.com"]),  # matches the pattern, but not a valid host name
        ("x.example.com:8000:1", ["*"]),
    ],
)
def test_hosts_django_refuses_get_json_421(host: str, allowed_hosts: list[str] | None) -> None:
    # Not CommonMiddleware's HTML 400 (or the DEBUG page): MCPMiddleware answers first.
    settings = {"ALLOWED_HOSTS": allowed_hosts} if allowed_hosts is not None else {}
    with override_settings(**settings):
        response = Client().post(
            "/mcp", json.dumps(LEGACY_INIT), content_type="application/json", HTTP_HOST=host, **HEADERS
        )
    assert response.status_code == 421, response.content[:300]
    assert response["Content-Type"] == "application/json"
    assert response.json()["error"]["code"] == -32600


@pytest.mark.django_db(transaction=True)
def test_a_refused_host_or_origin_is_logged_with_the_setting_that_admits_it(caplog: pytest.LogCaptureFixture) -> None:
    """MCPMiddleware answers before CommonMiddleware, whose refusal would have logged Django's
    hint ("You may need to add ... to ALLOWED_HOSTS"): the client shows only "Invalid Host
    header", so the log must still say it."""
    with caplog.at_level(logging.WARNING):
        refused = Client().post(
            "/mcp", json.dumps(LEGACY_INIT), content_type="application/json", HTTP_HOST="shop.example.com", **HEADERS
        )
        assert refused.status_code == 421
        refused = Client().post(
            "/mcp",
            json.dumps(LEGACY_INIT),
            content_type="application/json",
            HTTP_HOST="localhost",
            HTTP_ORIGIN="http://localhost:6274",
            **HEADERS,
        )
        assert refused.status_code == 403
    assert "You may need to add 'shop.example.com' to ALLOWED_HOSTS" in caplog.text
    assert """add 'http://localhost:6274' to MCP["ALLOWED_ORIGINS"]""" in caplog.text


@pytest.mark.django_db(transaction=True)
def test_djangos_host_verdict_follows_its_settings() -> None:
    """The middleware remembers Django's verdict per Host: a settings change must be seen."""

    def status() -> int:
        return (
            Client()
            .post(
                "/mcp",
                json.dumps(LEGACY_INIT),
                content_type="application/json",
                HTTP_HOST="localhost",
                HTTP_X_FORWARDED_HOST="evil.example",
                **HEADERS,
            )
            .status_code
        )

    assert status() == 200  # X-Forwarded-Host is ignored by default
    with override_settings(USE_X_FORWARDED_HOST=True):
        assert status() == 421
    assert status() == 200


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("forwarded", "origin", "status"),
    [
        ("public.example", "https://public.example", 200),
        ("public.example", "https://internal", 403),  # the proxy's own name is not this site's
        ("evil.example", "https://evil.example", 421),
    ],
)
@pytest.mark.parametrize("path", ["/mcp-sync", "/mcp-async"])
def test_behind_a_proxy_the_host_is_the_one_django_uses(path: str, forwarded: str, origin: str, status: int) -> None:
    """``USE_X_FORWARDED_HOST``: Django takes the public name from ``X-Forwarded-Host`` (the
    ``Host`` header names the app server behind the proxy). The MCP checks take the same name,
    for the Host check and for an Origin's same-host rule, on both eras (a browser client
    behind such a proxy was refused with 421)."""
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": MODERN_META}}
    modern = {"HTTP_MCP_PROTOCOL_VERSION": "2026-07-28", "HTTP_MCP_METHOD": "tools/list"}
    proxy = {
        "USE_X_FORWARDED_HOST": True,
        "ALLOWED_HOSTS": ["public.example"],
        "SECURE_PROXY_SSL_HEADER": ("HTTP_X_FORWARDED_PROTO", "https"),
        "ROOT_URLCONF": "tests.django.exposed_site",
    }
    for middleware in (None, []):
        settings = proxy if middleware is None else {**proxy, "MIDDLEWARE": middleware}
        with override_settings(**settings):
            for body, headers in ((LEGACY_INIT, {}), (listing, modern)):
                response = Client().post(
                    path,
                    json.dumps(body),
                    content_type="application/json",
                    HTTP_HOST="internal:8000",
                    HTTP_X_FORWARDED_HOST=forwarded,
                    HTTP_X_FORWARDED_PROTO="https",
                    HTTP_ORIGIN=origin,
                    **HEADERS,
                    **headers,
                )
                assert response.status_code == status, (middleware, body["method"], response.content[:300])
                assert response["Content-Type"].startswith("application/json")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("forwarded", ["evil.example, public.example", "evil.example,www.public.example"])
@pytest.mark.parametrize("middleware", [None, []])
def test_a_forwarded_host_list_is_refused_as_django_refuses_it(forwarded: str, middleware: list[str] | None) -> None:
    """Proxies that append to ``X-Forwarded-Host`` send a list. Django takes the header whole
    and refuses it (a list is not a host) even under ``ALLOWED_HOSTS = [".public.example"]``,
    with or without ``MCPMiddleware``: so must the view's own Host check, or a list ending in
    an allowed name passes the DNS-rebinding check by its suffix."""
    proxy: dict[str, object] = {"USE_X_FORWARDED_HOST": True, "ALLOWED_HOSTS": [".public.example"]}
    if middleware is not None:
        proxy["MIDDLEWARE"] = middleware
    with override_settings(**proxy):
        response = Client().post(
            "/mcp",
            json.dumps(LEGACY_INIT),
            content_type="application/json",
            HTTP_HOST="internal:8000",
            HTTP_X_FORWARDED_HOST=forwarded,
            **HEADERS,
        )
    assert response.status_code == 421, response.content[:300]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("host", ["", "[::1]x", "[::1]:80:80"])
def test_the_view_refuses_bad_hosts_without_any_middleware(host: str) -> None:
    with override_settings(MIDDLEWARE=[]):
        response = Client().post(
            "/mcp", json.dumps(LEGACY_INIT), content_type="application/json", HTTP_HOST=host, **HEADERS
        )
    assert response.status_code == 421, response.content[:300]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("secure", "origin", "status"),
    [
        (True, "http://testserver", 403),  # a plain-HTTP page of this host, the request over HTTPS
        (True, "https://testserver", 200),
        (False, "https://testserver", 200),  # HTTPS ended at a proxy that does not tell Django
        (False, "http://testserver", 200),
    ],
)
def test_a_same_host_origin_must_be_https_when_the_request_is(secure: bool, origin: str, status: int) -> None:
    client = Client()
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": MODERN_META}}
    modern = {"HTTP_MCP_PROTOCOL_VERSION": "2026-07-28", "HTTP_MCP_METHOD": "tools/list"}
    for body, headers in ((LEGACY_INIT, {}), (listing, modern)):
        response = client.post(
            "/mcp",
            json.dumps(body),
            content_type="application/json",
            secure=secure,
            HTTP_ORIGIN=origin,
            **HEADERS,
            **headers,
        )
        assert response.status_code == status, response.content[:300]
        if status == 403:
            assert json.loads(response.content)["error"] == {"code": -32600, "message": "Invalid Origin header"}
    # Django's own setting says which requests came over HTTPS through a proxy.
    with override_settings(SECURE_PROXY_SSL_HEADER=("HTTP_X_FORWARDED_PROTO", "https")):
        response = client.post(
            "/mcp",
            json.dumps(LEGACY_INIT),
            content_type="application/json",
            HTTP_ORIGIN="http://testserver",
            HTTP_X_FORWARDED_PROTO="https",
            **HEADERS,
        )
    assert response.status_code == 403, response.content[:300]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", ["/mcp-sync", "/mcp-async"])
def test_a_malformed_secure_proxy_ssl_header_is_a_json_error_not_a_500_page(
    path: str, caplog: pytest.LogCaptureFixture
) -> None:
    """``SECURE_PROXY_SSL_HEADER = "HTTP_X_FORWARDED_PROTO"`` (not a pair): Django cannot tell
    whether a request came over HTTPS. A request with an Origin, whose check needs to know, gets
    a JSON-RPC error (it got Django's HTML 500 page) and the log names the setting."""
    with override_settings(SECURE_PROXY_SSL_HEADER="HTTP_X_FORWARDED_PROTO", ROOT_URLCONF="tests.django.exposed_site"):
        response = Client(raise_request_exception=False).post(
            path,
            json.dumps(LEGACY_INIT),
            content_type="application/json",
            HTTP_HOST="testserver",
            HTTP_ORIGIN="https://testserver",
            **HEADERS,
        )
    assert response.status_code == 500, response.content[:300]
    assert json.loads(response.content)["error"] == {"code": -32603, "message": "Internal server error"}
    assert "SECURE_PROXY_SSL_HEADER" in caplog.text


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", ["/mcp-sync", "/mcp-async"])
@pytest.mark.parametrize("failing", ["endpoint", "origin"])
def test_a_500_is_logged_once_with_its_traceback(
    path: str, failing: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The endpoint logs its own 500 with the traceback; ``django.request`` then logged the same
    answer again ("Internal Server Error: /mcp", no traceback): two ERROR records, two alerts
    in an error monitor, for one failure."""
    from mcp_common.endpoint import MCPEndpoint

    def broken(self: MCPEndpoint) -> None:
        raise RuntimeError("the database went away")

    headers = dict(HEADERS, HTTP_HOST="testserver")
    if failing == "endpoint":
        monkeypatch.setattr(MCPEndpoint, "_process_check", broken)
        proxy_header: object = ("HTTP_X_FORWARDED_PROTO", "https")
    else:
        proxy_header, headers["HTTP_ORIGIN"] = "HTTP_X_FORWARDED_PROTO", "https://testserver"
    site = override_settings(SECURE_PROXY_SSL_HEADER=proxy_header, ROOT_URLCONF="tests.django.exposed_site")
    with site, caplog.at_level(logging.WARNING):
        response = Client(raise_request_exception=False).post(
            path, json.dumps(LEGACY_INIT), content_type="application/json", **headers
        )
    assert response.status_code == 500, response.content[:300]
    # (The heartbeats' records are left out: tests/conftest.py.)
    logged = [(r.name, r.levelname) for r in caplog.records]
    expected = "mcp_common" if failing == "endpoint" else "mcp_django"
    assert logged == [(expected, "ERROR")], logged
    assert caplog.records[0].exc_info is not None


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("origin", "status"), [("https://testserver", 200), ("http://testserver", 403)])
def test_a_host_naming_its_default_port_is_the_same_origin(origin: str, status: int) -> None:
    """A proxy setting ``Host: $host:$server_port`` sends ``testserver:443``; the browser's
    Origin leaves the default port out: the same origin (it was refused)."""
    response = Client().post(
        "/mcp",
        json.dumps(LEGACY_INIT),
        content_type="application/json",
        secure=True,
        HTTP_HOST="testserver:443",
        HTTP_ORIGIN=origin,
        **HEADERS,
    )
    assert response.status_code == status, response.content[:300]


@pytest.mark.django_db(transaction=True)
def test_a_bracketed_host_with_a_port_is_served() -> None:
    response = Client().post(
        "/mcp", json.dumps(LEGACY_INIT), content_type="application/json", HTTP_HOST="[::1]:8000", **HEADERS
    )
    assert response.status_code == 200, response.content[:300]


@pytest.mark.django_db
def test_unconfigured_server_is_a_clear_error() -> None:
    from django.core.exceptions import ImproperlyConfigured

    from mcp_django.registry import resolve_server

    with override_settings(MCP={}), pytest.raises(ImproperlyConfigured, match=r'MCP = \{"SERVER"'):
        resolve_server(None)


def test_an_endpoint_routed_without_the_app_installed_says_to_install_it() -> None:
    # Before: the URLconf loaded, `check` said nothing, and the first request got Django's HTML
    # 500 page ("Model class mcp_django.models.MCPSession doesn't declare an explicit app_label").
    from django.core.exceptions import ImproperlyConfigured

    from mcp_django.views import default_view

    installed = [app for app in settings.INSTALLED_APPS if app != "mcp_django"]
    with override_settings(INSTALLED_APPS=installed):
        for build in (default_view, MCPView.as_view):
            with pytest.raises(ImproperlyConfigured, match=r'add "mcp_django" to INSTALLED_APPS'):
                build()


@pytest.mark.django_db
def test_tables_not_migrated_yet_the_log_says_to_run_migrate(caplog: pytest.LogCaptureFixture) -> None:
    """A newcomer who skipped ``migrate`` (gunicorn, unlike runserver, does not mention unapplied
    migrations) reads the fix in the traceback, not just "no such table", as under Flask."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE mcp_django_mcpsession")  # rolled back with the test
    with caplog.at_level(logging.ERROR, "mcp_common"):
        response = Client().post("/mcp", json.dumps(LEGACY_INIT), content_type="application/json", **HEADERS)
    assert response.status_code == 500 and "migrate" not in response.content.decode()
    assert "no such table: mcp_django_mcpsession" in caplog.text
    assert "run `manage.py migrate`" in caplog.text


KEEP_THE_LOG = """
class Kept(logging.Handler):
    def __init__(self):
        super().__init__()
        self.setFormatter(logging.Formatter())
        self.text = []
    def emit(self, record):
        self.text.append(self.format(record))
kept = Kept()
for name in ("mcp_common", "mcp_django"):
    logging.getLogger(name).addHandler(kept)
init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
"""
"""A script's part that keeps what the MCP loggers write (``kept.text``), and an ``initialize``."""


SERVE_FROM_AN_UNMIGRATED_DATABASE = (
    """
import json, logging, os
from django.conf import settings
settings.configure(
    SECRET_KEY="own-database-tests-secret-key-0123456789abcdef-0123456789",
    ALLOWED_HOSTS=["testserver"],
    INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "mcp_django"],
    MIDDLEWARE=["mcp_django.middleware.MCPMiddleware"],
    DATABASES={
        "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["DEFAULT_DB"]},
        "mcp": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["MCP_DB"]},
    },
    DATABASE_ROUTERS=["tests.django.replica_site.OwnDatabaseRouter"],
    ROOT_URLCONF="tests.django.replica_site",
    USE_TZ=True,
    MCP={"SERVER": "benchmarks.bench_server.mcp"},
)
import django
django.setup()
from django.core.management import call_command
from django.test import Client
call_command("migrate", verbosity=0)  # the MCP tables are not the default database's

"""
    + KEEP_THE_LOG
    + """response = Client().post("/mcp", json.dumps(init), content_type="application/json",
                         HTTP_ACCEPT="application/json, text/event-stream")
print(json.dumps({"status": response.status_code, "log": "\\n".join(kept.text)}))
"""
)


def test_tables_not_migrated_on_the_routers_database_the_log_names_it(tmp_path: Path) -> None:
    """A project whose routers keep the MCP tables in a database of their own: the fix the log
    gave, ``manage.py migrate``, migrates the default database, says "No migrations to apply",
    and leaves the MCP tables missing. The log names the database to migrate."""
    done = _run_project(
        SERVE_FROM_AN_UNMIGRATED_DATABASE, DEFAULT_DB=str(tmp_path / "default.db"), MCP_DB=str(tmp_path / "mcp.db")
    )
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["status"] == 500 and "no such table: mcp_django_mcpsession" in seen["log"], seen
    assert "run `manage.py migrate --database mcp`" in seen["log"], seen["log"][-500:]


SERVE_A_DATABASE_PER_TENANT = (
    """
import json, logging, os, time
from django.conf import settings
settings.configure(
    SECRET_KEY="tenant-router-tests-secret-key-0123456789abcdef-0123456789",
    ALLOWED_HOSTS=[".localhost"],
    INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "mcp_django"],
    MIDDLEWARE=["tests.django.replica_site.tenant_middleware", "mcp_django.middleware.MCPMiddleware"],
    DATABASES={
        alias: {"ENGINE": "django.db.backends.sqlite3", "NAME": os.path.join(os.environ["DATA_DIR"], alias)}
        for alias in ("default", "tenant_a", "tenant_b")
    },
    DATABASE_ROUTERS=[os.environ["ROUTER"]],
    ROOT_URLCONF="tests.django.replica_site",
    USE_TZ=True,
    MCP={"SERVER": "benchmarks.bench_server.mcp", "HEARTBEAT_INTERVAL": 0.1},
)
import django
django.setup()
from django.core.management import call_command
from django.test import Client
for alias in settings.DATABASES:
    call_command("migrate", database=alias, verbosity=0)

"""
    + KEEP_THE_LOG
    + """def post(host, body, **headers):
    return Client(HTTP_HOST=host).post("/mcp", json.dumps(body), content_type="application/json",
                                       HTTP_ACCEPT="application/json, text/event-stream", **headers)
statuses = [post("a.localhost", init).status_code]
# The endpoint's own threads (its heartbeat, every 0.1 s) query the database they are routed to
# before tenant b's request does, however busy the machine: the log then names that database.
from mcp_django.store import _ALIASES
deadline = time.monotonic() + 10
while "default" not in _ALIASES and time.monotonic() < deadline:
    time.sleep(0.02)
statuses.append(post("b.localhost", init).status_code)
sid = post("a.localhost", init)["Mcp-Session-Id"]
listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
for host in ("b.localhost", "a.localhost"):
    statuses.append(post(host, listing, HTTP_MCP_SESSION_ID=sid, HTTP_MCP_PROTOCOL_VERSION="2025-11-25").status_code)
time.sleep(0.5)  # heartbeats, on the endpoint's own threads
print(json.dumps({"statuses": statuses, "log": "\\n".join(kept.text)}))
"""
)


@pytest.mark.parametrize("router", ["ThreadLocalTenantRouter", "SharedMCPTenantRouter"])
def test_a_router_choosing_the_mcp_database_by_thread_is_named_in_the_log(tmp_path: Path, router: str) -> None:
    """A database per tenant, chosen by a router from a thread-local that a middleware sets:
    the endpoint's own threads (the heartbeat, the poll for legacy answers, a call's work while
    it waits for its client) have no tenant, and query another database than the requests do.
    A legacy answer then never reaches the call waiting for it, which ends cancelled at its
    timeout. The log says so at once, and what to do; a router that keeps the MCP tables in one
    database, whatever the thread, is served in silence, each tenant's sessions its own."""
    done = _run_project(
        SERVE_A_DATABASE_PER_TENANT, DATA_DIR=str(tmp_path), ROUTER=f"tests.django.replica_site.{router}"
    )
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    if router == "SharedMCPTenantRouter":
        # One set of MCP tables for every tenant: a session of a's is not b's (request.tenant).
        assert seen == {"statuses": [200, 200, 404, 200], "log": ""}
        return
    assert seen["log"].count("route mcp_django's models to one database") == 1, seen["log"]
    assert "'tenant_a'" in seen["log"] and "'default'" in seen["log"], seen["log"]


@pytest.mark.django_db(transaction=True)
def test_store_round_trip() -> None:
    store = DjangoStore()
    now = time.time()
    store.create_session(SessionRecord("s1", "2025-11-25", "{}", "django-user:1", "Demo", now, now))
    record = store.get_session("s1")
    assert record is not None and record.principal == "django-user:1"
    first = store.append_event("s1", "get", '{"a":1}')
    second = store.append_event("s1", "get", '{"a":2}', final=True)
    assert [e.event_id for e in store.events_after("s1", "get", 0)] == [first, second]
    assert [e.final for e in store.events_after("s1", "get", first)] == [True]
    store.set_cursor("s1", second)
    store.set_cursor("s1", first)  # never goes back
    assert store.get_cursor("s1") == second
    store.create_pending("s1", "r1", "elicitation/create", "{}")
    assert store.answer_pending("s1", "r1", '{"result":{}}') is True
    assert store.answer_pending("s1", "r1", '{"result":{"late":true}}') is False
    pending = store.get_pending("s1", "r1")
    assert pending is not None and pending.response == '{"result":{}}'
    assert store.purge_expired(now + 1) == 1
    assert store.get_session("s1") is None and store.events_after("s1", "get", 0) == []


def test_a_thread_that_only_reuses_the_request_threads_id_still_gets_the_requests_state() -> None:
    """``tool_context()`` skips Django's request state on the thread that serves the request.
    A thread's id outlives it: the next thread started often gets the same one (a thread per
    request under runserver, under ASGI's thread-sensitive contexts). Code of the request's
    that runs there (a tool still running after its stream closed) needs the state all the
    same: ``reverse()`` must keep the script prefix."""
    import threading

    from django.test import RequestFactory
    from django.urls import get_script_prefix, set_script_prefix

    from mcp_common import current_request
    from mcp_common.http import HTTPRequest
    from mcp_django.endpoint import DjangoEndpoint, mark_serving_thread

    request = RequestFactory().post("/mcp", SCRIPT_NAME="/shop")
    served = threading.Thread(target=mark_serving_thread, args=(request,))
    served.start()
    served.join()
    seen: list[str] = []

    def later() -> None:
        set_script_prefix("/")
        current_request.set(HTTPRequest(method="POST", headers={}, native=request))
        with DjangoEndpoint.tool_context(None):  # type: ignore[arg-type]
            seen.append(get_script_prefix())

    other = threading.Thread(target=later)
    other.start()
    other.join()
    assert seen == ["/shop/"]


@pytest.mark.django_db(transaction=True)
def test_an_endpoint_a_settings_change_drops_is_closed_with_its_threads() -> None:
    """A project's tests change ``MCP`` with ``override_settings``: each change (entering and
    leaving) builds the endpoints anew. The dropped ones kept their lifespan, heartbeat and
    database threads for the process's life: three threads more per test, and heartbeats of
    endpoints nothing serves. They are closed as they are dropped."""
    import threading

    from mcp_django.registry import get_endpoint

    def alive(threads: list[threading.Thread]) -> list[str]:
        return [t.name for t in threads if t.is_alive()]

    dropped = []
    for _ in range(3):
        with override_settings(MCP={"SERVER": "example_project.servers.demo.mcp", "JSON_RESPONSE": True}):
            response = Client().post("/mcp", json.dumps(LEGACY_INIT), content_type="application/json", **HEADERS)
            assert response.status_code == 200, response.content
            endpoint = get_endpoint(None)
            # Its own database threads (other tests' endpoints start theirs at any time).
            threads = list(endpoint._executor._threads)
            assert alive(threads)
            dropped.append(endpoint)
        assert alive(threads) == [] and endpoint._executor is None
    assert all(endpoint._lifespan_task is None for endpoint in dropped)
    response = Client().post("/mcp", json.dumps(LEGACY_INIT), content_type="application/json", **HEADERS)
    assert response.status_code == 200, response.content


def test_different_servers_under_one_name_fail_the_system_check() -> None:
    """Two unnamed ``MCPServer()`` are both "mcp-server": sessions, questions and request states
    are kept by server name, so each would take the other's. One server at two URLs is fine."""
    with override_settings(MCP={}, ROOT_URLCONF="tests.django.clashing_site"):
        errors = [m.msg for m in run_checks(tags=["mcp"]) if m.id == "mcp_django.E007"]
    assert len(errors) == 1, errors
    assert "/first and /second are different servers with the same name 'mcp-server'" in errors[0]
    assert "mcp_django.E007" not in check_ids()


def test_a_server_name_no_row_can_keep_fails_the_system_check() -> None:
    """Sessions, questions and request states keep their server's name: one longer than their
    column, or with a NUL, failed every session and question on PostgreSQL (HTTP 500)."""
    with override_settings(MCP={}, ROOT_URLCONF="tests.django.odd_name_site"):
        errors = [m.msg for m in run_checks(tags=["mcp"]) if m.id == "mcp_django.E007"]
    assert len(errors) == 2, errors
    assert "/long" in errors[0] and "201 characters long, longer than 200" in errors[0]
    assert "/nul" in errors[1] and "NUL" in errors[1]


@pytest.mark.django_db
def test_the_models_have_every_migration_they_need() -> None:
    """A model change shipped without its migration breaks every install at ``migrate`` (or
    worse, at the first query): ``makemigrations --check`` must find nothing to write, on each
    Django version the suite runs."""
    import io

    from django.core.management import call_command

    out = io.StringIO()
    try:
        call_command("makemigrations", "mcp_django", check=True, dry_run=True, stdout=out, stderr=out)
    except SystemExit:
        pytest.fail(f"mcp_django's models differ from its migrations:\n{out.getvalue()}")
    assert "No changes detected" in out.getvalue()


@pytest.mark.django_db(transaction=True)
def test_an_endpoint_mounted_with_a_trailing_slash_is_served_without_it() -> None:
    """``path("mcp/", include("mcp_django.urls"))``, Django's usual spelling, and a client
    pointed at ``/mcp``: APPEND_SLASH answered the POST with a redirect no MCP client follows
    (under DEBUG, an HTML 500 page). It is served as ``/mcp/`` would be, and only while
    APPEND_SLASH is on; other URLs keep Django's behaviour."""
    body = json.dumps(LEGACY_INIT)
    with override_settings(ROOT_URLCONF="tests.django.slash_site"):
        for url in ("/mcp", "/mcp/"):
            response = Client().post(url, body, content_type="application/json", **HEADERS)
            assert response.status_code == 200, (url, response.status_code, response.content[:200])
            assert json.loads(response.content)["result"]["serverInfo"]["name"], url
        # A URL the application routes itself stays its own.
        own = Client().post("/shop", body, content_type="application/json", **HEADERS)
        assert own.content == b"the shop's own page"
        assert Client().post("/nowhere", body, content_type="application/json", **HEADERS).status_code == 404
        with override_settings(APPEND_SLASH=False):
            assert Client().post("/mcp", body, content_type="application/json", **HEADERS).status_code == 404


def _gunicorn_chunked(path: str, body: bytes, content_type: str) -> Any:
    """A request as gunicorn passes a chunked body on: de-chunked, ending at its end, no length."""
    from django.core.handlers.wsgi import WSGIRequest

    return WSGIRequest(
        {
            "REQUEST_METHOD": "POST",
            "PATH_INFO": path,
            "SERVER_NAME": "testserver",
            "SERVER_PORT": "80",
            "HTTP_HOST": "testserver",
            "HTTP_TRANSFER_ENCODING": "chunked",
            "CONTENT_TYPE": content_type,
            "wsgi.input": io.BytesIO(body),
            "wsgi.input_terminated": True,
            "wsgi.url_scheme": "http",
        }
    )


def test_a_chunked_body_gunicorn_de_chunked_reaches_every_view() -> None:
    """Django's WSGI request reads a body with no Content-Length as empty: behind a proxy that
    streams request bodies, a form (or a file upload) posted to a view of the project's came
    empty. ``MCPMiddleware`` gives it its length; one over ``DATA_UPLOAD_MAX_MEMORY_SIZE`` fails
    as a declared one does; the MCP endpoint's own body is left for it to read."""
    from django.core.exceptions import RequestDataTooBig
    from django.core.files.uploadedfile import SimpleUploadedFile
    from django.test.client import BOUNDARY, MULTIPART_CONTENT, encode_multipart

    from mcp_django.middleware import MCPMiddleware

    seen: list[Any] = []
    middleware = MCPMiddleware(lambda request: seen.append(request) or HttpResponse("ok"))

    middleware(_gunicorn_chunked("/orders", b"number=1001&note=caf%C3%A9", "application/x-www-form-urlencoded"))
    assert seen[-1].POST.dict() == {"number": "1001", "note": "café"}

    upload = encode_multipart(BOUNDARY, {"receipt": SimpleUploadedFile("r.txt", b"paid"), "number": "1001"})
    middleware(_gunicorn_chunked("/orders", upload, MULTIPART_CONTENT))
    assert seen[-1].POST["number"] == "1001" and seen[-1].FILES["receipt"].read() == b"paid"

    with override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=10):
        middleware(_gunicorn_chunked("/orders", b'{"elicitation_id": "deposit-17"}', "application/json"))
        with pytest.raises(RequestDataTooBig):
            seen[-1].body  # noqa: B018

    with override_settings(ROOT_URLCONF="tests.django.slash_site"):
        endpoint = _gunicorn_chunked("/mcp/", b"{}", "application/json")
        middleware(endpoint)
    assert "CONTENT_LENGTH" not in endpoint.META and endpoint.META["wsgi.input"].tell() == 0
