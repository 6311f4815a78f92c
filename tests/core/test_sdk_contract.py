"""The private SDK names mcp_common/_sdk.py relies on: fails loudly when the SDK moves them."""

from __future__ import annotations

import importlib.metadata
from typing import Any

import pytest
from mcp.server import MCPServer
from mcp.server.lowlevel.server import Server
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.shared.exceptions import MCPError

from mcp_common import _sdk


def test_sdk_version_is_the_supported_line() -> None:
    version = importlib.metadata.version("mcp")
    assert version.startswith("2.3."), f"mcp {version}: re-check mcp_common/_sdk.py, then widen the bound"


def test_mcpserver_keeps_its_lowlevel_server() -> None:
    server = MCPServer("contract")
    lowlevel = _sdk.lowlevel_server(server)
    assert isinstance(lowlevel, Server)
    assert lowlevel.name == "contract"
    assert _sdk.lowlevel_server(lowlevel) is lowlevel


def test_request_state_boundary_is_replaced_in_place() -> None:
    server = MCPServer("contract")
    chain = _sdk.lowlevel_server(server).middleware
    before = [type(m) for m in chain]
    assert RequestStateBoundary in before, "MCPServer no longer installs a RequestStateBoundary"
    security = RequestStateSecurity(keys=[b"k" * 32])
    _sdk.install_request_state_security(server, security)
    after = _sdk.lowlevel_server(server).middleware
    assert [type(m) for m in after] == before
    boundary = next(m for m in after if isinstance(m, RequestStateBoundary))
    assert boundary._security is security


def test_tool_registry_and_default_handler() -> None:
    server = MCPServer("contract")

    @server.tool()
    def ping(text: str) -> str:
        return text

    (tool,) = _sdk.registered_tools(server)
    assert tool.name == "ping" and tool.fn is ping and tool.context_kwarg is None
    assert _sdk.get_tool(server, "ping") is tool and _sdk.get_tool(server, "nope") is None
    assert _sdk.default_call_tool_handler(server)
    assert not _sdk.default_call_tool_handler(Server("lowlevel"))
    tool_error, unexpected, resource_error, unexpected_resource = _sdk.tool_error_types()
    assert issubclass(unexpected, tool_error) and issubclass(unexpected_resource, resource_error)


def test_a_tool_is_rebuilt_from_its_functions_new_signature_in_its_place() -> None:
    import inspect

    server = MCPServer("contract")

    @server.tool(title="Report", description="A report.")
    def report(pk: int, fmt: str = "html") -> str:
        return f"{pk} {fmt}"

    @server.tool()
    def after() -> str:
        return ""

    signature = inspect.signature(report)
    report.__signature__ = signature.replace(parameters=[signature.parameters["pk"]])  # type: ignore[attr-defined]
    _sdk.rebuild_tool(server, "report", report)
    tools = _sdk.registered_tools(server)
    assert [tool.name for tool in tools] == ["report", "after"]
    assert set(tools[0].parameters["properties"]) == {"pk"}
    assert (tools[0].title, tools[0].description, tools[0].fn) == ("Report", "A report.", report)


def test_request_identity_matches_the_boundary() -> None:
    target, digest = _sdk.request_identity("tools/call", {"name": "t", "arguments": {"b": 1, "a": 2}})
    same = _sdk.request_identity("tools/call", {"name": "t", "arguments": {"a": 2, "b": 1}})
    assert target == "t" and (target, digest) == same
    assert _sdk.request_identity("tools/call", {"name": "t", "arguments": {"a": 3}})[1] != digest
    assert _sdk.request_identity("resources/read", {"uri": "file:///x"})[0] == "file:///x"


def test_elicitation_schema_cache_renders_once_and_hands_out_copies() -> None:
    from mcp.server import elicitation
    from mcp.server.mcpserver import resolve
    from pydantic import BaseModel

    _sdk.install_elicitation_schema_cache()
    assert resolve.render_elicitation_schema is elicitation.render_elicitation_schema

    class Choice(BaseModel):
        ok: bool

    first = elicitation.render_elicitation_schema(Choice)
    first["properties"]["ok"]["title"] = "mutated by a caller"
    second = elicitation.render_elicitation_schema(Choice)
    assert second["properties"]["ok"] == {"title": "Ok", "type": "boolean"}

    class Nested(BaseModel):
        inner: Choice

    for _ in range(2):
        with pytest.raises(TypeError, match="not a valid PrimitiveSchemaDefinition"):
            elicitation.render_elicitation_schema(Nested)


