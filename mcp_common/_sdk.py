"""Every use of a private name of the MCP SDK lives here, and only here.

``tests/core/test_sdk_contract.py`` fails loudly when the SDK moves one of them; the dependency
is bounded below the next minor release for the same reason.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Iterator
from time import monotonic
from typing import Any

from mcp.server.lowlevel.server import Server
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity

from mcp_common.home import call_at_home


def lowlevel_server(server: Any) -> Server[Any]:
    """The low-level ``Server`` that ``serve_one`` drives, from an ``MCPServer`` or itself."""
    if isinstance(server, Server):
        return server
    inner = getattr(server, "_lowlevel_server", None)
    if not isinstance(inner, Server):
        raise TypeError(f"expected an mcp.server.MCPServer or a low-level mcp Server, got {type(server).__name__}")
    return inner


def install_request_state_security(server: Any, security: RequestStateSecurity) -> None:
    """Replace the server's request-state boundary with one under ``security``.

    ``MCPServer`` installs a boundary under a per-process ephemeral key when it is built; state
    sealed by one worker would be rejected by every other. The boundary keeps its place in the
    middleware chain (it must run before anything that reads ``requestState``).
    """
    lowlevel = lowlevel_server(server)
    boundary = RequestStateBoundary(security, default_audience=lowlevel.name)
    chain = lowlevel.middleware
    for index, middleware in enumerate(chain):
        if isinstance(middleware, RequestStateBoundary):
            chain[index] = boundary
            return
    chain.insert(0, boundary)


def registered_tools(server: Any) -> list[Any]:
    """The ``MCPServer``'s registered ``Tool`` objects (their functions and resolver plans);
    empty for a low-level ``Server``, whose handlers are opaque."""
    manager = getattr(server, "_tool_manager", None)
    if manager is None:
        return []
    return list(manager.list_tools())


def resource_and_prompt_functions(server: Any) -> list[tuple[str, Any]]:
    """``(what, function)`` for each resource, resource template and prompt of an ``MCPServer``
    (``what``: ``"resource 'uri'"``, ``"resource template 'uri'"``, ``"prompt 'name'"``)."""
    found: list[tuple[str, Any]] = []
    resources = getattr(server, "_resource_manager", None)
    for uri, resource in getattr(resources, "_resources", {}).items():
        found.append((f"resource {uri!r}", getattr(resource, "fn", None)))
    for uri, template in getattr(resources, "_templates", {}).items():
        found.append((f"resource template {uri!r}", getattr(template, "fn", None)))
    for name, prompt in getattr(getattr(server, "_prompt_manager", None), "_prompts", {}).items():
        found.append((f"prompt {name!r}", getattr(prompt, "fn", None)))
    return found


def request_identity(method: str, params: Any) -> tuple[str, str]:
    """The (target, arguments digest) the SDK's request-state boundary binds a state to.

    Computed by the SDK's own function so that a persisted state is bound to exactly what the
    sealed token inside it is bound to.
    """
    from mcp.server import request_state

    return request_state._request_identity(method, params)


def default_call_tool_handler(server: Any) -> bool:
    """Whether ``tools/call`` is served by ``MCPServer``'s own handler (no extension wrapper,
    no hand-registered low-level handler): the condition for the project's fast path."""
    handler = getattr(server, "_handle_call_tool", None)
    if handler is None:
        return False
    entry = lowlevel_server(server).get_request_handler("tools/call")
    return entry is not None and entry.handler == handler


def tool_error_types() -> tuple[type[Exception], type[Exception], type[Exception], type[Exception]]:
    """(ToolError, UnexpectedToolError, ResourceError, UnexpectedResourceError), as ``Tool.run``
    maps them."""
    from mcp.server.mcpserver.exceptions import ResourceError, ToolError, UnexpectedResourceError, UnexpectedToolError

    return ToolError, UnexpectedToolError, ResourceError, UnexpectedResourceError


def sdk_loggers() -> tuple[logging.Logger, logging.Logger]:
    """The loggers the SDK's full path logs a ``tools/call`` on: ``MCPServer``'s (a tool's
    failure) and its runner's (a result its surface refuses). The fast path logs the same
    events on them, so that an operator's logging configuration sees them whichever path
    served the call."""
    from mcp.server import runner
    from mcp.server.mcpserver import server

    return server.logger, runner.logger


