"""``MCPEndpoint``: one MCP server served at one URL, whatever framework receives the request.

An adapter turns its framework's request into an :class:`~mcp_common.http.HTTPRequest`, calls
:meth:`MCPEndpoint.handle` (sync views) or :meth:`MCPEndpoint.handle_async` (async views) and
turns the :class:`~mcp_common.http.HTTPResponse` back. Routing between the protocol eras
follows the SDK: an ``MCP-Protocol-Version`` header that is absent or names a handshake-era
version goes to the legacy session protocol, anything else to the 2026-07-28 checks.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
import logging
import os
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import Any, TypeVar

from mcp.server.request_state import RequestStateSecurity
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from mcp_common import _sdk
from mcp_common.config import MCPConfig, derive_key
from mcp_common.elicitation import is_url_question, refusal_verdict, worker_id
from mcp_common.fast import FastPath
from mcp_common.home import HomeThread, NotTaken, current_home, open_home
from mcp_common.http import HTTPRequest, HTTPResponse
from mcp_common.jsonrpc import error_response, request_cancelled
from mcp_common.legacy import LegacyProtocol
from mcp_common.loop import LoopRunner
from mcp_common.modern import handle_modern
from mcp_common.outage import Outage
from mcp_common.security import check_request
from mcp_common.state import finish_blocking, prepare_blocking
from mcp_common.store import SessionStore

logger = logging.getLogger("mcp_common")

_LIFESPANS: set[asyncio.Task[None]] = set()

T = TypeVar("T")

CLOSE_TIMEOUT = 10.0
"""Seconds :meth:`MCPEndpoint.close` waits for the server's lifespan to exit."""
DB_IDLE_SECONDS = 1.0
"""After this long with no store call, the endpoint's database threads close their connections."""

current_request: contextvars.ContextVar[HTTPRequest | None] = contextvars.ContextVar(
    "mcp_current_request", default=None
)
"""The HTTP request being served; tools and resolvers can read the caller's principal from it."""


def _on_each_thread(executor: concurrent.futures.ThreadPoolExecutor, fn: Callable[[], Any], timeout: float) -> None:
    """Have each of ``executor``'s threads run ``fn`` (a thread's database connections are its
    own to close): one task for each thread the pool may hold, each keeping its thread after
    running ``fn`` until all of them are taken or ``timeout`` passes, so that none takes two.
    As many tasks as the pool's most threads, not as it has now: the pool starts a thread for
    a task while one of its threads is busy, or has just finished a task and is not yet counted
    idle, and that new thread would take the busy one's task (which kept its connections, and
    at shutdown ended with them open). When a thread stays busy past ``timeout`` the others
    stop waiting for it, and it may be left out."""
    if not getattr(executor, "_threads", ()):
        return
    workers: int = executor._max_workers  # type: ignore[attr-defined]
    barrier = threading.Barrier(workers)

    def run() -> None:
        try:
            fn()
        finally:
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.wait(timeout)

    with contextlib.suppress(RuntimeError):  # shut down already: so are its threads
        for _ in range(workers):
            executor.submit(run)


BUSY_MESSAGE = "Server busy: no database connection is free; retry shortly"
"""The error of a request the database's connection pool had no connection for in time (503)."""
BUSY_RETRY_SECONDS = 1


def _released(fn: Callable[..., T], args: tuple[Any, ...], release: Callable[[], None]) -> T:
    """``fn(*args)`` on a database thread, then what the thread need not keep given back
    (``store.release_thread_connections``)."""
    try:
        return fn(*args)
    finally:
        release()


def _denied_now() -> frozenset[str] | None:
    """The tools the request being served may not use (``None``: no such tool)."""
    request = current_request.get()
    return request.denied if request is not None else None


def _tool_context_now() -> contextlib.AbstractContextManager[Any]:
    """The serving endpoint's :meth:`MCPEndpoint.tool_context` (none outside a request)."""
    request = current_request.get()
    endpoint = request.endpoint if request is not None else None
    return endpoint.tool_context() if endpoint is not None else contextlib.nullcontext()


