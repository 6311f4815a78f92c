"""A WSGI request's own thread, lent to its call while the thread waits for it.

Under WSGI the request's thread hands the call to the endpoint's event loop and blocks until
it is answered (or, for an SSE answer, until the stream's next frame). Blocking work of the
call — a sync tool or resolver the SDK would run on one of AnyIO's worker threads, the ORM work
of an async tool, the store's database calls — runs on that waiting thread instead
(:class:`HomeThread`): with the thread's database connection, inside the transaction it has
open (a Django ``TestCase``, ``ATOMIC_REQUESTS`` while the view runs), with what the framework
keeps per thread. Between two frames of a stream the work waits for the thread's return; work
it does not take up within :data:`PATIENCE`, and work after the stream ended, runs where it
would have without it, so nothing ever waits for a thread that is busy elsewhere. A call whose
frames must flow while its tool runs keeps its sync tools away (:func:`keep_tools_away`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

_Item = tuple["concurrent.futures.Future[Any]", Callable[..., Any], tuple[Any, ...], dict[str, Any], "Elsewhere | None"]
Elsewhere = Callable[[Callable[..., Any], tuple[Any, ...], dict[str, Any]], "concurrent.futures.Future[Any]"]
"""Where work the home thread did not take runs instead: ``elsewhere(fn, args, kwargs)`` submits
it to the executor it would have run on without a home."""


class NotTaken(Exception):
    """The outcome of work submitted without an ``elsewhere`` that the home thread did not
    take: its submitter runs it the usual way."""


current_home: contextvars.ContextVar[HomeThread | None] = contextvars.ContextVar("mcp_common_home", default=None)
"""The home thread of the call being served, set in the context its coroutine runs in."""


_tools_away: contextvars.ContextVar[bool] = contextvars.ContextVar("mcp_common_home_tools_away", default=False)
"""Set in a call's task whose sync tools and resolvers must not run at home (:func:`keep_tools_away`)."""

_holding: contextvars.ContextVar[HomeThread | None] = contextvars.ContextVar("mcp_common_home_holding", default=None)
"""In the context of sync code :func:`call_at_home` runs: the home thread it holds."""


PATIENCE = 0.25
"""Seconds work waits for a home thread that is away (writing a frame of the call's stream to
its client, or held by a test that reads the stream later or on another thread) before it runs
where it would have without the home."""


