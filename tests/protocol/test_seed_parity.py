"""The seed documents' examples through the official client, side by side: what the SDK's own
server (``streamable_http_app()`` on uvicorn, ``tests/protocol/sdk_reference.py``) answers and what
the Django and Flask example apps answer must be the same, literally: every result, every error
(code, message, data), every question a callback was asked, every log line it received.

Each scenario also checks the seed's own words on its transcript, so a change of the SDK shows as
a failure of the reference itself, not as a silent new expectation.

One difference is left out on purpose: the id of a server-to-client request
(``ClientRequestContext.request_id``). The SDK numbers them per session in memory; the project
gives them ids unique across workers, since the answer may reach another process.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.client import ClientRequestContext
from mcp.shared.exceptions import MCPError
from mcp.types import ElicitRequestParams, ElicitResult, ErrorData

from tests.conftest import ROOT, LiveServer, free_port
from tests.protocol.clients import MODES, roots, sampling

TARGETS = [("django", "gunicorn"), ("django", "uvicorn"), ("flask", "gunicorn")]
LEGACY = "legacy"
# The client's default, "auto", finds the 2026-07-28 wire through server/discover.
CLIENT_MODES = [*MODES, "auto"]

Transcript = dict[str, Any]


# -- the client side ----------------------------------------------------------------------------


def _dump(value: Any) -> Any:
    return value.model_dump(mode="json", by_alias=True, exclude_none=True)


def _error(exc: BaseException) -> Any:
    # The client raises a JSON-RPC error from inside its task groups.
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    if isinstance(exc, MCPError):
        return {"code": exc.error.code, "message": exc.error.message, "data": exc.error.data}
    raise exc


class Answers:
    """An elicitation callback answering from a script (``ErrorData`` refuses the request),
    recording each question and the request context's ``meta``."""

    def __init__(self, *answers: ElicitResult | ErrorData) -> None:
        self.answers = list(answers)
        self.asked: list[Any] = []

    async def __call__(self, context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult | ErrorData:
        self.asked.append({"params": _dump(params), "meta": context.meta and _dump(context.meta)})
        return self.answers.pop(0) if self.answers else ElicitResult(action="cancel")


async def call(
    url: str, mode: str, tool: str, arguments: dict[str, Any], answers: Answers | None = None, **client: Any
) -> Transcript:
    """One ``tools/call`` by a fresh official client: its result or error, the questions its
    callback was asked, the log messages it received."""
    logs: list[Any] = []

    async def log(params: Any) -> None:
        logs.append(_dump(params))

    transcript: Transcript = {}
    callbacks: dict[str, Any] = {"logging_callback": log, **client}
    if answers is not None:
        callbacks["elicitation_callback"] = answers
    try:
        async with Client(url, mode=mode, **callbacks) as session:
            transcript["result"] = _dump(await session.call_tool(tool, arguments))
    except BaseException as exc:  # _error re-raises anything but a JSON-RPC error
        transcript["error"] = _error(exc)
    transcript["asked"] = answers.asked if answers is not None else []
    transcript["logs"] = logs
    return transcript


def text(transcript: Transcript) -> str:
    (content,) = transcript["result"]["content"]
    return str(content["text"])


# -- the seeds' scenarios ---------------------------------------------------------------------

SEED_SCHEMA = {
    "properties": {
        "accept_alternative": {"description": "Try another date?", "title": "Accept Alternative", "type": "boolean"},
        "date": {
            "default": "2025-12-26",
            "description": "Alternative date (YYYY-MM-DD)",
            "title": "Date",
            "type": "string",
        },
    },
    "required": ["accept_alternative"],
    "title": "AlternativeDate",
    "type": "object",
}
CHRISTMAS = {"date": "2025-12-25", "party_size": 2}
NO_BACK_CHANNEL = "Cannot send 'elicitation/create': this transport context has no back-channel"


async def book_table(base: str, mode: str) -> list[Transcript]:
    """``ctx.elicit`` (form): the seed's schema reaches the client; the accepted date goes
    through ``book_table`` again, so a date just as full is asked again; a decline books
    nothing; an answer outside the schema is refused. None of it exists on the 2026 wire."""
    url = base + "/bistro"
    accept = ElicitResult(action="accept", content={"accept_alternative": True, "date": "2025-12-27"})
    full_again = ElicitResult(action="accept", content={"accept_alternative": True, "date": "2025-12-25"})
    runs = [
        await call(url, mode, "book_table", CHRISTMAS, Answers(accept)),
        await call(url, mode, "book_table", CHRISTMAS, Answers(full_again, accept)),
        await call(url, mode, "book_table", CHRISTMAS, Answers(ElicitResult(action="decline"))),
        await call(url, mode, "book_table", CHRISTMAS, Answers(ElicitResult(action="accept", content={"date": "x"}))),
    ]
    if mode == LEGACY:
        first, again, declined, invalid = runs
        assert text(first) == "Booked a table for 2 on 2025-12-27."
        (asked,) = first["asked"]
        assert asked["params"] == {
            "message": "No tables for 2 on 2025-12-25. Would you like to try another date?",
            "mode": "form",
            "requestedSchema": SEED_SCHEMA,
        }
        assert text(again) == "Booked a table for 2 on 2025-12-27." and len(again["asked"]) == 2
        assert text(declined) == "No booking made."
        assert invalid["result"]["isError"] is True
    else:
        assert all(NO_BACK_CHANNEL in run["error"]["message"] and not run["asked"] for run in runs)
    return runs


async def pay_deposit(base: str, mode: str) -> list[Transcript]:
    """``ctx.elicit_url``: the callback gets the URL and the server's ``elicitation_id``;
    ``accept`` only means the user agreed to go there; ``send_elicit_complete`` in another
    tool lets that tool answer as usual."""
    url = base + "/bistro"
    runs = [
        await call(url, mode, "pay_deposit", {"booking_id": "17"}, Answers(ElicitResult(action="accept"))),
        await call(url, mode, "pay_deposit", {"booking_id": "18"}, Answers(ElicitResult(action="decline"))),
        await call(url, mode, "confirm_deposit", {"booking_id": "17"}),
    ]
    accepted, declined, confirmed = runs
    if mode == LEGACY:
        assert text(accepted) == "Complete the payment in your browser."
        assert accepted["asked"][0]["params"] == {
            "elicitationId": "deposit-17",
            "message": "A 20 EUR deposit confirms your booking.",
            "mode": "url",
            "url": "https://pay.example.com/deposit/17",
        }
        assert text(declined) == "No deposit taken. The booking expires in one hour."
    else:
        assert NO_BACK_CHANNEL in accepted["error"]["message"]
    assert text(confirmed) == "Deposit received for booking 17."
    return runs


async def issue_card(base: str, mode: str) -> list[Transcript]:
    """The client-callbacks page: the callback's answer finishes the call; ``ErrorData``
    refuses the request and fails the whole call; without a callback the SDK refuses for the
    client ("Elicitation not supported")."""
    url = base + "/library"
    ada = ElicitResult(action="accept", content={"name": "Ada Lovelace"})
    runs = [
        await call(url, mode, "issue_card", {}, Answers(ada)),
        await call(url, mode, "issue_card", {}, Answers(ErrorData(code=-1, message="The user closed the form."))),
        await call(url, mode, "issue_card", {}),
    ]
    answered, refused, unable = runs
    if mode == LEGACY:
        assert text(answered) == "Card issued to Ada Lovelace."
        assert answered["asked"][0]["params"]["requestedSchema"] == {
            "properties": {"name": {"title": "Name", "type": "string"}},
            "required": ["name"],
            "title": "CardHolder",
            "type": "object",
        }
        assert refused["error"] == {"code": -1, "message": "The user closed the form.", "data": None}
        assert unable["error"]["message"] == "Elicitation not supported"
    else:
        assert all(NO_BACK_CHANNEL in run["error"]["message"] for run in runs)
    return runs


async def delete_folder(base: str, mode: str) -> list[Transcript]:
    """The resolver, on both eras: no question for an empty folder; each answer reaches its
    branch; a refusing callback fails the call; a client without the capability is refused
    before anything runs; ``confirm`` is not in the input schema."""
    url = base + "/files"
    project = {"path": "/tmp/project"}
    runs = [await call(url, mode, "delete_folder", {"path": "/tmp/nothing-here"}, Answers())]
    for answer in [
        ElicitResult(action="accept", content={"ok": False}),
        ElicitResult(action="decline"),
        ElicitResult(action="cancel"),
        ElicitResult(action="accept", content={"ok": "maybe"}),
        ErrorData(code=-1, message="The user closed the form."),
    ]:
        runs.append(await call(url, mode, "delete_folder", project, Answers(answer)))
    runs.append(await call(url, mode, "delete_folder", project))
    empty, kept, declined, cancelled, invalid, refused, unable = runs
    assert text(empty) == "deleted /tmp/nothing-here" and empty["asked"] == []
    assert [text(kept), text(declined), text(cancelled)] == [
        "kept the folder",
        "declined: folder not deleted",
        "cancelled: folder not deleted",
    ]
    assert kept["asked"][0]["params"]["message"] == "/tmp/project has 2 file(s). Delete anyway?"
    assert invalid["result"]["isError"] is True
    assert refused["error"] == {"code": -1, "message": "The user closed the form.", "data": None}
    assert unable["error"]["data"] == {"requiredCapabilities": {"elicitation": {"form": {}}}}
    async with Client(url, mode=mode) as session:
        tools = {tool.name: _dump(tool) for tool in (await session.list_tools()).tools}
    assert tools["delete_folder"]["inputSchema"]["required"] == ["path"]
    assert set(tools["delete_folder"]["inputSchema"]["properties"]) == {"path"}
    return [*runs, tools]


async def delete_folder_or_fail(base: str, mode: str) -> list[Transcript]:
    """The unwrapped model: accepting hands the tool the model; a decline or a cancel ends the
    call with an error."""
    url = base + "/files"
    project = {"path": "/tmp/project"}
    runs = [
        await call(url, mode, "delete_folder_or_fail", project, Answers(answer))
        for answer in [
            ElicitResult(action="accept", content={"ok": False}),
            ElicitResult(action="decline"),
            ElicitResult(action="cancel"),
        ]
    ]
    kept, declined, cancelled = runs
    assert text(kept) == "kept the folder"
    assert declined["result"]["isError"] is True and "elicitation was decline" in text(declined)
    assert cancelled["result"]["isError"] is True and "elicitation was cancel" in text(cancelled)
    return runs


async def client_features(base: str, mode: str) -> list[Transcript]:
    """``check_client_capability`` reads what the callbacks declared."""
    url = base + "/library"
    runs = [
        await call(url, mode, "client_features", {}, Answers()),
        await call(url, mode, "client_features", {}, Answers(), sampling_callback=sampling, list_roots_callback=roots),
        await call(url, mode, "client_features", {}),
    ]
    assert [run["result"]["structuredContent"] for run in runs] == [
        {"result": ["elicitation"]},
        {"result": ["elicitation", "sampling", "roots"]},
        {"result": []},
    ]
    return runs


async def sampling_and_roots(base: str, mode: str) -> list[Transcript]:
    """The deprecated callbacks: a legacy tool's ``create_message`` reaches ``sampling_callback``;
    on the 2026 wire an input-required result carrying a sampling or roots request reaches the
    same callbacks through the client's loop. Without the callback the client refuses."""
    url = base + "/conformance"
    runs = [
        await call(url, mode, "test_sampling", {"prompt": "6 x 7?"}, sampling_callback=sampling),
        await call(url, mode, "test_sampling", {"prompt": "6 x 7?"}),
        await call(url, mode, "test_input_required_result_sampling", {}, sampling_callback=sampling),
        await call(url, mode, "test_input_required_result_sampling", {}),
        await call(url, mode, "test_input_required_result_list_roots", {}, list_roots_callback=roots),
        await call(url, mode, "test_input_required_result_list_roots", {}),
        await call(url, mode, "test_missing_capability", {}, sampling_callback=sampling),
        await call(url, mode, "test_missing_capability", {}),
    ]
    if mode == LEGACY:
        assert text(runs[0]) == "LLM response: The answer is 42."
        assert text(runs[1]) == "Sampling not supported or error: Sampling not supported"
    else:
        assert text(runs[2]) == "Model said: The answer is 42."
        assert runs[3]["error"]["message"] == "Sampling not supported"
        assert text(runs[4]) == "Client exposed 1 root(s)."
        assert runs[5]["error"]["message"] == "List roots not supported"
    assert runs[7]["error"]["data"] == {"requiredCapabilities": {"sampling": {}}}
    return runs


async def logging(base: str, mode: str) -> list[Transcript]:
    """``logging_callback``: on a legacy connection it gets the tool's log lines; on the 2026
    wire only with ``log_level`` (the opt-in), from that level up."""
    url = base + "/conformance"
    runs = [
        await call(url, mode, "test_tool_with_logging", {}),
        await call(url, mode, "test_tool_with_logging", {}, log_level="info"),
        await call(url, mode, "test_tool_with_logging", {}, log_level="warning"),
    ]
    lines = [
        {"level": "info", "data": "Tool execution started"},
        {"level": "info", "data": "Tool processing data"},
        {"level": "info", "data": "Tool execution completed"},
    ]
    if mode == LEGACY:
        assert [run["logs"] for run in runs] == [lines, lines, lines]
    else:
        assert [run["logs"] for run in runs] == [[], lines, []]
    return runs


SCENARIOS: dict[str, Callable[[str, str], Awaitable[list[Transcript]]]] = {
    scenario.__name__: scenario
    for scenario in [
        book_table,
        pay_deposit,
        issue_card,
        delete_folder,
        delete_folder_or_fail,
        client_features,
        sampling_and_roots,
        logging,
    ]
}


# -- the servers ------------------------------------------------------------------------------


class Reference:
    """The SDK's own server, and the transcripts it gave (each scenario runs once per era)."""

    def __init__(self, base_url: str) -> None:
        self.base = base_url + "/mcp"
        self.transcripts: dict[tuple[str, str], list[Transcript]] = {}

    def transcript(self, scenario: str, mode: str) -> list[Transcript]:
        key = (scenario, mode)
        if key not in self.transcripts:
            self.transcripts[key] = asyncio.run(SCENARIOS[scenario](self.base, mode))
        return self.transcripts[key]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reference]:
    port = free_port()
    log_path = tmp_path_factory.mktemp("sdk-reference") / "uvicorn.log"
    command = [sys.executable, "-m", "tests.protocol.sdk_reference", str(port)]
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, cwd=ROOT, env=os.environ.copy(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the SDK's reference server did not start:\n{log_path.read_text()}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        yield Reference(f"http://127.0.0.1:{port}")
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)


@pytest.mark.slow
@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("mode", CLIENT_MODES)
@pytest.mark.parametrize("target", TARGETS, ids=lambda t: f"{t[0]}-{t[1]}")
def test_the_seed_answers_as_the_sdks_own_server(
    example_server: Callable[..., LiveServer], reference: Reference, target: tuple[str, str], mode: str, scenario: str
) -> None:
    expected = reference.transcript(scenario, mode)
    served = example_server(target[0], target[1], 2, "sqlite")
    assert asyncio.run(SCENARIOS[scenario](served.url(), mode)) == expected