def get_tool(server: Any, name: str) -> Any | None:
    """The ``MCPServer``'s registered ``Tool`` called ``name``."""
    manager = getattr(server, "_tool_manager", None)
    return manager.get_tool(name) if manager is not None else None


def rebuild_tool(server: Any, name: str, fn: Any) -> None:
    """Rebuild the ``MCPServer``'s tool ``name`` from its function ``fn``, whose signature
    changed since it was registered: its input schema and argument model follow the new one;
    its title, description, annotations and place among the server's tools stay. A tool the
    application removed, or registered again from another function, is left alone."""
    from mcp.server.mcpserver.tools import Tool

    tools = server._tool_manager._tools
    old = tools.get(name)
    if old is None or old.fn is not fn:
        return
    tools[name] = Tool.from_function(
        old.fn,
        name=old.name,
        title=old.title,
        description=old.description,
        annotations=old.annotations,
        icons=old.icons,
        meta=old.meta,
    )


def registered_tool(server: Any, name: str) -> Any | None:
    """The ``MCPServer``'s tool called ``name``, whatever the current request may see."""
    manager = getattr(server, "_tool_manager", None)
    if manager is None:
        return None
    get = getattr(manager, "_mcp_common_get_tool", None) or manager.get_tool
    return get(name)


def all_tools(server: Any) -> list[Any]:
    """Every ``Tool`` registered on the ``MCPServer``, whatever the current request may see."""
    manager = getattr(server, "_tool_manager", None)
    if manager is None:
        return []
    every = getattr(manager, "_mcp_common_all_tools", None) or manager.list_tools
    return list(every())


def install_tool_visibility(server: Any, hidden: Any) -> None:
    """Make the ``MCPServer``'s tool registry leave out the tools ``hidden()`` names (a set
    for the request being served, or ``None``): its ``tools/list`` does not list them and its
    call path answers "Unknown tool" for them, exactly as for a name never registered.

    The registry is the ``ToolManager`` behind ``MCPServer._tool_manager``; its ``get_tool``
    and ``list_tools`` are what every SDK path (and this package's fast path) asks.
    """
    manager = getattr(server, "_tool_manager", None)
    if manager is None or getattr(manager, "_mcp_common_all_tools", None) is not None:
        return
    get_tool, list_tools = manager.get_tool, manager.list_tools

    def visible_tool(name: str) -> Any:
        denied = hidden()
        return None if denied and name in denied else get_tool(name)

    def visible_tools() -> list[Any]:
        denied = hidden()
        tools = list_tools()
        return [tool for tool in tools if tool.name not in denied] if denied else tools

    manager.get_tool = visible_tool
    manager.list_tools = visible_tools
    manager._mcp_common_all_tools = list_tools
    manager._mcp_common_get_tool = get_tool


def resolvers_take_context(tool: Any) -> bool:
    """Whether any resolver in the tool's resolver graph takes the request ``Context`` (and
    could notify, log or ask through it): read off the plans the SDK built at registration."""
    return any(param.kind == "context" for plan in tool.resolver_plans.values() for param in plan.params.values())


_SUSPENDING_OPS = frozenset(
    {"GET_AWAITABLE", "SEND", "YIELD_VALUE", "YIELD_FROM", "GET_AITER", "GET_ANEXT", "BEFORE_ASYNC_WITH"}
)


def _code_suspends(code: Any) -> bool:
    import dis

    if any(instruction.opname in _SUSPENDING_OPS for instruction in dis.get_instructions(code)):
        return True
    return any(_code_suspends(const) for const in code.co_consts if hasattr(const, "co_code"))


def resolvers_never_suspend(tool: Any) -> bool:
    """Whether every resolver in the tool's graph is an ``async def`` whose code never awaits
    (the usual ``return Elicit(...)``): the SDK's resolver walk then completes without
    suspending, so it needs no event loop. A synchronous resolver (the SDK runs it on a
    worker thread) or any ``await`` in a resolver's code says no."""
    for plan in tool.resolver_plans.values():
        if not plan.is_async:
            return False
        fn = plan.fn
        function = getattr(fn, "__func__", fn)
        code = getattr(function, "__code__", None)
        if code is None:
            # A callable object: its own class's __call__ (anything else: not driven inline).
            code = getattr(vars(type(fn)).get("__call__"), "__code__", None)
        if code is None or _code_suspends(code):
            return False
    return True


