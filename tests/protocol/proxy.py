"""A reverse proxy on loopback that forwards to one upstream server as nginx would.

What a deployment puts between the client and the app, one behaviour per option: a public
path prefix it strips (``location /shop/ { proxy_pass http://app/; }``), the ``X-Forwarded-*``
headers it adds, the ``Host`` it sends, ``proxy_http_version`` (nginx's default is 1.0, with
``Connection: close``), a request body it forwards chunked (``proxy_request_buffering off``),
response buffering (``proxy_buffering on``, which ``X-Accel-Buffering: no`` turns off for one
response) and a read timeout (``proxy_read_timeout``: an upstream silent that long has its
connection cut, and the client's with it, mid-response).

The proxy answers every client request with ``Connection: close`` and opens a new upstream
connection for it: one request per connection on both sides, as nginx does upstream by default.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}


@dataclass
class ProxyOptions:
    prefix: str = ""
    """The public path prefix (``/shop``): a request outside it gets the proxy's 404."""
    strip_prefix: bool = True
    """Forward ``/shop/mcp`` as ``/mcp`` (the app learns the prefix from ``X-Forwarded-Prefix``
    or its own setting); ``False`` forwards the path whole (gunicorn's ``SCRIPT_NAME``)."""
    headers: dict[str, str] = field(default_factory=dict)
    """Set on every forwarded request (``X-Forwarded-Proto``, ``X-Forwarded-Host``...)."""
    host: str | None = None
    """The ``Host`` sent upstream; ``None``: the client's, as ``proxy_set_header Host $host``."""
    http10: bool = False
    """Speak HTTP/1.0 upstream (nginx's default ``proxy_http_version``)."""
    chunk_body: bool = False
    """Forward a request body chunked, with no ``Content-Length``."""
    buffering: bool = False
    """Read the whole upstream response before sending any of it to the client."""
    honor_accel_buffering: bool = True
    """A response carrying ``X-Accel-Buffering: no`` is streamed even when ``buffering``."""
    read_timeout: float | None = None
    """Cut both connections when the upstream sends nothing for this long."""


@dataclass
class Head:
    first_line: str
    headers: list[tuple[str, str]]

    def get(self, name: str) -> str | None:
        for key, value in self.headers:
            if key.lower() == name:
                return value
        return None


class Cut(Exception):
    """The upstream was silent past the read timeout."""


async def _read_head(reader: asyncio.StreamReader) -> Head | None:
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    lines = raw.decode("latin-1").split("\r\n")
    headers = []
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers.append((name.strip(), value.strip()))
    return Head(lines[0], headers)


async def _body(reader: asyncio.StreamReader, head: Head, until_eof: bool) -> AsyncIterator[bytes]:
    """The body's pieces as they arrive, its framing removed."""
    if "chunked" in (head.get("transfer-encoding") or "").lower():
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                return
            piece = await reader.readexactly(size)
            await reader.readexactly(2)
            yield piece
    length = head.get("content-length")
    if length is not None:
        left = int(length)
        while left:
            piece = await reader.read(min(left, 65536))
            if not piece:
                raise ConnectionError("body cut short")
            left -= len(piece)
            yield piece
        return
    if until_eof:
        while piece := await reader.read(65536):
            yield piece


def _serialize(first_line: str, headers: list[tuple[str, str]]) -> bytes:
    return ("\r\n".join([first_line, *(f"{k}: {v}" for k, v in headers)]) + "\r\n\r\n").encode("latin-1")


