"""What every Django test shares."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connections
from django.test.testcases import LiveServerThread, _StaticFilesHandler


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None) -> Iterator[None]:
    """pytest-django's test databases, and, before it drops them, every MCP endpoint the tests
    used shut down. An endpoint's heartbeat keeps a database thread's connection open for a
    second after each beat (its lifespan outlives the test that started it), and PostgreSQL
    will not drop a database while a connection is open to it."""
    yield
    from mcp_django.registry import reset_endpoints

    reset_endpoints()


@pytest.fixture
def serve(settings: Any) -> Iterator[Callable[[], str]]:
    """``serve()``: the site as ``settings`` now say, on a live server of its own (its
    middleware is loaded when it starts); the URL of its MCP endpoint."""
    threads: list[LiveServerThread] = []

    def start() -> str:
        shared = {c.alias: c for c in connections.all() if c.vendor == "sqlite" and c.is_in_memory_db()}
        for connection in shared.values():
            connection.inc_thread_sharing()
        thread = LiveServerThread("127.0.0.1", _StaticFilesHandler, connections_override=shared, port=0)
        thread.daemon = True
        thread.start()
        threads.append(thread)
        thread.is_ready.wait()
        if thread.error:
            raise thread.error
        return f"http://127.0.0.1:{thread.port}/mcp"

    yield start
    for thread in threads:
        thread.terminate()
        for connection in thread.connections_override.values():
            connection.dec_thread_sharing()
