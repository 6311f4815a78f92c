"""The Django store's event log on PostgreSQL (run by scripts/test.sh with
``MCP_EXAMPLE_DATABASE_URL`` set; on SQLite one writer at a time commits ids in order)."""

from __future__ import annotations

import pytest
from django.db import connection

from mcp_django.models import MCPEvent
from mcp_django.store import DjangoStore
from tests.store_checks import check_a_reader_misses_no_event_committed_late

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.postgres
def test_a_reader_misses_no_event_committed_late() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only: set MCP_EXAMPLE_DATABASE_URL (scripts/test.sh does)")
    import psycopg

    settings = connection.settings_dict
    with psycopg.connect(
        dbname=settings["NAME"], user=settings["USER"], host=settings["HOST"], port=settings["PORT"], autocommit=True
    ) as admin:
        check_a_reader_misses_no_event_committed_late(
            DjangoStore(), admin, connection.ops.quote_name(MCPEvent._meta.db_table), lambda: connection.close()
        )
