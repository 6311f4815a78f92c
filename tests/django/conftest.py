"""What every Django test shares."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None) -> Iterator[None]:
    """pytest-django's test databases, and, before it drops them, every MCP endpoint the tests
    used shut down. An endpoint's heartbeat keeps a database thread's connection open for a
    second after each beat (its lifespan outlives the test that started it), and PostgreSQL
    will not drop a database while a connection is open to it."""
    yield
    from mcp_django.registry import reset_endpoints

    reset_endpoints()
