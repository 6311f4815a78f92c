"""The worker heartbeat against Django's in-memory test database on SQLite.

That database shares one cache between the threads' connections, and there a write does not
wait for another one: it fails at once with "database table is locked". A heartbeat that wrote
on a timer made the application's own writes fail at random in its test suite (seen in CI: a
session save during ``aforce_login``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
from typing import Any
from unittest.mock import patch

import pytest
from django.contrib.auth.models import User
from django.db import connection, transaction

from example_project.servers.demo import mcp as demo_server
from mcp_common.endpoint import MCPEndpoint
from mcp_common.loop import LoopRunner
from mcp_django.conf import mcp_settings
from mcp_django.models import MCPElicitation, MCPWorker
from mcp_django.store import DjangoStore

pytestmark = pytest.mark.django_db(transaction=True)


def overdue_question(row_id: str) -> MCPElicitation:
    past = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
    return MCPElicitation.objects.create(
        id=row_id, server_name="Demo", request_key="k", mode="form", message="Size?",
        created=past, updated=past, expires=past,
    )  # fmt: skip


def test_a_fast_heartbeat_never_fails_the_applications_writes_and_still_expires_questions() -> None:
    assert connection.vendor == "sqlite" and connection.is_in_memory_db()
    runner = LoopRunner()
    config = dataclasses.replace(mcp_settings.config, heartbeat_interval=0.0005)
    endpoint = MCPEndpoint(demo_server, config, DjangoStore(), runner=runner)
    endpoint._process_check()
    try:
        runner.run(endpoint._ensure_started())
        # The application writes in transactions, as Django's session and auth code does,
        # for a second in which the heartbeat runs about a thousand times.
        deadline, written = time.monotonic() + 1.0, 0
        while time.monotonic() < deadline:
            with transaction.atomic():
                User.objects.create_user(f"user{written}")
            written += 1
        assert User.objects.count() == written > 50
        # No other process can read this database: the worker's beat is not written at all.
        assert not MCPWorker.objects.exists()
        # The heartbeat still does its work: an overdue question is expired within moments.
        overdue_question("q1")
        deadline = time.monotonic() + 5.0
        while MCPElicitation.objects.get(id="q1").status == "pending" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert MCPElicitation.objects.get(id="q1").status == "expired"
    finally:
        endpoint.close()
        runner.stop()


def test_expiry_moves_only_overdue_pending_rows() -> None:
    # The rows expire in 5 and 15 minutes, and the store is asked for "in 10 minutes": a
    # running endpoint's heartbeat, which expires rows by the clock, leaves them alone.
    store = DjangoStore()
    soon, later = (dt.datetime.now(dt.UTC) + dt.timedelta(minutes=m) for m in (5, 15))
    in_ten_minutes = time.time() + 600
    assert store.expire_elicitations(in_ten_minutes) == 0
    for row_id, expires in (("soon", soon), ("later", later)):
        MCPElicitation.objects.create(
            id=row_id, server_name="Demo", request_key=row_id, mode="form", message="Colour?",
            created=soon, updated=soon, expires=expires,
        )  # fmt: skip
    assert store.expire_elicitations(in_ten_minutes) == 1
    assert dict(MCPElicitation.objects.values_list("id", "status")) == {"soon": "expired", "later": "pending"}
    assert store.expire_elicitations(in_ten_minutes) == 0


def test_only_an_in_memory_database_is_private_to_the_process(settings: Any) -> None:
    assert DjangoStore().process_private() is True
    # Any database another worker can reach gets the beat (the same connection settings, read
    # by vendor and name: nothing is opened).
    with patch.object(connection, "is_in_memory_db", return_value=False):
        assert DjangoStore().process_private() is False