def resolve_tool_arguments(tool: Any, validated: dict[str, Any], context: Any) -> Any:
    """The SDK's own resolver walk for ``tool`` (``resolve_arguments``, as ``Tool.run`` calls
    it): a coroutine giving the injected values, or an ``InputRequiredResult``."""
    from mcp.server.mcpserver.resolve import resolve_arguments

    return resolve_arguments(tool.resolved_params, tool.resolver_plans, validated, context)


def request_state_boundary(server: Any) -> Any | None:
    """The request-state boundary among the low-level server's middleware."""
    for middleware in lowlevel_server(server).middleware:
        if isinstance(middleware, RequestStateBoundary):
            return middleware
    return None


def client_capabilities(raw: Any) -> Any:
    """A request envelope's raw ``clientCapabilities``, typed as ``Connection.from_envelope``
    types it (a mis-shaped value reads as not supplied)."""
    from mcp.server.connection import _typed
    from mcp_types import ClientCapabilities

    return _typed(ClientCapabilities, raw)


_SCHEMA_CACHE_INSTALLED = False


def _json_copy(value: Any) -> Any:
    """A copy of a JSON value: dicts and lists rebuilt, strings and numbers shared (anything
    else, which a rendered schema should not hold, deep-copied)."""
    if type(value) is dict:
        return {key: _json_copy(item) for key, item in value.items()}
    if type(value) is list:
        return [_json_copy(item) for item in value]
    if value is None or type(value) in (str, int, float, bool):
        return value
    import copy

    return copy.deepcopy(value)


def install_elicitation_schema_cache() -> None:
    """Render each elicitation model's JSON Schema once per process, not once per question.

    The SDK renders the model with pydantic's schema generator every time a question is asked
    (and, on the 2026-07-28 wire, again on the retry to check the answer belongs to it): about
    0.4 ms each. The rendering is a pure function of the model class, so it is cached per
    class (weakly: models made at run time can still be collected) and every caller gets its
    own copy. A model that fails to render is not cached; the SDK's error is raised each time.
    """
    global _SCHEMA_CACHE_INSTALLED
    if _SCHEMA_CACHE_INSTALLED:
        return
    import weakref

    from mcp.server import elicitation
    from mcp.server.mcpserver import resolve

    original = elicitation.render_elicitation_schema
    cache: weakref.WeakKeyDictionary[type, dict[str, Any]] = weakref.WeakKeyDictionary()

    def render_elicitation_schema(schema: Any) -> dict[str, Any]:
        rendered = cache.get(schema)
        if rendered is None:
            rendered = original(schema)
            cache[schema] = rendered
        return _json_copy(rendered)

    render_elicitation_schema.__doc__ = original.__doc__
    elicitation.render_elicitation_schema = render_elicitation_schema  # type: ignore[assignment]
    resolve.render_elicitation_schema = render_elicitation_schema  # type: ignore[attr-defined]
    _SCHEMA_CACHE_INSTALLED = True


def install_url_capability_gate(is_url_question: Any) -> None:
    """Ask a resolver's URL-mode question only of a client that declared URL mode.

    The SDK knows one elicitation marker, the form one, and gates it on the form capability (a
    bare ``elicitation`` counting as form). :class:`mcp_common.elicitation.ElicitUrl` rides on
    that marker and goes out as a URL-mode request, so for it (``is_url_question(marker)``) the
    gate checks URL mode instead and refuses with the SDK's own error shape (``-32021`` and the
    ``requiredCapabilities`` it lacks); every other marker goes to the SDK's check.
    """
    from mcp.server.mcpserver import resolve

    original = resolve._require_capability
    if getattr(original, "_mcp_common_url_gate", False):
        return
    from mcp.shared.exceptions import MCPError
    from mcp_types import (
        MISSING_REQUIRED_CLIENT_CAPABILITY,
        ClientCapabilities,
        ElicitationCapability,
        MissingRequiredClientCapabilityErrorData,
        UrlElicitationCapability,
    )

    required = MissingRequiredClientCapabilityErrorData(
        required_capabilities=ClientCapabilities(elicitation=ElicitationCapability(url=UrlElicitationCapability()))
    ).model_dump(by_alias=True, mode="json", exclude_none=True)

    def require_capability(context: Any, marker: Any, key: str) -> None:
        if not is_url_question(marker):
            return original(context, marker, key)
        capabilities = context.client_capabilities
        elicitation = capabilities.elicitation if capabilities is not None else None
        if elicitation is not None and elicitation.url is not None:
            return None
        raise MCPError(
            code=MISSING_REQUIRED_CLIENT_CAPABILITY,
            message=f"Client did not declare the url elicitation capability required by resolver {key!r}",
            data=required,
        )

    require_capability._mcp_common_url_gate = True  # type: ignore[attr-defined]
    resolve._require_capability = require_capability  # type: ignore[attr-defined]