def _async_tool_context_now() -> contextlib.AbstractAsyncContextManager[Any]:
    """The serving endpoint's :meth:`MCPEndpoint.async_tool_context` (none outside a request)."""
    request = current_request.get()
    endpoint = request.endpoint if request is not None else None
    return endpoint.async_tool_context() if endpoint is not None else contextlib.nullcontext()


class _Async(contextlib.AbstractAsyncContextManager[Any]):
    """A synchronous context manager, entered by ``async with``."""

    def __init__(self, inner: contextlib.AbstractContextManager[Any]) -> None:
        self._inner = inner

    async def __aenter__(self) -> Any:
        return self._inner.__enter__()

    async def __aexit__(self, *exc_info: Any) -> Any:
        return self._inner.__exit__(*exc_info)


def current_principal(_ctx: Any = None) -> str | None:
    """The authenticated principal of the request being served (``None`` when anonymous).

    Used as the request-state ``bind_principal``: state minted for one user is refused to another.
    """
    request = current_request.get()
    return request.principal if request is not None else None


class MCPEndpoint:
    """Serves one ``MCPServer`` (or low-level ``Server``) over Streamable HTTP, both eras."""

    def __init__(
        self,
        server: Any,
        config: MCPConfig,
        store: SessionStore,
        *,
        runner: LoopRunner | None = None,
        db_threads: int | None = None,
    ) -> None:
        _sdk.install_elicitation_schema_cache()
        _sdk.install_url_capability_gate(is_url_question)
        _sdk.install_tool_visibility(server, _denied_now)
        _sdk.install_tool_context(_tool_context_now, _async_tool_context_now)
        _sdk.install_resolver_context(_tool_context_now, _async_tool_context_now)
        _sdk.install_elicit_verdict(refusal_verdict)
        self.server = server
        self.lowlevel = _sdk.lowlevel_server(server)
        self.name = self.lowlevel.name
        self.config = config
        self.store = store
        if config.secret_keys:
            _sdk.install_request_state_security(
                server,
                RequestStateSecurity(
                    keys=config.request_state_keys(), ttl=config.request_state_ttl, bind_principal=current_principal
                ),
            )
        self.persist_state = bool(config.secret_keys)
        """2026-07-28 request states go to the database behind single-use handles (needs keys)."""
        self.handle_keys = [derive_key(secret, "request-state-handle") for secret in config.secret_keys]
        _sdk.install_lazy_telemetry(server)
        self.legacy = LegacyProtocol(self)
        self.fast = FastPath(self)
        self._fixed_runner = runner
        self._db_threads = db_threads if db_threads is not None else config.db_threads
        self._pid: int | None = None
        self._lock = threading.Lock()
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._lifespan_state: Any = None
        self._started: asyncio.Future[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._lifespan_task: asyncio.Task[None] | None = None
        self._db_used = 0.0
        self._idle_check: asyncio.TimerHandle | None = None
        self._release: Callable[[], None] | None = getattr(store, "release_thread_connections", None)

    def close(self) -> None:
        """Exit the server's lifespan in this process (it is entered again on the next request).

        The calls in flight here end with it, as the SDK's session manager ends its sessions'
        calls: a legacy call waiting for its client's answer ends as cancelled (its question
        recorded so, "Request cancelled" for a client resuming it), and no poll for answers
        outlives it. Returns once they and the lifespan have exited, the heartbeat's database
        call with it, so that the store's connections can be closed next (called on the
        endpoint's own event loop, it cannot wait: it only starts the exit).
        """
        task, self._lifespan_task, self._started = self._lifespan_task, None, None
        if task is None or task.done() or self._pid not in (None, os.getpid()):
            return  # the last: a forked process's copy of its parent's, whose loop is not here
        loop = task.get_loop()

        def end() -> list[asyncio.Task[Any]]:  # on the loop, where the tasks are tracked
            ending = [*(call for call in self._tasks if not call.done()), task]
            for each in ending:
                each.cancel()
            return ending

        with contextlib.suppress(RuntimeError):
            if asyncio.get_running_loop() is loop:
                end()
                return

        async def exited() -> None:
            await asyncio.wait(end())

        with contextlib.suppress(concurrent.futures.TimeoutError):
            asyncio.run_coroutine_threadsafe(exited(), loop).result(CLOSE_TIMEOUT)

    def shutdown(self) -> None:
        """:meth:`close`, then end the endpoint's database threads, each closing its connections
        first (``store.close_thread_connections``). For an endpoint being dropped (a settings
        change in a test, an app's teardown): its idle threads would otherwise live as long as
        the process. A request after it starts new ones."""
        self.close()
        with self._lock:
            executor, self._executor = self._executor, None
            self._pid = None  # the next request builds the process-local machinery again
        if executor is None:
            return
        close = getattr(self.store, "close_thread_connections", None)
        if close is not None:
            _on_each_thread(executor, close, CLOSE_TIMEOUT)
        executor.shutdown(wait=True)

    # -- process-local machinery, rebuilt in a forked worker ---------------------------------

    @property
    def runner(self) -> LoopRunner:
        return self._fixed_runner or LoopRunner.shared()

    def _process_check(self) -> None:
        if self._pid != os.getpid():
            with self._lock:
                if self._pid != os.getpid():
                    self._executor = concurrent.futures.ThreadPoolExecutor(
                        self._db_threads, thread_name_prefix="mcp-db"
                    )
                    self._started = None
                    self._tasks = set()
                    self._idle_check = None  # the parent's, on a loop not running here
                    self.legacy = LegacyProtocol(self)
                    self._pid = os.getpid()

    @property
    def lifespan_state(self) -> Any:
        return self._lifespan_state

    async def _ensure_started(self) -> None:
        if self._started is None:
            self._started = asyncio.get_running_loop().create_future()
            # In a context of its own: the lifespan outlives the request that enters it, whose
            # context (its caller, what the application set around it) is none of its business.
            self._lifespan_task = asyncio.create_task(self._run_lifespan(self._started), context=contextvars.Context())
            # Held by the module too: the lifespan outlives any one reference to the endpoint.
            _LIFESPANS.add(self._lifespan_task)
            self._lifespan_task.add_done_callback(_LIFESPANS.discard)
        await asyncio.shield(self._started)

    async def _run_lifespan(self, started: asyncio.Future[None]) -> None:
        # The server's lifespan is entered once per process and held open by this task, the
        # way the SDK's session manager holds it, rather than once per request.
        try:
            with self.lifespan_context():
                async with self.lowlevel.lifespan(self.lowlevel) as state:
                    self._lifespan_state = state
                    started.set_result(None)
                    await self._heartbeat()
        except asyncio.CancelledError:
            if not started.done():
                # close() while the lifespan was starting: the requests waiting for it get an
                # error, rather than waiting forever (their worker threads with them).
                started.set_exception(RuntimeError(f"MCP endpoint {self.name!r} closed as its lifespan started"))
            raise
        except BaseException as exc:
            if not started.done():
                # The requests waiting for it fail; the next one enters the lifespan again
                # (a database not up yet is no reason to fail every request until a restart).
                if self._started is started:
                    self._started = self._lifespan_task = None
                started.set_exception(exc)
                if isinstance(exc, Exception):
                    # Theirs to log: raised here too, asyncio would log it once more, as "Task
                    # exception was never retrieved", at every failed attempt.
                    return
            raise

    async def _heartbeat(self) -> None:
        """Beat for this worker and expire overdue elicitations, forever (one short write each;
        no beat on a database that lives in this process only)."""
        private: bool | None = None
        outage = Outage(logger, f"The heartbeat of MCP endpoint {self.name!r}")
        while True:
            try:
                now = time.time()
                if private is None:
                    private = await self._db_to_the_end(self.store.process_private)
                if not private:
                    await self._db_to_the_end(self.store.beat_worker, worker_id(), now)
                await self._db_to_the_end(self.store.expire_elicitations, now)
                outage.succeeded()
            except RuntimeError as exc:
                if str(exc).startswith("cannot schedule new futures"):
                    return  # the process is shutting down (its database threads are gone)
                # Any other RuntimeError (NotImplementedError, RecursionError, a driver's) is a
                # failed beat like the rest: a heartbeat that stopped here would let the other
                # workers take this live one for dead and end its streams.
                outage.failed()
            except Exception:
                outage.failed()
            await asyncio.sleep(self.config.heartbeat_interval)

    async def db(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a blocking store call on the endpoint's database threads, or on the thread of
        the WSGI request it serves while that thread waits for it (:mod:`mcp_common.home`:
        its connection, inside the transaction it has open)."""
        home = open_home()
        if home is not None:
            future = home.try_submit(fn, *args)
            if future is not None:
                with contextlib.suppress(NotTaken):  # the thread was away: as below
                    return await asyncio.wrap_future(future)
        loop = asyncio.get_running_loop()
        self._db_used = time.monotonic()
        try:
            call = (
                functools.partial(fn, *args)
                if self._release is None
                else functools.partial(_released, fn, args, self._release)
            )
            return await loop.run_in_executor(self._executor, call)
        finally:
            self._db_used = time.monotonic()
            if self._idle_check is None:
                self._idle_check = loop.call_later(DB_IDLE_SECONDS, self._close_idle_connections)

    def _close_idle_connections(self) -> None:
        """On the loop: once no store call ran for :data:`DB_IDLE_SECONDS`, each database
        thread closes the connections it holds (``store.close_thread_connections``). Else an
        idle endpoint holds them for the process's life, where nothing else closes them (a
        test database on PostgreSQL cannot be dropped while they are open); under load the
        threads keep theirs."""
        self._idle_check = None
        idle_for = time.monotonic() - self._db_used
        if idle_for < DB_IDLE_SECONDS:
            wait = DB_IDLE_SECONDS - idle_for
            self._idle_check = asyncio.get_running_loop().call_later(wait, self._close_idle_connections)
            return
        close = getattr(self.store, "close_thread_connections", None)  # a store of an older release
        if self._executor is not None and close is not None:
            # A thread busy for a long call: the next idle second closes them.
            _on_each_thread(self._executor, close, DB_IDLE_SECONDS)

    async def _db_to_the_end(self, fn: Callable[..., T], *args: Any) -> T:
        """:meth:`db`, which, cancelled, still waits for the call: its thread goes on with it
        regardless, holding a database connection."""
        call = asyncio.ensure_future(self.db(fn, *args))
        try:
            return await asyncio.shield(call)
        except asyncio.CancelledError:
            await asyncio.wait([call])
            if not call.cancelled():
                call.exception()  # read: its failure is no one's now, and not asyncio's to log
            raise

    def lifespan_context(self) -> contextlib.AbstractContextManager[Any]:
        """What the server's lifespan runs inside, for the life of the process, outside any
        request (adapters override: Flask's application context)."""
        return contextlib.nullcontext()

    def tool_context(self) -> contextlib.AbstractContextManager[Any]:
        """What a tool runs inside, on every path and on the thread it runs on (adapters
        override: Flask's app context, Django's per-request state)."""
        return contextlib.nullcontext()

    def async_tool_context(self) -> contextlib.AbstractAsyncContextManager[Any]:
        """What an async tool or resolver runs inside, on the event loop: :meth:`tool_context`
        (adapters override: Django's thread-sensitive context for the ORM)."""
        return _Async(self.tool_context())

    def waiting_for_client(self) -> None:
        """Called in a legacy call's task as it starts waiting for its client's answer (minutes,
        hours): adapters let go of what the call holds meanwhile (Django: the thread its ORM
        work ran on, with that thread's connections)."""

    def before_sending(self, what: str) -> None:
        """Called in the sending handler's context (or the request's, after it) before what it
        sends the client is written to the store: on the legacy wire a request
        (``elicitation/create``...) or a notification (``notifications/progress``...), on the
        2026-07-28 wire an ``input_required`` result's state and questions. ``what`` names it
        for a message. An adapter raises for what would make that write wait (Flask: the app's
        own uncommitted write to the SQLite file the store is in)."""

    def response_started(self, request: HTTPRequest, handler: str) -> None:
        """Called on the event loop, in the context the call's handler runs in, when the call's
        HTTP response turns into an SSE stream while the handler is still running: its headers
        leave now, so what the handler changes in the framework's request from here on cannot
        reach them (adapters override: Flask's session cookie). ``handler`` names it for a log
        (the tool's name, else the method)."""

    def stream_started(self, request: HTTPRequest, handler: str) -> None:
        """What the core calls: :meth:`response_started`, whose failure never fails the call."""
        try:
            self.response_started(request, handler)
        except Exception:
            logger.exception("MCP endpoint %r: response_started failed for %r", self.name, handler)

    def run_call(self, coro: Coroutine[Any, Any, T]) -> T | MCPError:
        """Run a call's coroutine on the endpoint's loop, blocking this (WSGI) thread for its
        outcome: ``close()`` ends it with the other calls in flight, and then its outcome is
        the "Request cancelled" error."""
        return self._run_at_home(self._tracked(coro))[0]

    def _run_at_home(self, coro: Coroutine[Any, Any, T], keep_for_stream: bool = False) -> tuple[T, HomeThread | None]:
        """:meth:`LoopRunner.run`, with this (WSGI) thread lent to the call while it waits
        (:mod:`mcp_common.home`). ``keep_for_stream``: an SSE answer keeps the home open for
        its stream (returned with it; :meth:`iter_body` closes it), else it closes here."""
        runner = self.runner
        if runner.in_loop_thread():
            coro.close()
            raise RuntimeError("a call was run from the event loop's own thread")
        home = HomeThread()
        token = current_home.set(home)
        try:
            outcome = runner.submit(coro)  # the call's task copies this context, home included
        finally:
            current_home.reset(token)
        try:
            home.wait(outcome)
            result = outcome.result()
        except BaseException:
            home.close()
            raise
        if keep_for_stream and isinstance(result, HTTPResponse) and result.stream is not None:
            return result, home
        home.close()
        return result, None

    async def _tracked(self, coro: Coroutine[Any, Any, T]) -> T | MCPError:
        task = asyncio.current_task()
        if task is not None:
            self.track(task)
        try:
            return await coro
        except asyncio.CancelledError:
            return request_cancelled()

    def track(self, task: asyncio.Task[Any]) -> None:
        """Keep a reference to a background task until it ends (asyncio holds only weak ones)."""
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def wake_streams(self, session_id: str) -> None:
        self.legacy.waiters.wake(session_id)

    # -- serving -----------------------------------------------------------------------------

    def handle(self, request: HTTPRequest) -> HTTPResponse:
        """Serve ``request`` from a synchronous (WSGI) view. Never raises."""
        try:
            return self._handle(request)
        except Exception:
            return self.failed(request)

    def failed(self, request: HTTPRequest) -> HTTPResponse:
        """The answer to ``request`` when serving it raised the exception being handled (call
        it in the ``except`` block): JSON-RPC, 503 to retry when the database's connection
        pool had no connection free, 400 when the request was nested too deeply to work
        through (a ``RecursionError``), else 500; logged."""
        # The host application is never broken by a bug of ours, nor by a database failing
        # under us: log it, answer JSON (a framework would answer its HTML error page), under
        # the request's id when its body is a request with one.
        failure = sys.exc_info()[1]
        exhausted = getattr(self.store, "pool_exhausted", None)
        busy = failure is not None and exhausted is not None and exhausted(failure)
        too_deep = isinstance(failure, RecursionError)
        if too_deep:
            # Not a bug either: the request's own JSON, nested nearly as deep as the parser
            # reads, is nested too deep for a later step (the SDK's request-state seal writes
            # the arguments back as JSON with less of the stack left). The client's mistake.
            logger.warning(
                "MCP endpoint %r: a request nested too deeply to serve was refused", self.name, exc_info=True
            )
        elif busy:
            # Not a bug: more requests at once than the pool has connections for. The client
            # may retry; the operator learns which setting bounds it.
            logger.warning(
                "MCP endpoint %r: no database connection was free within the pool's timeout; "
                "answered 503 (a larger pool, or fewer threads per worker, avoids it): %s",
                self.name,
                failure,
            )
        else:
            logger.exception("MCP endpoint %r failed to serve a request", self.name)
        try:
            decoded = request.json()
        except Exception:  # not JSON: no id to answer under (and the answer must not fail)
            decoded = None
        request_id = decoded.get("id") if isinstance(decoded, dict) else None
        if type(request_id) is not str and type(request_id) is not int:
            request_id = None  # none, or not an id JSON-RPC allows (null, a bool, a float...)
        if too_deep:
            return error_response(400, INVALID_PARAMS, "Invalid params: nested too deeply", request_id)
        if busy:
            return error_response(
                503, INTERNAL_ERROR, BUSY_MESSAGE, request_id, headers={"Retry-After": str(BUSY_RETRY_SECONDS)}
            )
        return error_response(500, INTERNAL_ERROR, "Internal server error", request_id)

    def _handle(self, request: HTTPRequest) -> HTTPResponse:
        self._process_check()
        request.blocking = True
        request.endpoint = self
        started = self._started
        if started is None or not started.done():
            # The lifespan first, so that the process's first call takes the fast path like every
            # later one (a sync tool runs here, on the request's thread and its connection). A
            # lifespan that fails is this request's 500; the next one enters it again.
            self.runner.run(self._ensure_started())
        fast = self.fast.handle_sync(request)
        if fast is not None:
            return fast
        version = request.header("mcp-protocol-version")
        if self.persist_state and version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
            # 2026-07-28 request state: the database work happens here, in the request's own
            # thread, rather than as two more hops between threads.
            fast = self.fast.handle_resolving_sync(request)
            if fast is not None:
                return fast
            prepared = prepare_blocking(self, request)
            if isinstance(prepared, HTTPResponse):
                return prepared
            response = self._serve_at_home(prepared)
            return finish_blocking(self, prepared, response) if prepared.defer_persist else response
        return self._serve_at_home(request)

    def _serve_at_home(self, request: HTTPRequest) -> HTTPResponse:
        response, home = self._run_at_home(self.handle_async(request), keep_for_stream=True)
        if home is not None:
            response.home = home
        return response

    async def handle_from_other_loop(self, request: HTTPRequest) -> HTTPResponse:
        """Serve ``request`` from an async (ASGI) view running on another event loop. Never raises."""
        try:
            return await self._handle_from_other_loop(request)
        except Exception:
            return self.failed(request)

    async def _handle_from_other_loop(self, request: HTTPRequest) -> HTTPResponse:
        self._process_check()
        request.endpoint = self
        fast = await self.fast.handle_async(request)
        if fast is not None:
            return fast
        version = request.header("mcp-protocol-version")
        if self.persist_state and version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
            fast = await self.fast.handle_resolving_async(request)
            if fast is not None:
                return fast
        return await self.runner.run_async(self.handle_async(request))

    def iter_body(self, response: HTTPResponse) -> Iterator[bytes]:
        """A streaming body for a WSGI server."""
        assert response.stream is not None
        return self.runner.iterate(response.stream, response.home, self._release)

    def aiter_body(self, response: HTTPResponse) -> AsyncIterator[bytes]:
        """A streaming body for an ASGI server."""
        assert response.stream is not None
        return self.runner.aiterate(response.stream)

    async def handle_async(self, request: HTTPRequest) -> HTTPResponse:
        """Serve ``request``; runs on the endpoint's event loop. Never raises."""
        request.endpoint = self
        token = current_request.set(request)
        try:
            refusal = check_request(self.config, request.headers, len(request.body), request.secure, log=True)
            if refusal is not None:
                return refusal
            await self._ensure_started()
            version = request.header("mcp-protocol-version")
            if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
                return await handle_modern(self, request)
            return await self.legacy.handle(request)
        except Exception:
            return self.failed(request)
        finally:
            current_request.reset(token)