class HomeThread:
    r"""The thread that created it, taking the call's blocking work while it :meth:`wait`\ s for
    the call, and between two waits of a stream it serves (it comes back for the next frame).
    Work it does not start within :data:`PATIENCE` runs where it would have without it, so
    nothing ever waits for a thread that went elsewhere; after :meth:`close`
    :meth:`try_submit` refuses."""

    def __init__(self) -> None:
        self.thread = threading.current_thread()
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._open = True
        self._inside = True  # made to be waited on at once: the call may submit before wait()
        self._busy = False
        self._queued = 0  # work items in the queue (it also holds wake-ups, which are not work)
        self._watch: Any = None

    @property
    def is_open(self) -> bool:
        return self._open

    def try_submit(
        self, fn: Callable[..., T], /, *args: Any, elsewhere: Elsewhere | None = None, **kwargs: Any
    ) -> concurrent.futures.Future[T] | None:
        """``fn(*args, **kwargs)`` queued for the home thread; ``None`` once it is closed. While
        the thread is away or runs other work it gets :data:`PATIENCE` (work that waits for
        the loop through ``anyio.from_thread`` takes it meanwhile: :meth:`wait`). Not taken,
        it runs ``elsewhere`` (its outcome the future's), or without one its future fails with
        :class:`NotTaken`."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._lock:
            if not self._open:
                return None
            self._queue.put((future, fn, args, kwargs, elsewhere))
            self._queued += 1
            if self._busy or not self._inside:
                self._watch_for_absence()
        return future

    def _watch_for_absence(self) -> None:
        """(Lock held.) Once per absence: after :data:`PATIENCE`, hand what waits elsewhere."""
        if self._watch is not None:
            return
        try:
            self._watch = asyncio.get_running_loop().call_later(PATIENCE, self._absent)
        except RuntimeError:  # submitted from a thread: a timer of its own
            self._watch = threading.Timer(PATIENCE, self._absent)
            self._watch.daemon = True
            self._watch.start()

    def _absent(self) -> None:
        with self._lock:
            self._watch = None
            if self._inside and not self._busy:
                return
        self._hand_over()

    def _hand_over(self) -> None:
        """What is queued and not started goes where it would have run without the home (the
        endpoint's database threads, AnyIO's, an async tool's own): threads whose database
        connections something closes, unlike a thread started for it."""
        left: list[_Item] = []
        wakes = 0
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is None:
                wakes += 1
            else:
                left.append(item)
        with self._lock:
            self._queued -= len(left)
        for _ in range(wakes):  # a wait() that came back meanwhile still needs its wake-up
            self._queue.put(None)
        for future, fn, args, kwargs, elsewhere in left:
            if not future.set_running_or_notify_cancel():
                continue  # its caller was cancelled
            if elsewhere is None:
                future.set_exception(NotTaken())
                continue
            try:
                there = elsewhere(fn, args, kwargs)
            except BaseException as exc:  # the executor shut down
                future.set_exception(exc)
            else:
                there.add_done_callback(functools.partial(_settle, future))

    def wait(self, outcome: concurrent.futures.Future[Any]) -> None:
        """On the home thread: run the work submitted until ``outcome`` is done. Also from
        the work it runs, when that waits for the loop (a sync tool's ``anyio.from_thread``
        call): what the loop needs of the thread meanwhile (a notification's event-log write)
        runs at once, on the same connection, rather than on another thread after
        :data:`PATIENCE`."""
        outcome.add_done_callback(self._wake)
        with self._lock:
            nested = self._busy
            self._inside, self._busy = True, False
        try:
            while not outcome.done():
                item = self._queue.get()
                if item is None:
                    continue
                with self._lock:
                    self._queued -= 1
                    self._busy = True
                try:
                    _run(item)
                finally:
                    with self._lock:
                        self._busy = False
        finally:
            with self._lock:
                if nested:
                    self._busy = True  # back to the work that waited
                else:
                    self._inside = False
                # Work left in the queue, not the wake-up the outcome left there (watching for
                # that would start a timer thread per request, and per frame of a stream).
                if self._queued and self._open:
                    self._watch_for_absence()

    def _wake(self, _done: concurrent.futures.Future[Any]) -> None:
        self._queue.put(None)

    def close(self) -> None:
        """For good: the thread will not wait for the call again (what is queued runs where it
        would have without the home)."""
        with self._lock:
            self._open = False
            self._inside = False
        self._hand_over()


_here = threading.local()


def running_at_home() -> bool:
    """Whether this thread runs work it took for a call it waits for (in the call's context,
    not its own)."""
    return getattr(_here, "depth", 0) > 0


def _settle(future: concurrent.futures.Future[Any], there: concurrent.futures.Future[Any]) -> None:
    if there.cancelled():
        future.set_exception(concurrent.futures.CancelledError())
    elif (exc := there.exception()) is not None:
        future.set_exception(exc)
    else:
        future.set_result(there.result())


def _run(item: _Item) -> None:
    future, fn, args, kwargs, _elsewhere = item
    if not future.set_running_or_notify_cancel():
        return  # its caller was cancelled before it started
    _here.depth = getattr(_here, "depth", 0) + 1
    try:
        result = fn(*args, **kwargs)
    except BaseException as exc:
        future.set_exception(exc)
    else:
        future.set_result(result)
    finally:
        _here.depth -= 1


def open_home() -> HomeThread | None:
    """The call's home thread if it is still waiting for it, else ``None``."""
    home = current_home.get()
    return home if home is not None and home.is_open else None


def keep_tools_away() -> None:
    """In a call's task, before its handler runs: the call's frames must reach its client while
    its tool runs, and the home thread is the one that writes them: a call that may wait for
    its client's answer to a question (a legacy call whose client declared it can be asked),
    or whose client wants progress as it comes (it sent a progress token). Its sync tools and
    resolvers then run on threads of their own: one run at home would hold back every frame
    until it returned (and wait forever for the answer to a question never sent)."""
    _tools_away.set(True)


def holding_home() -> bool:
    """Whether this context is that of sync code run at home by :func:`call_at_home` (or of
    what it runs on the loop through ``anyio.from_thread``): its home thread cannot write
    anything to the client until that code returns."""
    return _holding.get() is not None


async def call_at_home(fn: Callable[[], T]) -> tuple[bool, T | None]:
    """On the loop: ``(True, fn())`` run on the call's home thread, in a copy of this context,
    as an AnyIO worker thread of this loop (``anyio.from_thread`` works in it as it does on
    the thread ``anyio.to_thread`` would have used); ``(False, None)`` without an open home,
    or for a call that keeps its tools away from it (:func:`keep_tools_away`)."""
    home = open_home()
    if home is None or _tools_away.get():
        return False, None
    token = _anyio_token()
    context = contextvars.copy_context()
    context.run(_holding.set, home)
    future = home.try_submit(_as_worker, home, token, context.run, fn)
    if future is None:
        return False, None
    try:
        return True, await asyncio.wrap_future(future)
    except NotTaken:
        return False, None


def _anyio_token() -> Any:
    try:
        from anyio.lowlevel import current_token

        return current_token()
    except Exception:  # an AnyIO before 4.11, or no AnyIO event loop: no token
        return None


def _as_worker(home: HomeThread, token: Any, fn: Callable[..., T], *args: Any) -> T:
    if token is None:
        return fn(*args)
    try:
        from anyio._core._eventloop import threadlocals
        from anyio.lowlevel import EventLoopToken
    except ImportError:  # pragma: no cover - an AnyIO that moved it: from_thread needs a token
        return fn(*args)
    names = ("current_token", "current_cancel_scope", "mcp_home")
    had = [getattr(threadlocals, name, _ABSENT) for name in names]
    threadlocals.current_token = EventLoopToken(_waiting_at_home(token.backend_class), token.native_token)
    # What anyio.from_thread.check_cancelled() reads: none, as under to_thread.run_sync's
    # shielded scope (the SDK's), where it never raises either.
    threadlocals.current_cancel_scope = None
    threadlocals.mcp_home = home
    try:
        return fn(*args)
    finally:
        for name, value in zip(names, had, strict=True):
            if value is _ABSENT:
                delattr(threadlocals, name)
            else:
                setattr(threadlocals, name, value)


_ABSENT = object()


@functools.cache
def _waiting_at_home(backend: type[Any]) -> type[Any]:
    """AnyIO's ``backend``, whose ``from_thread`` calls made by work at home wait for the loop
    in :meth:`HomeThread.wait`: the call on the loop may need the thread meanwhile."""

    class WaitingAtHome(backend):  # type: ignore[misc,valid-type]
        @classmethod
        def run_async_from_thread(cls, func: Callable[..., Any], args: tuple[Any, ...], token: object) -> Any:
            loop = token or _current_token().native_token
            done = asyncio.run_coroutine_threadsafe(_awaited(func, args), loop)
            return _wait_at_home(done)

        @classmethod
        def run_sync_from_thread(cls, func: Callable[..., Any], args: tuple[Any, ...], token: object) -> Any:
            loop = token or _current_token().native_token
            done: concurrent.futures.Future[Any] = concurrent.futures.Future()

            def call() -> None:
                if done.set_running_or_notify_cancel():
                    try:
                        done.set_result(func(*args))
                    except BaseException as exc:
                        done.set_exception(exc)

            loop.call_soon_threadsafe(call)
            return _wait_at_home(done)

    return WaitingAtHome


def _current_token() -> Any:
    from anyio._core._eventloop import threadlocals

    return threadlocals.current_token


async def _awaited(func: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    return await func(*args)


def _wait_at_home(done: concurrent.futures.Future[T]) -> T:
    from anyio._core._eventloop import threadlocals

    home: HomeThread | None = getattr(threadlocals, "mcp_home", None)
    if home is not None and home.thread is threading.current_thread():
        home.wait(done)
    return done.result()
