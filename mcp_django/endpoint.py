"""The endpoint as Django serves it: every tool runs with the MCP request's Django state.

Django's handler sets some state for the thread that serves a request: the script prefix
(``reverse()`` under a sub-path deployment), the URLconf a middleware chose
(``request.urlconf``) and the language (``LocaleMiddleware``). A tool may run elsewhere: on a
worker thread of the SDK's, on the endpoint's event loop, after the response began (a legacy
call waiting for an answer). :meth:`DjangoEndpoint.tool_context` gives it the same state there,
so ``reverse()`` and ``gettext`` in a tool answer the same on every path.

``SessionMiddleware`` saves ``request.session`` when the view returns. A tool whose answer
streams (SSE) runs on after that, on another thread: :meth:`DjangoEndpoint.response_started`
gives it a copy of the session from then on, so what Django saved is what the tool had left
before the stream started, never a dict changed half-way through the save.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import copy
import functools
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, TypeVar

from asgiref.sync import SyncToAsync, ThreadSensitiveContext
from django.contrib.sessions.backends.base import SessionBase
from django.core.handlers.wsgi import get_script_name
from django.db import close_old_connections, connections
from django.http import HttpRequest
from django.urls import get_script_prefix, get_urlconf, set_script_prefix, set_urlconf
from django.utils import translation

from mcp_common import MCPEndpoint, current_request
from mcp_common.home import HomeThread, open_home, running_at_home
from mcp_common.http import HTTPRequest, HTTPResponse

T = TypeVar("T")

logger = logging.getLogger("mcp_django")


@contextlib.contextmanager
def request_state(request: HttpRequest) -> Iterator[None]:
    """Django's per-request state as ``request`` had it, restored afterwards."""
    prefix, urlconf = get_script_prefix(), get_urlconf()
    set_script_prefix(get_script_name(request.META))
    if getattr(request, "urlconf", None) is not None:
        set_urlconf(request.urlconf)
    language = getattr(request, "LANGUAGE_CODE", None)
    try:
        with translation.override(language) if language else contextlib.nullcontext():
            yield
    finally:
        set_script_prefix(prefix)
        set_urlconf(urlconf)


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def serving_request() -> HttpRequest | None:
    """The Django request whose MCP message is being served, if any."""
    current = current_request.get()
    native = current.native if current is not None else None
    return native if isinstance(native, HttpRequest) else None


def mark_serving_thread(request: HttpRequest) -> None:
    """Record that the current thread serves ``request`` with Django's state for it (set by
    Django's handler): a tool that runs on it needs nothing more (``tool_context``). The thread
    itself, not its id: the next thread started after it ends often gets the same id."""
    request._mcp_thread = threading.current_thread()  # type: ignore[attr-defined]


_NOTHING_TO_DO = contextlib.nullcontext()


@contextlib.contextmanager
def worker_connections() -> Iterator[None]:
    """Around a tool on a thread other than its request's: what Django's request_started and
    request_finished do for a request's own thread, drop the thread's connections that are
    obsolete (``CONN_MAX_AGE``) or broken. Else they live as long as the thread, and one the
    database server dropped fails every later tool there."""
    close_old_connections()
    try:
        yield
    finally:
        close_old_connections()


@contextlib.asynccontextmanager
async def thread_sensitive(state: contextlib.AbstractContextManager[Any]) -> AsyncIterator[None]:
    """Around an async tool or resolver (``state`` entered inside): a thread-sensitive context
    of its own, as Django's ASGI handler gives each request. Its ORM work (``sync_to_async``,
    ``acount()``) then runs on a thread of the call's own, not on asgiref's one thread for the
    whole process, where every async tool's queries queued behind each other and a connection
    the database server dropped stayed broken for the process's life (nothing ends a request
    there). The connections the call opened are closed with its thread."""
    context = ThreadSensitiveContext()
    aborted = False
    home = open_home()
    # Set by hand, not entered with ``async with``: asgiref's context defers to one the call
    # inherited, Django's ASGI handler's for the request, whose thread under the sync view (what
    # uvicorn serves a project without ASGI_APPLICATION) is the request's, busy waiting for this
    # very call: the tool's ORM work would wait for it for ever.
    token = SyncToAsync.thread_sensitive_context.set(context)
    if home is not None:
        SyncToAsync.context_to_thread_executor[context] = _HomeOrOwnThread(home)
    try:
        with state:
            yield
    except GeneratorExit:
        aborted = True  # a coroutine closed mid-call: nothing may be awaited
        raise
    finally:
        executor = SyncToAsync.context_to_thread_executor.pop(context, None)
        own = _own_thread(executor)
        if own is not None:
            closed = own.submit(connections.close_all)
            if not aborted:
                await asyncio.wrap_future(closed)
        if executor is not None:
            executor.shutdown(wait=False)  # its queued work (the close) still runs
        with contextlib.suppress(ValueError):  # closed from another context: nothing to restore
            SyncToAsync.thread_sensitive_context.reset(token)


