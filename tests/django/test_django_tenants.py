"""A django-tenants project (schema per tenant, PostgreSQL) serving MCP to each tenant under
gunicorn, driven by the official ``mcp.Client`` over 127.0.0.1 with each tenant's Host header
(``tests/django/tenants_site``). ``mcp_django`` in SHARED_APPS: one set of MCP tables, in the
public schema, every tenant's conversations kept apart in them. In TENANT_APPS it cannot work
(the endpoint's own database threads query the public schema): the system check says so."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp.types import ElicitRequestParams, ElicitRequestURLParams, ElicitResult, TextContent

from tests.conftest import POSTGRES_ADMIN_URL, ROOT, Database, LiveServer, free_port, postgres_available, stop
from tests.protocol.clients import MODES

pytest.importorskip("django_tenants")

SETTINGS = "tests.django.tenants_site.settings"
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}


def _env(database_url: str, place: str = "shared") -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DJANGO_SETTINGS_MODULE": SETTINGS}
    env.update(MCP_TENANTS_DATABASE_URL=database_url, MCP_TENANTS_PLACE=place)
    return env


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """The project on a database of its own, tenants ``a`` and ``b`` made, under gunicorn."""
    import psycopg

    if not postgres_available():
        pytest.fail(f"PostgreSQL is not reachable at {POSTGRES_ADMIN_URL}: the test command starts it")
    name = f"tenants_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = f"{POSTGRES_ADMIN_URL.rsplit('/', 1)[0]}/{name}"
    live = None
    try:
        env = _env(url)
        prepare = [sys.executable, "-m", "tests.django.tenants_site.prepare"]
        subprocess.run(prepare, cwd=ROOT, env=env, check=True, capture_output=True, timeout=120)
        port = free_port()
        log_path = tmp_path_factory.mktemp("tenants") / "gunicorn.log"
        command = [sys.executable, "-m", "gunicorn", "tests.django.tenants_site.wsgi", "-b", f"127.0.0.1:{port}"]
        command += ["-k", "gthread", "--threads", "8", "-w", "1"]
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        base = f"http://127.0.0.1:{port}"
        live = LiveServer(base, "django", "gunicorn", 1, Database("postgres", url), process, log_path)
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None and time.monotonic() < deadline, live.log()
            try:
                if httpx.get(f"{live.base_url}/admin/login/", headers={"Host": "a.localhost"}).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        yield live
    finally:
        if live is not None:
            stop(live)
        with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def _answer(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
    # Slower than WAIT_DETACH_SECONDS: the call's wait and its work after it run on the
    # endpoint's database threads, not on the request's.
    await asyncio.sleep(0.5)
    if isinstance(params, ElicitRequestURLParams):
        return ElicitResult(action="accept")
    return ElicitResult(action="accept", content={"accept_alternative": True, "date": "2025-12-27"})


async def _calls(live: LiveServer, host: str, mode: str, *calls: tuple[str, dict[str, Any]]) -> list[str]:
    http = httpx2.AsyncClient(headers={"Host": host}, timeout=httpx2.Timeout(30, read=60))
    texts = []
    transport = streamable_http_client(live.url(), http_client=http)
    async with http, Client(transport, mode=mode, elicitation_callback=_answer) as client:
        for name, arguments in calls:
            result = await client.call_tool(name, arguments)
            assert not result.is_error, result
            (content,) = result.content
            assert isinstance(content, TextContent)
            texts.append(content.text)
    return texts


def _complete(live: LiveServer, host: str, elicitation_id: str) -> int:
    """The tenant's payment webhook: ``complete_elicitation`` on that tenant's host."""
    response = httpx.post(f"{live.base_url}/webhook", json={"elicitation_id": elicitation_id}, headers={"Host": host})
    assert response.status_code == 200, live.log()
    return int(response.json()["completed"])


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_each_tenant_is_served_on_both_eras_and_its_webhook_completes_its_own_question(
    site: LiveServer, mode: str
) -> None:
    """Each tenant's client is served, its questions answered through the endpoint's database
    threads (the public schema, where the tables are); the tenant's webhook completes the
    question its own client was asked, which the client's next call observes."""
    booking = uuid.uuid4().hex[:8]
    for host in ("a.localhost", "b.localhost"):
        (held,) = asyncio.run(_calls(site, host, mode, ("hold_table", {"booking_id": booking})))
        assert held.startswith(f"Holding booking {booking}; complete the payment at "), held
        (reference,) = re.findall(r"ref=([^ ]+?)\.?$", held)
        if host == "a.localhost":
            assert _complete(site, host, reference) == 1
            expected = f"Deposit received: table held for booking {booking}."
        else:
            expected = held
        calls = [("hold_table", {"booking_id": booking})]
        if mode == "legacy":
            calls.append(("book_table", {"date": "2025-12-25", "party_size": 2}))
        texts = asyncio.run(_calls(site, host, mode, *calls))
        assert texts[0] == expected
        if mode == "legacy":
            assert texts[1] == "Booked a table for 2 on 2025-12-27."
    assert "Traceback" not in site.log()


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.parametrize("signed_in", [False, True], ids=["anonymous", "signed-in"])
def test_a_tenants_legacy_session_is_not_found_from_another_tenants_host(site: LiveServer, signed_in: bool) -> None:
    """The MCP tables are shared by every tenant: a session id that tenant ``a``'s client was
    given, sent to tenant ``b``'s host, is a session ``b`` never had, whether its callers are
    anonymous (one principal per tenant, not everyone's) or signed in (``b``'s staff user has
    the same primary key as ``a``'s: users live in each tenant's schema)."""
    hosts = ("a.localhost", "b.localhost")
    if signed_in:
        clients = {host: _admin(site, host) for host in hosts}
    else:
        clients = {host: httpx.Client(base_url=site.base_url, headers={"Host": host}) for host in hosts}
    try:
        session = clients["a.localhost"].post("/mcp", json=INITIALIZE, headers=HEADERS).headers["mcp-session-id"]
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        headers = {**HEADERS, "Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-06-18"}
        for host, status in (("b.localhost", 404), ("a.localhost", 200)):
            assert clients[host].post("/mcp", json=listing, headers=headers).status_code == status, host
    finally:
        for client in clients.values():
            client.close()