def test_serve_one_without_teardown_and_lazy_telemetry() -> None:
    import asyncio
    import contextlib
    from contextlib import AsyncExitStack

    from mcp.server.connection import Connection

    assert hasattr(AsyncExitStack(), "_exit_callbacks")
    server = MCPServer("contract")
    chain = _sdk.lowlevel_server(server).middleware
    assert any(type(m).__name__ == "OpenTelemetryMiddleware" for m in chain)
    _sdk.install_lazy_telemetry(server)
    assert not any(type(m).__name__ == "OpenTelemetryMiddleware" for m in chain)
    assert any(isinstance(m, _sdk.LazyTelemetry) for m in chain)

    closed: list[bool] = []

    async def run() -> None:
        connection = Connection.from_envelope("2026-07-28", None, {})

        async def on_close() -> None:
            closed.append(True)

        connection.exit_stack.push_async_callback(on_close)

        class Dispatch:
            request_id = 1
            transport = None
            message_metadata = None
            can_send_request = False
            cancel_requested = asyncio.Event()

        with contextlib.suppress(Exception):  # whatever the request's fate, cleanup runs
            await _sdk.serve_one(
                _sdk.lowlevel_server(server), Dispatch(), "tools/list", None, connection=connection, lifespan_state=None
            )

    asyncio.run(run())
    assert closed == [True], "a connection with cleanup registered must still be closed"


def test_the_url_capability_gate_wraps_the_resolver_capability_check() -> None:
    """The SDK's resolver walk checks a marker's capability through
    ``resolve._require_capability(context, marker, key)``; the gate replaces it once."""
    import inspect

    from mcp.server.mcpserver import Elicit, resolve
    from pydantic import BaseModel

    from mcp_common.elicitation import ElicitUrl, is_url_question

    _sdk.install_url_capability_gate(is_url_question)
    gate = resolve._require_capability
    assert list(inspect.signature(gate).parameters) == ["context", "marker", "key"]
    _sdk.install_url_capability_gate(is_url_question)
    assert resolve._require_capability is gate

    class Ok(BaseModel):
        ok: bool

    class Context:
        def __init__(self, capabilities: dict[str, object]) -> None:
            from mcp_types import ClientCapabilities

            self.client_capabilities = ClientCapabilities.model_validate(capabilities)

    form_only, url_only = Context({"elicitation": {"form": {}}}), Context({"elicitation": {"url": {}}})
    question = ElicitUrl("Pay.", url="https://pay.example.com/1", elicitation_id="dep-1")
    gate(url_only, question, "pay")
    gate(form_only, Elicit("Ok?", Ok), "ok")
    with pytest.raises(MCPError) as url_refused:
        gate(form_only, question, "pay")
    assert url_refused.value.error.data == {"requiredCapabilities": {"elicitation": {"url": {}}}}
    with pytest.raises(MCPError) as form_refused:  # the SDK's own check, for every other marker
        gate(url_only, Elicit("Ok?", Ok), "ok")
    assert form_refused.value.error.data == {"requiredCapabilities": {"elicitation": {"form": {}}}}


def test_tool_visibility_wraps_the_tool_managers_lookups() -> None:
    """``MCPServer._tool_manager.get_tool`` / ``list_tools`` are what every SDK path asks."""
    server = MCPServer("Visibility")

    @server.tool()
    def shown() -> str:
        return "shown"

    @server.tool()
    def hidden() -> str:
        return "hidden"

    denied: list[frozenset[str] | None] = [None]
    _sdk.install_tool_visibility(server, lambda: denied[0])
    _sdk.install_tool_visibility(server, lambda: frozenset({"shown"}))  # once per server
    manager = server._tool_manager
    assert [t.name for t in manager.list_tools()] == ["shown", "hidden"]
    denied[0] = frozenset({"hidden"})
    assert [t.name for t in manager.list_tools()] == ["shown"]
    assert manager.get_tool("hidden") is None and manager.get_tool("shown") is not None
    assert [t.name for t in _sdk.all_tools(server)] == ["shown", "hidden"]


def _recording_endpoint(name: str) -> tuple[Any, list[str], Any]:
    """An endpoint whose ``tool_context()`` records the thread it is entered on; the list of
    those threads; and an ``async`` wrapper running a coroutine as one of its requests."""
    import contextlib
    import threading

    from mcp_common import HTTPRequest, MCPConfig, MCPEndpoint, MemoryStore, current_request

    entered: list[str] = []

    class Recording(MCPEndpoint):
        @contextlib.contextmanager
        def tool_context(self) -> Any:
            entered.append(threading.current_thread().name)
            yield

    point = Recording(MCPServer(name), MCPConfig(), MemoryStore())

    async def serving(coroutine: Any) -> Any:
        token = current_request.set(HTTPRequest("POST", {}, endpoint=point))
        try:
            return await coroutine
        finally:
            current_request.reset(token)

    return point, entered, serving


