"""The benchmark apps, each wrapped so that ``POST /__callgrind__/<start|stop|zero|dump>`` drives
callgrind in the process that serves it (``benchmarks/instructions.py``; a forked gunicorn
worker cannot be reached by ``callgrind_control``). Every other request passes straight through.

``BENCH_CALLGRIND_LIB`` names the compiled ``callgrind_ctl.c``.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Iterable
from typing import Any

PREFIX = "/__callgrind__/"

_lib: Any = None


def _control(op: str) -> bool:
    global _lib
    if _lib is None:
        _lib = ctypes.CDLL(os.environ["BENCH_CALLGRIND_LIB"])
    if op == "start":
        _lib.cg_start()
    elif op == "stop":
        _lib.cg_stop()
    elif op == "zero":
        _lib.cg_zero()
    elif op == "dump":
        _lib.cg_dump(b"benchmarks.instructions")
    else:
        return False
    return True


def wsgi(app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
    def wrapped(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path.startswith(PREFIX):
            ok = _control(path[len(PREFIX) :])
            start_response("204 No Content" if ok else "404 Not Found", [("Content-Length", "0")])
            return [b""]
        return app(environ, start_response)

    return wrapped


def asgi(app: Callable[..., Any]) -> Callable[..., Any]:
    async def wrapped(scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http" and path.startswith(PREFIX):
            ok = _control(path[len(PREFIX) :])
            status = 204 if ok else 404
            await send({"type": "http.response.start", "status": status, "headers": [(b"content-length", b"0")]})
            await send({"type": "http.response.body", "body": b""})
            return
        await app(scope, receive, send)

    return wrapped


def django_wsgi() -> Callable[..., Iterable[bytes]]:
    from benchmarks.django_bench.wsgi import application

    return wsgi(application)


def flask_wsgi() -> Callable[..., Iterable[bytes]]:
    from benchmarks.flask_bench import create_app

    return wsgi(create_app())


def sdk_asgi() -> Callable[..., Any]:
    from benchmarks.sdk_app import app

    return asgi(app)
