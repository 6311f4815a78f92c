"""The development servers a project already runs: ``manage.py runserver`` and ``flask run``
(one threaded process each, as the example launcher's ``--server dev`` starts them), driven by
the official ``mcp.Client`` in both eras: tools, a form elicitation the client answers, and a
URL elicitation completed from outside by the payment webhook."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx2
import pytest
from mcp.types import ElicitResult

from tests.conftest import LiveServer
from tests.protocol.clients import MODES, Recorder, WorkerLog, spread_client
from tests.protocol.test_elicitation_live import Notifications, handle_elicitation
from tests.protocol.test_official_client import text


@pytest.fixture(params=["django", "flask"])
def dev_server(request: pytest.FixtureRequest, example_server: Callable[..., LiveServer]) -> LiveServer:
    return example_server(request.param, "dev", 1, "sqlite")


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_tools_and_elicitations_under_the_dev_server(dev_server: LiveServer, mode: str) -> None:
    async def run() -> None:
        quantity = Recorder(ElicitResult(action="accept", content={"quantity": 3}))
        async with spread_client(dev_server.url(), mode, WorkerLog(), elicitation_callback=quantity) as client:
            assert "add_to_cart" in {tool.name for tool in (await client.list_tools()).tools}
            assert text(await client.call_tool("greet", {"name": "Ada"})) == "Hello, Ada!"
            added = text(await client.call_tool("add_to_cart", {"product": "tea"}))
            assert added.startswith("Added 3 x tea"), added
        if mode != "legacy":
            return
        notes = Notifications()
        bistro = dev_server.url("/bistro")
        async with spread_client(
            bistro, mode, WorkerLog(), elicitation_callback=handle_elicitation, message_handler=notes
        ) as client:
            booked = await client.call_tool("book_table", {"date": "2025-12-25", "party_size": 2})
            assert text(booked) == "Booked a table for 2 on 2025-12-27."
            paid = await client.call_tool("pay_deposit", {"booking_id": "dev"})
            assert text(paid) == "Complete the payment in your browser."
            async with httpx2.AsyncClient() as http:
                done = await http.post(
                    dev_server.base_url + "/payments/webhook",
                    json={"elicitation_id": "deposit-dev"},
                    headers={"Authorization": "Bearer demo-webhook-token"},
                )
            assert done.json() == {"completed": 1}
            for _ in range(100):  # delivered on the session's GET stream, a short poll under WSGI
                if "deposit-dev" in notes.completed():
                    break
                await asyncio.sleep(0.1)
            assert notes.completed() == ["deposit-dev"]

    asyncio.run(run())
