"""The per-process event loop: a WSGI worker thread streaming a response never blocks the
process from exiting (a graceful restart must not wait for a human's answer)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import asyncio, threading
    from mcp_common.loop import LoopRunner

    runner = LoopRunner.shared()

    async def waits_forever():
        yield b"first"
        await asyncio.Event().wait()
        yield b"never"

    sent = threading.Event()

    def serve():  # a non-daemon thread, like a gunicorn gthread worker's
        for chunk in runner.iterate(waits_forever()):
            print("sent", chunk.decode(), flush=True)
            sent.set()
        print("stream ended", flush=True)

    threading.Thread(target=serve).start()
    sent.wait(30)  # the stream is open, waiting
    print("exiting", flush=True)
    """
)


def test_process_exit_ends_streams_instead_of_waiting_for_them() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["sent", "first", "exiting", "stream", "ended"]


def test_a_task_raising_system_exit_ends_itself_not_the_loop() -> None:
    """Code of the application's that the core does not wrap (a lifespan, a middleware) raising
    ``SystemExit`` in a task on the loop: that task ends with it; the loop serves on."""
    import asyncio

    import pytest

    from mcp_common.loop import LoopRunner

    async def leave() -> None:
        await asyncio.sleep(0)
        raise SystemExit(3)

    async def answer() -> int:
        return 42

    runner = LoopRunner()
    try:
        with pytest.raises(SystemExit):
            runner.run(leave())
        assert runner.run(answer()) == 42
    finally:
        runner.stop()


def test_a_stream_drained_between_two_chunks_ends_at_the_next() -> None:
    """The process's exit can drain the streams while a serving thread is between two chunks
    (writing the last one to its client): that stream ends at its next chunk, instead of
    waiting for it, and the exit with it."""
    import asyncio
    import threading

    from mcp_common.loop import LoopRunner

    async def waits_forever() -> AsyncIterator[bytes]:
        yield b"first"
        await asyncio.Event().wait()
        yield b"never"

    runner = LoopRunner()
    try:
        stream = runner.iterate(waits_forever())
        assert next(stream) == b"first"
        runner.drain()
        rest: list[bytes] = []
        reader = threading.Thread(target=lambda: rest.extend(stream), daemon=True)
        reader.start()
        reader.join(10)
        assert not reader.is_alive(), "the drained stream still waits for its next chunk"
        assert rest == []
    finally:
        runner.stop()


UWSGI_SCRIPT = textwrap.dedent(
    """
    import sys, types
    sys.modules["uwsgi"] = types.SimpleNamespace(has_threads={has_threads})  # as uWSGI embeds it
    from mcp_common.loop import LoopRunner

    LoopRunner.shared()
    LoopRunner.shared()  # the same process: said once
    """
)


def test_uwsgi_without_python_threads_is_reported_at_start() -> None:
    """uWSGI before 2.0.27 starts its workers without Python threads unless told
    ``--enable-threads`` (or ``--threads``): the endpoint's loop and database threads then
    stop whenever the worker waits for a request, its heartbeat with them, and the other
    workers take its waiting calls for dead. The process says so, once, when its loop starts."""
    for has_threads, warned in ((0, 1), (1, 0)):
        done = subprocess.run(
            [sys.executable, "-c", UWSGI_SCRIPT.format(has_threads=has_threads)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert done.stderr.count("--enable-threads") == warned, done.stderr


GEVENT_SCRIPT = textwrap.dedent(
    """
    from gevent import monkey

    monkey.patch_all()  # as gunicorn's gevent worker does before it imports the app

    import asyncio, threading, time
    from mcp_common.loop import LoopRunner

    runner = LoopRunner.shared()
    seen = []

    def request():  # another request of the worker, a greenlet as well
        for _ in range(10):
            seen.append(asyncio._get_running_loop())
            time.sleep(0.01)

    async def call():
        await asyncio.sleep(0.01)
        time.sleep(0.05)  # blocking in a coroutine: gevent lets the other greenlets run
        return asyncio.get_running_loop() is runner.loop

    other = threading.Thread(target=request)
    other.start()
    print(runner.run(call()), asyncio._get_running_loop(), flush=True)
    other.join()
    print(set(seen), asyncio.run(asyncio.sleep(0, "ran")), flush=True)
    """
)


def test_under_gevent_only_the_loops_greenlet_sees_it_running() -> None:
    """gunicorn's gevent worker makes every thread a greenlet of one OS thread, where asyncio
    keeps one running loop: the endpoint's loop must not be the running loop of the worker's
    other greenlets (Django's ORM refuses to run where one runs, ``asyncio.run`` to start)."""
    done = subprocess.run(
        [sys.executable, "-c", GEVENT_SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["True None", "{None} ran"], done.stdout + done.stderr


def test_monkey_patching_after_the_import_is_reported_at_start() -> None:
    """gunicorn ``--preload -k gevent`` imports the app, then patches: the core's locks are
    real ones there, and a worker can hang. The process says so when its loop starts."""
    late = "import mcp_common.loop\n" + GEVENT_SCRIPT
    for script, warned in ((late, 1), (GEVENT_SCRIPT, 0)):
        done = subprocess.run(
            [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=30, check=False
        )
        assert done.returncode == 0, done.stderr
        assert done.stderr.count("gevent.monkey.patch_all() at the top of gunicorn.conf.py") == warned, done.stderr