@pytest.mark.postgres
@pytest.mark.slow
def test_a_webhook_completes_only_the_question_its_tenant_asked(site: LiveServer) -> None:
    """Two tenants' tools ask under the same id (``deposit-<booking>``): tenant ``a``'s payment
    webhook completes ``a``'s question, not ``b``'s."""
    booking = uuid.uuid4().hex[:8]
    for host in ("a.localhost", "b.localhost"):
        asyncio.run(_calls(site, host, "legacy", ("pay_deposit", {"booking_id": booking})))
    assert _complete(site, "a.localhost", f"deposit-{booking}") == 1
    assert _complete(site, "b.localhost", f"deposit-{booking}") == 1
    assert _complete(site, "a.localhost", f"deposit-{booking}") == 0


IN_A_TASK = """
import json, sys
import django
django.setup()
from django.core.management import call_command
from django_tenants.utils import schema_context
from mcp_django import complete_elicitation
from mcp_django.tasks import complete_elicitation_task
with schema_context("b"):
    in_b = complete_elicitation_task(sys.argv[1])
in_public = complete_elicitation(sys.argv[1])
call_command("mcp_purge")
print(json.dumps([in_b, in_public]))
"""


@pytest.mark.postgres
@pytest.mark.slow
def test_a_task_completes_the_question_of_the_tenant_it_sets_and_mcp_purge_runs(site: LiveServer) -> None:
    """A Celery task in tenant ``b``'s ``schema_context`` completes ``b``'s question only; one
    left in the public schema, the id's questions of every tenant (here ``a``'s, left open).
    ``mcp_purge`` works on the public schema's tables, for every tenant."""
    booking = uuid.uuid4().hex[:8]
    for host in ("a.localhost", "b.localhost"):
        asyncio.run(_calls(site, host, "legacy", ("pay_deposit", {"booking_id": booking})))
    task = subprocess.run(
        [sys.executable, "-c", IN_A_TASK, f"deposit-{booking}"],
        cwd=ROOT,
        env=_env(site.database.url),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert task.returncode == 0, task.stderr
    assert task.stdout.strip().splitlines()[-1] == "[1, 1]"
    assert _complete(site, "a.localhost", f"deposit-{booking}") == 0


def _admin(site: LiveServer, host: str) -> httpx.Client:
    """Tenant ``host``'s staff, signed in to its admin."""
    client = httpx.Client(base_url=site.base_url, headers={"Host": host}, follow_redirects=False)
    login = client.get("/admin/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login.text)
    assert token is not None, login.text
    form = {"csrfmiddlewaretoken": token[1], "username": f"staff-{host[0]}", "password": "pw", "next": "/admin/"}
    assert client.post("/admin/login/", data=form).status_code == 302
    return client


@pytest.mark.postgres
@pytest.mark.slow
def test_each_tenants_admin_lists_and_completes_only_its_own_questions(site: LiveServer) -> None:
    """A tenant's staff review their tenant's questions: not another tenant's (whose user with
    the same primary key would be named as the asker), and the action completes theirs."""
    booking = uuid.uuid4().hex[:8]
    asyncio.run(_calls(site, "a.localhost", "legacy", ("pay_deposit", {"booking_id": f"a{booking}"})))
    asyncio.run(_calls(site, "b.localhost", "legacy", ("pay_deposit", {"booking_id": f"b{booking}"})))
    admin = _admin(site, "a.localhost")
    try:
        listing = admin.get("/admin/mcp_django/mcpelicitation/", params={"q": booking})
        assert listing.status_code == 200
        assert f"deposit-a{booking}" in listing.text
        assert f"deposit-b{booking}" not in listing.text
        ids = re.findall(r'name="_selected_action" value="([^"]+)"', listing.text)
        assert len(ids) == 1
        form = {
            "csrfmiddlewaretoken": admin.cookies["csrftoken"],
            "action": "complete_selected",
            "_selected_action": ids,
            "index": "0",
        }
        assert admin.post("/admin/mcp_django/mcpelicitation/", data=form).status_code == 302
    finally:
        admin.close()
    assert _complete(site, "b.localhost", f"deposit-b{booking}") == 1
    assert _complete(site, "a.localhost", f"deposit-a{booking}") == 0


def test_mcp_django_in_tenant_apps_fails_the_system_check() -> None:
    """In TENANT_APPS the tables are in each tenant's schema, where the endpoint's own database
    threads (the heartbeat, the legacy answers' poll, a waiting call's work) never look: every
    legacy wait fails, mid-call. ``check`` (and so runserver and migrate) refuses it, saying
    what to do instead."""
    command = [sys.executable, "-m", "django", "check"]
    url = "postgresql://postgres@127.0.0.1:5432/unused"
    check = subprocess.run(command, cwd=ROOT, env=_env(url, "tenant"), capture_output=True, text=True, timeout=60)
    assert check.returncode != 0
    assert "mcp_django.E009" in check.stderr, check.stderr
    assert 'List "mcp_django" in SHARED_APPS only' in check.stderr
    shared = subprocess.run(command, cwd=ROOT, env=_env(url), capture_output=True, text=True, timeout=60)
    assert shared.returncode == 0, shared.stderr


@pytest.mark.postgres
@pytest.mark.slow
def test_a_foreign_host_gets_a_json_rpc_error_with_mcp_middleware_before_the_tenants(site: LiveServer) -> None:
    """``MCPMiddleware`` before ``TenantMainMiddleware`` (the README's order): a Host outside
    ``ALLOWED_HOSTS`` is answered as MCP answers it, not with django-tenants' HTML page."""
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    response = httpx.post(site.url(), json=listing, headers={**HEADERS, "Host": "evil.example"})
    assert response.status_code == 421
    assert response.json()["error"]["message"] == "Invalid Host header"
    # An allowed host that names no tenant: django-tenants raises Http404 before any view runs;
    # the client gets it in JSON-RPC, not as Django's HTML page.
    nobody = httpx.post(site.url(), json=listing, headers={**HEADERS, "Host": "nobody.localhost"})
    assert (nobody.status_code, nobody.headers["Content-Type"]) == (404, "application/json")
    assert nobody.json()["error"] == {"code": -32600, "message": "Not Found"}