class ReverseProxy:
    """``ReverseProxy(upstream_base_url, options)`` serving on a free 127.0.0.1 port in a
    thread of its own: ``with proxy: ...`` then ``proxy.url("/shop/mcp")``."""

    def __init__(self, upstream: str, options: ProxyOptions | None = None) -> None:
        host, _, port = upstream.removeprefix("http://").partition(":")
        self.upstream = (host, int(port))
        self.options = options or ProxyOptions()
        self.port = 0
        self.cuts = 0
        """How many responses the read timeout cut."""
        self.buffered = 0
        """How many responses were buffered whole before the client saw them."""
        self.upstream_requests: list[Head] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._connections: dict[asyncio.Task[None], asyncio.StreamWriter] = {}

    def url(self, path: str = "") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def __enter__(self) -> ReverseProxy:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._accept, "127.0.0.1", 0), self._loop
        ).result(5)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def __exit__(self, *exc: object) -> None:
        async def stop() -> None:
            # Every connection's task is cancelled and awaited (it closes both its sockets),
            # and so is one accepted meanwhile: the listening socket closes only once no task
            # is left, since asyncio's accept, run after its server closed, would fail and
            # leave its socket open. A writer whose task was cancelled before it ran is closed
            # here (one whose task closed it may have had its close waiter cancelled with the
            # task). A connection the proxy never accepted is refused when its socket closes.
            me = asyncio.current_task()
            while others := [task for task in asyncio.all_tasks() if task is not me]:
                for task in others:
                    if task in self._connections:
                        task.cancel()
                await asyncio.wait(others, timeout=5)
            assert self._server is not None
            self._server.close()
            for writer in self._connections.values():
                if not writer.is_closing():
                    writer.close()
                    with contextlib.suppress(Exception):
                        await writer.wait_closed()
            await self._loop.shutdown_asyncgens()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self._connections[self._loop.create_task(self._serve(client_r, client_w))] = client_w

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            await self._forward(client_r, client_w)
        except (ConnectionError, asyncio.IncompleteReadError, Cut):
            pass
        finally:
            client_w.close()
            with contextlib.suppress(Exception, asyncio.CancelledError):  # the proxy stopping
                await client_w.wait_closed()

    async def _forward(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        options = self.options
        request = await _read_head(client_r)
        if request is None:
            return
        method, target, _ = request.first_line.split(" ", 2)
        if not (target == options.prefix or target.startswith(options.prefix + "/")):
            client_w.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            await client_w.drain()
            return
        if options.strip_prefix and options.prefix:
            target = target[len(options.prefix) :] or "/"
        body = b"".join([piece async for piece in _body(client_r, request, until_eof=False)])
        headers = [(k, v) for k, v in request.headers if k.lower() not in HOP_BY_HOP | {"content-length"}]
        if options.host is not None:
            headers = [(k, v) for k, v in headers if k.lower() != "host"] + [("Host", options.host)]
        set_names = {name.lower() for name in options.headers}
        headers = [(k, v) for k, v in headers if k.lower() not in set_names] + list(options.headers.items())
        headers.append(("Connection", "close"))
        chunked = options.chunk_body and body and not options.http10
        if chunked:
            headers.append(("Transfer-Encoding", "chunked"))
        elif body or method in ("POST", "PUT", "PATCH"):
            headers.append(("Content-Length", str(len(body))))
        version = "HTTP/1.0" if options.http10 else "HTTP/1.1"
        head = Head(f"{method} {target} {version}", headers)
        self.upstream_requests.append(head)
        up_r, up_w = await asyncio.open_connection(*self.upstream)
        try:
            up_w.write(_serialize(head.first_line, headers))
            if chunked:
                # Two chunks, as a proxy relaying the client's pieces would send them.
                half = len(body) // 2
                for piece in (body[:half], body[half:]):
                    if piece:
                        up_w.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                up_w.write(b"0\r\n\r\n")
            else:
                up_w.write(body)
            await up_w.drain()
            await self._relay(up_r, client_w, method)
        finally:
            up_w.close()
            with contextlib.suppress(Exception, asyncio.CancelledError):  # the proxy stopping
                await up_w.wait_closed()

    async def _relay(self, up_r: asyncio.StreamReader, client_w: asyncio.StreamWriter, method: str) -> None:
        options = self.options
        timeout = options.read_timeout

        async def within(awaitable: object) -> object:
            try:
                return await asyncio.wait_for(awaitable, timeout)  # type: ignore[arg-type]
            except TimeoutError:
                self.cuts += 1
                raise Cut from None

        response = await within(_read_head(up_r))
        if not isinstance(response, Head):
            return
        status = int(response.first_line.split(" ", 2)[1])
        headers = [(k, v) for k, v in response.headers if k.lower() not in HOP_BY_HOP | {"content-length"}]
        first_line = "HTTP/1.1 " + response.first_line.split(" ", 1)[1]
        pieces = _body(up_r, response, until_eof=True)
        no_body = method == "HEAD" or status in (204, 304) or 100 <= status < 200
        streamed = not options.buffering or (
            options.honor_accel_buffering and (response.get("x-accel-buffering") or "").lower() == "no"
        )
        if no_body:
            client_w.write(_serialize(first_line, [*headers, ("Content-Length", "0"), ("Connection", "close")]))
        elif not streamed:
            self.buffered += 1
            body = []
            while True:
                piece = await within(anext(pieces, b""))
                if not piece:
                    break
                body.append(piece)
            whole = b"".join(body)  # type: ignore[arg-type]
            out = [*headers, ("Content-Length", str(len(whole))), ("Connection", "close")]
            client_w.write(_serialize(first_line, out) + whole)
        else:
            out = [*headers, ("Transfer-Encoding", "chunked"), ("Connection", "close")]
            client_w.write(_serialize(first_line, out))
            await client_w.drain()
            while True:
                piece = await within(anext(pieces, b""))
                if not piece:
                    break
                client_w.write(b"%x\r\n%s\r\n" % (len(piece), piece))  # type: ignore[str-bytes-safe]
                await client_w.drain()
            client_w.write(b"0\r\n\r\n")
        await client_w.drain()


@contextlib.contextmanager
def reverse_proxy(upstream: str, **options: object) -> Iterator[ReverseProxy]:
    with ReverseProxy(upstream, ProxyOptions(**options)) as proxy:  # type: ignore[arg-type]
        yield proxy
