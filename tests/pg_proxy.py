"""A loopback TCP proxy in front of PostgreSQL that can lose the connection around one write.

For the store's retry after a lost connection: the connection can die after the server
committed a write and before the client read the acknowledgement, and the store's re-run then
meets the write it already made. The proxy watches what the client sends; once armed, the
first statement that writes (its text has ``INSERT`` or ``UPDATE``) arms the connection it
went out on, and that connection is cut:

* ``after_commit=True``: when the server's answer reaches the end of the transaction
  (``ReadyForQuery``, idle): everything before it is passed on, the ``ReadyForQuery`` is not.
  The server committed; the client never learns it.
* ``after_commit=False``: before the statement reaches the server. Nothing was written.

Only 127.0.0.1, on a free port; :meth:`close` (or leaving the ``with`` block) stops it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from types import TracebackType

_WRITES = (b"INSERT", b"UPDATE")
_READY_FOR_QUERY = ord("Z")
_IDLE = ord("I")


class PostgresProxy:
    def __init__(self, host: str = "127.0.0.1", port: int = 5432) -> None:
        self._upstream = (host, port)
        self._armed: bool | None = None
        """``None``: pass everything; else cut the next write (``True``: after its commit)."""
        self.cuts = 0
        """Connections cut so far."""
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="pg-proxy", daemon=True)
        self._thread.start()
        self._server = self._call(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port: int = self._server.sockets[0].getsockname()[1]

    def cut_next_write(self, after_commit: bool = True) -> None:
        """Cut the connection of the next write (see the module's docstring), once."""
        self._loop.call_soon_threadsafe(setattr, self, "_armed", after_commit)

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._call(self._shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    def __enter__(self) -> PostgresProxy:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def _call(self, coroutine: object) -> object:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(10)  # type: ignore[arg-type]

    async def _shutdown(self) -> None:
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        server_writer = None
        try:
            server_reader, server_writer = await asyncio.open_connection(*self._upstream)
            connection = _Connection(client_writer, server_writer)
            upstream = asyncio.ensure_future(self._from_client(client_reader, connection))
            downstream = asyncio.ensure_future(self._from_server(server_reader, connection))
            try:
                await asyncio.wait((upstream, downstream), return_when=asyncio.FIRST_COMPLETED)
            finally:
                for pipe in (upstream, downstream):
                    pipe.cancel()
                await asyncio.gather(upstream, downstream, return_exceptions=True)
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            for writer in (client_writer, server_writer):
                if writer is not None:
                    writer.close()
                    with contextlib.suppress(Exception):
                        await writer.wait_closed()
            self._tasks.discard(task)

    async def _from_client(self, reader: asyncio.StreamReader, connection: _Connection) -> None:
        while data := await reader.read(65536):
            if self._armed is not None and connection.cut is None and any(word in data for word in _WRITES):
                connection.cut = self._armed
                self._armed = None
                if not connection.cut:
                    self.cuts += 1
                    return  # the write never reaches the server
            connection.server.write(data)
            await connection.server.drain()

    async def _from_server(self, reader: asyncio.StreamReader, connection: _Connection) -> None:
        # The client sends a statement only once the server answered the previous one: when a
        # write goes out, the server's next byte starts a message (type, length, body).
        pending = b""
        while data := await reader.read(65536):
            if not connection.cut:
                connection.client.write(data)
                await connection.client.drain()
                continue
            pending += data
            start = 0
            while len(pending) - start >= 6:
                end = start + 1 + int.from_bytes(pending[start + 1 : start + 5], "big")
                if end > len(pending):
                    break
                if pending[start] == _READY_FOR_QUERY and pending[start + 5] == _IDLE:
                    # The transaction is over (committed): its acknowledgement is lost.
                    connection.client.write(pending[:start])
                    await connection.client.drain()
                    self.cuts += 1
                    return
                start = end
            connection.client.write(pending[:start])
            await connection.client.drain()
            pending = pending[start:]


class _Connection:
    __slots__ = ("client", "cut", "server")

    def __init__(self, client: asyncio.StreamWriter, server: asyncio.StreamWriter) -> None:
        self.client = client
        self.server = server
        self.cut: bool | None = None
        """Set when this connection's write is the one to cut (``True``: after its commit)."""