class _HomeOrOwnThread(concurrent.futures.Executor):
    """An async tool's thread-sensitive executor under WSGI: the request's own thread while it
    waits for the call (:mod:`mcp_common.home`: the request's connection, inside the
    transaction it has open, as a sync tool's queries), else, from the first time that thread
    cannot take the work on, one thread of the call's own for the rest of it."""

    def __init__(self, home: HomeThread) -> None:
        self.home = home
        self.own: concurrent.futures.ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[T]:
        if self.own is None:
            future = self.home.try_submit(_leaving_no_loop, fn, *args, elsewhere=self._on_own_thread, **kwargs)
            if future is not None:
                return future
        return self._on_own_thread(fn, args, kwargs)

    def _on_own_thread(self, fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Also where work the request's thread did not take goes (from another thread)."""
        with self._lock:
            if self.own is None:
                self.own = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        return self.own.submit(fn, *args, **kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if self.own is not None:
            self.own.shutdown(wait=wait, cancel_futures=cancel_futures)


def _leaving_no_loop(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """Run ``fn`` (asgiref's ``SyncToAsync.thread_handler`` and the call's ORM work) on the
    request's thread, then leave asgiref's record of the thread's event loop as it was.

    asgiref notes, on the thread that runs a ``sync_to_async`` function, the loop that awaits
    it, and never clears the note: every later ``async_to_sync`` on that thread runs its
    coroutine on that loop if it still runs. Left, the endpoint's loop would run the site's
    own async code for the rest of the thread's life: a Django async view under WSGI, a
    sync view's ``async_to_sync``. Blocking code there would stall every MCP call of the
    process, and code there that waits for one (a request to this site's endpoint) would
    wait for ever; they run on a loop of their own, as asgiref promises.
    """
    noted = SyncToAsync.threadlocal.__dict__
    kept = dict(noted)
    try:
        return fn(*args, **kwargs)
    finally:
        noted.clear()
        noted.update(kept)


def _own_thread(executor: concurrent.futures.Executor | None) -> concurrent.futures.Executor | None:
    """The executor whose thread's connections are the call's to close: the request's thread
    keeps its own (Django closes them as the request ends)."""
    return executor.own if isinstance(executor, _HomeOrOwnThread) else executor


def release_thread() -> None:
    """Let the call's thread-sensitive thread (:func:`thread_sensitive`) go, its connections
    closed on it first: the call's next ORM work gets a new one. For a call about to wait for a
    person, which must hold no thread meanwhile."""
    context = SyncToAsync.thread_sensitive_context.get(None)
    executor = SyncToAsync.context_to_thread_executor.pop(context, None) if context is not None else None
    executor = _own_thread(executor)
    if executor is not None:
        executor.submit(connections.close_all)
        executor.shutdown(wait=False)


@contextlib.contextmanager
def worker_state(request: HttpRequest) -> Iterator[None]:
    with worker_connections(), request_state(request):
        yield


_streamed: contextvars.ContextVar[list[tuple[SessionBase, SessionBase]] | None] = contextvars.ContextVar(
    "mcp_django_streamed_session", default=None
)
"""For the request being served on the endpoint's loop: one list, shared by its handler and every
task and thread it starts, which holds, once the response has started streaming, the request's
session and the copy they all work on instead (whichever of them sent the first notification)."""


def _streamed_pair() -> tuple[SessionBase, SessionBase] | None:
    shared = _streamed.get()
    return shared[0] if shared else None


class _SplitSession:
    """Mixed into the class of a request's session once its MCP response streams while the
    handler runs on. In the handler's context (and the tasks and threads it starts) every
    attribute of the session is its copy's, however the handler holds it (``request.session``,
    a reference taken earlier, a view tool's request); anywhere else (``SessionMiddleware`` on
    the view's thread) the session is itself."""

    def __getattribute__(self, name: str) -> Any:
        pair = _streamed_pair()
        if pair is not None and pair[0] is self:
            return getattr(pair[1], name)
        return object.__getattribute__(self, name)

    def __setattr__(self, name: str, value: Any) -> None:
        pair = _streamed_pair()
        if pair is not None and pair[0] is self:
            setattr(pair[1], name, value)
        else:
            object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        pair = _streamed_pair()
        if pair is not None and pair[0] is self:
            delattr(pair[1], name)
        else:
            object.__delattr__(self, name)


class _StreamedSession:
    """Mixed into the class of the copy: never saved (nor created, nor deleted: ``login()``
    there must not replace the client's stored session); its first change logs a warning."""

    _mcp_handler: str
    _mcp_warned: bool

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "modified" and value and not self._mcp_warned:
            self._mcp_warned = True
            logger.warning(
                "MCP handler %r changed request.session after its response had started streaming "
                "(SSE): the change is not saved in the client's session. On the 2026-07-28 era, "
                "change it before the handler's first notification (progress, log); a legacy call "
                "streams from its start unless the fast path serves it (a plain tool under WSGI) or "
                'MCP["JSON_RESPONSE"] is set.',
                self._mcp_handler,
            )
        object.__setattr__(self, name, value)

    def save(self, must_create: bool = False) -> None:
        pass

    async def asave(self, must_create: bool = False) -> None:
        pass

    def create(self) -> None:
        pass

    async def acreate(self) -> None:
        pass

    def delete(self, session_key: str | None = None) -> None:
        pass

    async def adelete(self, session_key: str | None = None) -> None:
        pass


@functools.cache
def _session_classes(cls: type[SessionBase]) -> tuple[type[SessionBase], type[SessionBase]]:
    """The split and the streamed-copy classes of a session class (its backend's store), named
    as it is: the signing salt of a session's data is its class's ``__qualname__``."""
    names = {"__module__": cls.__module__, "__qualname__": cls.__qualname__}
    return type(cls.__name__, (_SplitSession, cls), names), type(cls.__name__, (_StreamedSession, cls), names)


def detach_session(request: HttpRequest, handler: str) -> None:
    """From now on, in the current context, ``request.session`` is a copy that nobody saves."""
    session = request.__dict__.get("session")
    if not isinstance(session, SessionBase):
        return  # no SessionMiddleware, or a session of the project's own making
    base = type(session)
    if issubclass(base, _SplitSession):
        base = base.__mro__[2]
    split, streamed = _session_classes(base)
    state = dict(object.__getattribute__(session, "__dict__"))
    if "_session_cache" in state:
        # Deep: a list in the session the handler appends to is not the one Django serialises.
        state["_session_cache"] = copy.deepcopy(state["_session_cache"])
    state.update(modified=False, _mcp_handler=handler, _mcp_warned=False)
    detached = object.__new__(streamed)
    detached.__dict__.update(state)
    if type(session) is not split:
        session.__class__ = split
    shared = _streamed.get()
    if shared is None:
        # Outside DjangoEndpoint.handle_async: this context (and what it starts) only.
        _streamed.set([(session, detached)])
    else:
        shared[:] = [(session, detached)]


class DjangoEndpoint(MCPEndpoint):
    """An ``MCPEndpoint`` whose tools run with the serving Django request's state."""

    def __init__(self, server: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(server, *args, **kwargs)
        # Built as it first serves a request: the URLconf is loaded, which the view tools'
        # arguments depend on (a URL's extra options are none of the caller's).
        from mcp_django.expose import settle_view_tools

        settle_view_tools(server)

    def tool_context(self) -> contextlib.AbstractContextManager[Any]:
        request = serving_request()
        if request is None:
            return _NOTHING_TO_DO
        home = request.__dict__.get("_mcp_thread") is threading.current_thread()
        if home and not running_at_home():
            return _NOTHING_TO_DO  # the request's own code: a sync tool on the fast path
        # Work the request's thread runs for its call under WSGI (mcp_common.home) runs in the
        # call's context, where Django's per-request state (context variables) may not be the
        # request's: it is checked as anywhere else; the thread keeps its connections, which
        # Django's request handles.
        wanted = request.__dict__.get("_mcp_django_state")
        if wanted is None:
            prefix = get_script_name(request.META)
            wanted = request._mcp_django_state = (  # type: ignore[attr-defined]
                prefix if prefix.endswith("/") else prefix + "/",  # as set_script_prefix() keeps it
                getattr(request, "urlconf", None),
                getattr(request, "LANGUAGE_CODE", None),
            )
        prefix, urlconf, language = wanted
        # On an event loop (an async tool) Django opens no connection: the ORM refuses to run.
        threaded = not home and not _on_event_loop()
        if (
            get_script_prefix() == prefix
            and get_urlconf() == urlconf
            and (language is None or translation.get_language() == language)
        ):
            # The thread already has it (the request's own thread, the usual case for a sync
            # tool under WSGI): a tool call costs a few lookups, not three assignments and a
            # translation override entered and left.
            return worker_connections() if threaded else _NOTHING_TO_DO
        return worker_state(request) if threaded else request_state(request)

    def async_tool_context(self) -> contextlib.AbstractAsyncContextManager[Any]:
        return thread_sensitive(self.tool_context())

    def waiting_for_client(self) -> None:
        release_thread()

    async def handle_async(self, request: HTTPRequest) -> HTTPResponse:
        # One list per request, in the context its handler's tasks copy: detach_session fills
        # it from whichever of them notifies first, and the handler and all its tasks see it.
        token = _streamed.set([])
        try:
            return await super().handle_async(request)
        finally:
            _streamed.reset(token)

    def response_started(self, request: HTTPRequest, handler: str) -> None:
        # SessionMiddleware saves the session on the view's thread as the view returns, while
        # the handler runs on here: it gets a copy, and Django saves what it left until now.
        native = request.native
        if isinstance(native, HttpRequest):
            detach_session(native, handler)