async def serve_one(
    server: Server[Any], dctx: Any, method: str, params: Any, *, connection: Any, lifespan_state: Any
) -> dict[str, Any]:
    """The SDK's ``serve_one``, minus a shielded teardown of an empty exit stack.

    ``serve_one`` unwinds the connection's exit stack under a shielded, time-bounded cancel
    scope after every request (~90 us); a per-request connection whose stack nobody pushed
    anything onto has nothing to unwind.
    """
    from mcp.server.runner import ServerRunner, aclose_shielded

    runner = ServerRunner(server, connection, lifespan_state)
    try:
        return await runner.on_request(dctx, method, params)
    finally:
        if connection.exit_stack._exit_callbacks:
            await aclose_shielded(connection)


_OTEL_CHECK_SECONDS = 5.0
_otel_state: list[Any] = [0.0, False]


def otel_active() -> bool:
    """Whether an OpenTelemetry tracer provider is installed; re-read every few seconds."""
    now = monotonic()
    if now < _otel_state[0]:
        return bool(_otel_state[1])
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    active = type(provider).__name__ not in ("ProxyTracerProvider", "NoOpTracerProvider")
    _otel_state[:] = [now + _OTEL_CHECK_SECONDS, active]
    return active


class LazyTelemetry:
    """The SDK's OpenTelemetry middleware, skipped while no tracer provider is installed (the
    span it would open records nothing, at ~50 us a request)."""

    fast_path_safe = True

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        if otel_active():
            return await self.inner(ctx, call_next)
        return await call_next(ctx)


def install_tool_context(tool_context: Any, async_tool_context: Any) -> None:
    """Run every tool the SDK calls inside ``tool_context()``, entered where the tool runs: on
    the SDK's worker thread for a sync tool, in the handler's task for an async one.

    ``tool_context`` is called there and returns a context manager (the serving endpoint's
    :meth:`~mcp_common.endpoint.MCPEndpoint.tool_context`, found through context variables,
    which reach that thread). It is what the core's fast path already runs tools in; the SDK's
    path calls ``FuncMetadata.call_fn``, wrapped here once per process. State a framework keeps
    per thread (Django's script prefix and language) otherwise never reaches the worker thread.
    """
    from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata

    original = FuncMetadata.call_fn
    if getattr(original, "_mcp_common_tool_context", False):
        return

    async def call_fn(
        self: Any, fn: Any, fn_is_async: bool, arguments: dict[str, Any], arguments_to_pass_directly: Any = None
    ) -> Any:
        inner = fn
        if fn_is_async:

            async def fn(**kwargs: Any) -> Any:
                async with async_tool_context():
                    with stops_are_failures():
                        return await inner(**kwargs)

        else:

            def fn(**kwargs: Any) -> Any:
                with tool_context(), stops_are_failures():
                    return inner(**kwargs)

            # Under WSGI: on the request's own thread while it waits (mcp_common.home), not
            # on one of AnyIO's.
            kwargs = arguments | (arguments_to_pass_directly or {})
            ran, result = await call_at_home(functools.partial(fn, **kwargs))
            if ran:
                return result

        return await original(self, fn, fn_is_async, arguments, arguments_to_pass_directly)

    call_fn._mcp_common_tool_context = True  # type: ignore[attr-defined]
    call_fn.__doc__ = original.__doc__
    FuncMetadata.call_fn = call_fn  # type: ignore[method-assign]


@contextlib.contextmanager
def stops_are_failures() -> Iterator[None]:
    """A tool or resolver raising ``SystemExit`` or ``KeyboardInterrupt`` (a library calling
    ``sys.exit()``) fails like one raising any other exception, on the SDK's path and the fast
    path alike: raised in a task, either would stop the endpoint's event loop, and every call
    of the process with it; raised in a WSGI thread, it took the worker down."""
    try:
        yield
    except (SystemExit, KeyboardInterrupt) as exc:
        raise RuntimeError(f"the tool raised {type(exc).__name__}") from exc