def test_tool_context_wraps_the_sdks_tool_call_on_the_tools_own_thread() -> None:
    """``FuncMetadata.call_fn`` is how the SDK runs a tool (a sync one on a worker thread): the
    serving endpoint's ``tool_context()`` is entered there, around the tool, for sync and async
    tools alike."""
    import asyncio
    import threading

    from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata, func_metadata

    _, entered, serving = _recording_endpoint("Context")
    assert getattr(FuncMetadata.call_fn, "_mcp_common_tool_context", False)

    def sync_tool(x: int) -> str:
        return f"{threading.current_thread().name} {x}"

    async def async_tool(x: int) -> int:
        return x + 1

    async def call(fn: Any, is_async: bool) -> Any:
        return await serving(func_metadata(fn).call_fn(fn, is_async, {"x": 1}))

    ran = asyncio.run(call(sync_tool, False))
    assert entered == [ran.removesuffix(" 1")] and entered[0] != threading.current_thread().name
    assert asyncio.run(call(async_tool, True)) == 2 and len(entered) == 2
    # Outside a request nothing is entered.
    assert asyncio.run(func_metadata(async_tool).call_fn(async_tool, True, {"x": 2})) == 3 and len(entered) == 2


def test_tool_context_wraps_the_sdks_resolver_walk_and_its_resolver_threads() -> None:
    """``Tool.run`` walks a tool's resolvers with ``resolve_arguments`` (async resolvers run in
    that task) and runs a sync resolver with the resolver module's ``anyio.to_thread.run_sync``:
    the serving endpoint's ``tool_context()`` is entered around both, the second on the worker
    thread itself."""
    import asyncio
    import threading
    from types import SimpleNamespace

    from mcp.server.mcpserver import resolve
    from mcp.server.mcpserver.tools import base

    _, entered, serving = _recording_endpoint("Resolvers")

    async def walk_and_hop() -> tuple[Any, str]:
        walked = await base.resolve_arguments({}, {}, {}, SimpleNamespace(protocol_version=None))
        hopped = await resolve.anyio.to_thread.run_sync(lambda: threading.current_thread().name)
        return walked, hopped

    walked, worker = asyncio.run(serving(walk_and_hop()))
    assert walked == {}
    assert entered == [threading.current_thread().name, worker] and worker != threading.current_thread().name


def test_the_resolver_walk_words_its_refusal_of_an_answer_as_the_core_reads_it() -> None:
    """The 2026-07-28 resolver walk refuses an accepted answer that has no content or does not
    fit the schema with a ``ToolError`` naming the question's key; the core finds the refused
    question in the call's error result by that wording (``_sdk.RESOLVER_REFUSAL``)."""
    import inspect

    from mcp.server.mcpserver import resolve

    source = inspect.getsource(resolve._fulfil)
    for ending in ("with no content", "whose content does not match the requested schema"):
        assert f"Resolver {{key!r}}{_sdk.RESOLVER_REFUSAL}{ending}" in source, ending


def test_the_elicit_verdict_wraps_what_context_elicit_calls_and_sees_its_refusals() -> None:
    """``Context.elicit`` calls the ``elicit_with_validation`` its module imported, and refuses
    an accepted answer with one of ``_sdk.ELICIT_REFUSALS`` (a plain ``ValueError``): the
    verdict installed there is entered around the elicitation and sees that refusal leave."""
    import asyncio
    import contextlib
    from types import SimpleNamespace

    from mcp.server.mcpserver import Context, context
    from mcp.types import ElicitResult
    from pydantic import BaseModel

    class Name(BaseModel):
        name: str

    seen: list[BaseException | None] = []

    @contextlib.asynccontextmanager
    async def verdict() -> Any:
        try:
            yield
        except BaseException as exc:
            seen.append(exc)
            raise
        seen.append(None)

    original = context.elicit_with_validation
    context.elicit_with_validation = getattr(original, "__wrapped__", original)  # as the SDK ships it
    try:
        _sdk.install_elicit_verdict(verdict)
        for content in (None, {"nam": "Ada"}, {"name": "Ada"}):

            async def elicit_form(*_: Any, content: Any = content, **__: Any) -> ElicitResult:
                return ElicitResult(action="accept", content=content)

            session = SimpleNamespace(elicit_form=elicit_form)
            ctx = Context(request_context=SimpleNamespace(session=session, request_id=1))
            with contextlib.suppress(ValueError):
                asyncio.run(ctx.elicit("Who?", schema=Name))
    finally:
        context.elicit_with_validation = original
    assert [type(e) for e in seen] == [ValueError, ValueError, type(None)]
    assert tuple(str(e) for e in seen[:2]) == _sdk.ELICIT_REFUSALS


def test_the_sdk_logs_a_tool_call_on_the_loggers_the_readme_names() -> None:
    tool_logger, runner_logger = _sdk.sdk_loggers()
    assert (tool_logger.name, runner_logger.name) == ("mcp.server.mcpserver.server", "mcp.server.runner")
