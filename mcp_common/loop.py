"""One event loop per process, in a background thread, for the SDK's async engine.

Starting an event loop per request is the slowest way to drive the SDK from a sync view
(``../shared/performance.md``); the loop, the server's lifespan and everything the hot path
needs are built once per process instead. WSGI threads submit coroutines here and block on the
result; ASGI views await the same coroutine through a future.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextvars
import importlib
import logging
import os
import sys
import threading
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from mcp_common.home import HomeThread

T = TypeVar("T")

logger = logging.getLogger("mcp_common")


class LoopRunner:
    """A daemon thread running one asyncio loop forever.

    The loop runs under ``run_until_complete`` of a long-lived main task so that anyio finds a
    root task: without one, ``anyio.to_thread`` starts a new OS thread per call.
    """

    _shared: LoopRunner | None = None
    _shared_pid: int | None = None
    _shared_lock = threading.Lock()

    def __init__(self) -> None:
        self._streams: weakref.WeakSet[_SyncStream] = weakref.WeakSet()
        # In an empty context: the loop's own handles (its self-pipe reader) keep the context
        # they were made in for the loop's life, and the first request of a process creates the
        # loop inside its framework's contexts (Flask's app and request contexts), which would
        # keep that app and request alive as long as the process.
        self._loop = contextvars.Context().run(asyncio.new_event_loop)
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._main, name="mcp-event-loop", daemon=True)
        self._thread.start()
        self._ready.wait()

    @classmethod
    def shared(cls) -> LoopRunner:
        """The process's runner; a forked child (gunicorn worker) gets its own."""
        with cls._shared_lock:
            if cls._shared is None or cls._shared_pid != os.getpid():
                _warn_if_patched_late(cls._shared_lock)
                cls._shared = cls()
                cls._shared_pid = os.getpid()
                atexit.register(cls._shared.stop)
                # Before the interpreter joins non-daemon threads (a WSGI server's worker
                # threads), end the SSE responses they are streaming: a graceful shutdown must
                # not wait for a stream that waits for a human. Clients resume elsewhere.
                register = getattr(threading, "_register_atexit", None)
                if register is not None:
                    register(cls._shared.drain)
                _warn_if_threads_disabled()
            return cls._shared

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        if _greenlet_threads():
            _confine_running_loop(self._loop)

        async def main() -> None:
            self._stop = asyncio.Event()
            self._ready.set()
            await self._stop.wait()

        try:
            forever = self._loop.create_task(main())
            while True:
                try:
                    self._loop.run_until_complete(forever)
                    break
                except (SystemExit, KeyboardInterrupt):
                    # Raised in one of its tasks (code of the application's that the core did
                    # not wrap): that task ends with it, the loop and every other call go on.
                    logger.exception("A task on the MCP event loop raised; the loop goes on")
            # Let lifespans and in-flight calls unwind instead of being destroyed mid-await.
            pending = [t for t in asyncio.all_tasks(self._loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
        finally:
            self._loop.close()

    def drain(self) -> None:
        """End every WSGI stream being served now (process shutdown)."""
        for stream in list(self._streams):
            stream.interrupt()

    def stop(self, timeout: float = 5.0) -> None:
        if self._stop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stop.set)
            if not self.in_loop_thread():
                self._thread.join(timeout)

    def in_loop_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and block the calling (non-loop) thread for its result."""
        if self.in_loop_thread():
            coro.close()
            raise RuntimeError("LoopRunner.run() called from the loop's own thread")
        return self.submit(coro).result()

    async def run_async(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` on the runner's loop from another event loop (an ASGI server's)."""
        return await asyncio.wrap_future(self.submit(coro))

    def iterate(
        self,
        stream: AsyncIterator[bytes],
        home: HomeThread | None = None,
        between: Callable[[], None] | None = None,
    ) -> Iterator[bytes]:
        """A blocking iterator over an async stream that lives on the runner's loop (for WSGI);
        ``home``: the call's home thread, which runs the call's work while the iterating thread
        waits for the next chunk, and is closed when the stream ends. ``between``: run on the
        iterating thread before it waits for each chunk (the store gives back what it need
        not hold while the stream waits: a pooled connection)."""
        iterator = _SyncStream(self, stream, home, between)
        self._streams.add(iterator)
        return iterator

    async def aiterate(self, stream: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """An async iterator, for another loop, over a stream that lives on the runner's loop."""
        try:
            while True:
                try:
                    chunk = await self.run_async(_anext(stream))
                except StopAsyncIteration:
                    return
                yield chunk
        finally:
            # Not awaited: on a client disconnect this runs inside a cancelled task.
            self.submit(_aclose(stream))


def _greenlet_threads() -> bool:
    """Whether ``threading`` is gevent's or eventlet's (gunicorn's ``gevent`` and ``eventlet``
    workers patch it before the app is imported): every thread of the process is then a
    greenlet of one OS thread."""
    gevent = sys.modules.get("gevent.monkey")
    if gevent is not None and gevent.is_module_patched("threading"):
        return True
    eventlet = sys.modules.get("eventlet.patcher")
    return eventlet is not None and bool(eventlet.is_monkey_patched("thread"))


def _confine_running_loop(loop: asyncio.AbstractEventLoop) -> None:
    """On the loop's greenlet: make the loop the running one only while that greenlet runs.

    asyncio keeps the running loop per OS thread, and under gevent every "thread" is a
    greenlet of the same one: left alone, every other greenlet (each request of the worker)
    would see the endpoint's loop as its own running loop, and Django refuses the ORM there
    ("You cannot call this from an async context"), in every view of the site, as
    ``asyncio.run`` and ``async_to_sync`` refuse to start. Each switch of greenlets sets it
    (a greenlet trace function, chained to one already installed, such as gevent's monitor)."""
    greenlet: Any = importlib.import_module("greenlet")  # gevent's and eventlet's, untyped
    home = greenlet.getcurrent()
    set_running = asyncio.events._set_running_loop
    previous = greenlet.settrace(None)

    def trace(event: str, args: tuple[Any, Any]) -> None:
        if event in ("switch", "throw"):
            origin, target = args
            if target is home:
                set_running(loop if loop.is_running() else None)
            elif origin is home:
                set_running(None)
        if previous is not None:
            previous(event, args)

    greenlet.settrace(trace)


def _warn_if_patched_late(lock: Any) -> None:
    """gunicorn's gevent worker patches ``threading`` after the app is imported, and with
    ``--preload`` the app was imported first, in the master: its locks are real ones, and a
    greenlet waiting for one held by another greenlet stops the whole worker, the event loop's
    greenlet with it (Django itself refuses its database connections there)."""
    if _greenlet_threads() and type(lock).__module__ == "_thread":
        logger.warning(
            "This process was monkey-patched (gevent or eventlet) after mcp_common was imported "
            "(gunicorn's --preload with -k gevent): its locks are real threads' locks, and a "
            "worker can hang on its first requests. Patch first (gevent.monkey.patch_all() at "
            "the top of gunicorn.conf.py) or drop --preload."
        )


def _warn_if_threads_disabled() -> None:
    """uWSGI before 2.0.27 runs its workers' Python code without threads unless started with
    ``--enable-threads`` (or ``--threads``): the loop thread and the database threads then run
    only while a request is being served, and stop whenever the worker waits for the next."""
    uwsgi = sys.modules.get("uwsgi")
    if uwsgi is not None and getattr(uwsgi, "has_threads", 1) == 0:
        logger.warning(
            "uWSGI runs this process without Python threads: the MCP endpoint's event loop, "
            "its heartbeat and its database threads stop whenever the worker is idle, so a "
            "legacy call waiting for its client stalls and the other workers take it for dead. "
            "Start uWSGI with --enable-threads (or --threads N)."
        )


async def _anext(stream: AsyncIterator[bytes]) -> bytes:
    return await stream.__anext__()


async def _aclose(stream: AsyncIterator[bytes]) -> None:
    aclose = getattr(stream, "aclose", None)
    if aclose is not None:
        await aclose()


class _SyncStream:
    """WSGI servers call ``close()`` when the client goes away; that closes the async stream."""

    def __init__(
        self,
        runner: LoopRunner,
        stream: AsyncIterator[bytes],
        home: HomeThread | None = None,
        between: Callable[[], None] | None = None,
    ) -> None:
        self._runner = runner
        self._between = between
        self._stream = stream
        self._closed = False
        self._interrupted = False
        self._next: concurrent.futures.Future[bytes] | None = None
        self._home = home

    def __iter__(self) -> _SyncStream:
        return self

    def __next__(self) -> bytes:
        if self._closed:
            raise StopIteration
        if self._between is not None:
            self._between()
        self._next = next_chunk = self._runner.submit(_anext(self._stream))
        if self._interrupted:  # between two chunks: no wait for the next
            next_chunk.cancel()
        home = self._home
        try:
            if home is not None:
                if home.thread is threading.current_thread():
                    home.wait(next_chunk)
                else:  # iterated elsewhere: the request's thread will not wait for the call
                    self._leave_home()
            return next_chunk.result()
        except (StopAsyncIteration, concurrent.futures.CancelledError):
            self._closed = True
            self._leave_home()
            raise StopIteration from None
        except BaseException:
            self._leave_home()
            raise
        finally:
            self._next = None

    def _leave_home(self) -> None:
        home, self._home = self._home, None
        if home is not None:
            home.close()

    def interrupt(self) -> None:
        """End the stream now (from any thread): the waiting ``__next__`` stops iteration, or
        the next one if the serving thread is between two chunks (writing one to its client)."""
        self._interrupted = True
        future = self._next
        if future is not None:
            future.cancel()

    def close(self) -> None:
        # The home first: this thread no longer waits for the call's work (closing the stream
        # must not wait for work queued here).
        self._leave_home()
        if not self._closed:
            self._closed = True
            self._runner.run(_aclose(self._stream))


def run_sync(awaitable: Awaitable[T]) -> T:  # pragma: no cover - convenience for shells
    async def wrap() -> T:
        return await awaitable

    return LoopRunner.shared().run(wrap())