class _ToThreadInContext:
    """``anyio.to_thread`` whose ``run_sync`` enters ``tool_context()`` on the worker thread."""

    def __init__(self, to_thread: Any, tool_context: Any) -> None:
        self._to_thread = to_thread
        self._tool_context = tool_context

    def __getattr__(self, name: str) -> Any:
        return getattr(self._to_thread, name)

    async def run_sync(self, func: Any, *args: Any, **kwargs: Any) -> Any:
        tool_context = self._tool_context

        def in_context(*inner: Any) -> Any:
            with tool_context(), stops_are_failures():
                return func(*inner)

        ran, result = await call_at_home(functools.partial(in_context, *args))
        if ran:
            return result
        return await self._to_thread.run_sync(in_context, *args, **kwargs)


class _AnyioForResolvers:
    """``anyio`` as the SDK's resolver module sees it (its ``to_thread`` wrapped)."""

    def __init__(self, anyio: Any, tool_context: Any) -> None:
        self._anyio = anyio
        self.to_thread = _ToThreadInContext(anyio.to_thread, tool_context)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._anyio, name)


def install_resolver_context(tool_context: Any, async_tool_context: Any) -> None:
    """Run a tool's resolvers inside ``tool_context()`` too, as :func:`install_tool_context`
    runs the tool: an async resolver in the handler's task (``Tool.run``'s call of
    ``resolve_arguments``, wrapped), a sync one on the worker thread the SDK runs it on (the
    resolver module's ``anyio.to_thread.run_sync``, wrapped). Django keeps its per-thread state
    per thread (asgiref binds it to the thread that set it): a resolver building a payment
    link with ``reverse()`` would otherwise lose the script prefix. The core's fast path
    already enters it around its resolver walk. Once per process."""
    from mcp.server.mcpserver import resolve
    from mcp.server.mcpserver.tools import base

    if isinstance(resolve.anyio, _AnyioForResolvers):
        return
    resolve.anyio = _AnyioForResolvers(resolve.anyio, tool_context)  # type: ignore[attr-defined]
    original = base.resolve_arguments

    async def resolve_arguments(*args: Any, **kwargs: Any) -> Any:
        async with async_tool_context():
            with stops_are_failures():
                return await original(*args, **kwargs)

    resolve_arguments.__doc__ = original.__doc__
    base.resolve_arguments = resolve_arguments  # type: ignore[attr-defined]


RESOLVER_REFUSAL = " received an accepted elicitation "
"""How the SDK's 2026-07-28 resolver walk words its refusal of an accepted answer
(``resolve._fulfil``: no content, or content the requested schema rejects), after
``Resolver `` and the question's key (its ``repr``); the tool's error result carries it."""


ELICIT_REFUSALS = (
    "Received an accepted elicitation with no content",
    "Received an accepted elicitation whose content does not match the requested schema",
)
"""The ``ValueError`` messages with which the SDK's form elicitation (``ctx.elicit``, and a
resolver's question on the legacy wire) refuses an accepted answer."""


def install_elicit_verdict(verdict: Callable[[], Any]) -> None:
    """Run every form elicitation the SDK's ``Context.elicit`` makes inside ``verdict()``, an
    async context manager entered in the asking task: the SDK's refusal of the answer
    (a ``ValueError`` with one of :data:`ELICIT_REFUSALS`) leaves through it, even when the tool
    catches it afterwards. ``Context.elicit`` calls the function its module imported; that
    name is wrapped, once per process."""
    from mcp.server.mcpserver import context

    original = context.elicit_with_validation
    if getattr(original, "_mcp_common_verdict", False):
        return

    async def elicit_with_validation(*args: Any, **kwargs: Any) -> Any:
        async with verdict():
            return await original(*args, **kwargs)

    elicit_with_validation._mcp_common_verdict = True  # type: ignore[attr-defined]
    elicit_with_validation.__wrapped__ = original  # type: ignore[attr-defined]
    elicit_with_validation.__doc__ = original.__doc__
    context.elicit_with_validation = elicit_with_validation  # type: ignore[attr-defined]


def install_lazy_telemetry(server: Any) -> None:
    chain = lowlevel_server(server).middleware
    for index, middleware in enumerate(chain):
        if type(middleware).__name__ == "OpenTelemetryMiddleware":
            chain[index] = LazyTelemetry(middleware)
