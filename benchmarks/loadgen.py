"""A small closed-loop HTTP/1.1 load generator for MCP endpoints: asyncio over raw sockets.

Each virtual client owns one keep-alive connection (two for ``legacy-elicit``: the answer to the
server's question goes over the second one while the first still holds the call's SSE stream)
and sends its next request as soon as the previous one is answered. Request bytes are built
once; responses are parsed just enough to be checked: status line, headers, a
``Content-Length`` or chunked body, and the ``data:`` lines of an SSE body.

A cell is: set up every client (sessions, first answer checked in full), warm up, then measure
for a fixed time. Only requests that complete inside the measured window count; their latencies
give p50/p99. The generator's own CPU time in that window is reported, to show when the
generator rather than the server is the bottleneck.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
WORKLOADS = ("modern-call", "legacy-call", "modern-elicit", "legacy-elicit", "bare")
EXPECTED_TEXT = "echo: hi"
_EXPECTED = b'"echo: hi"'
MAX_RESUMES = 20
DEFAULT_RETRY_MS = 1000
_META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
}


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


class ProtocolError(Exception):
    """The server answered, but not what the workload expects."""


class Closed(Exception):
    """The server closed the connection before a complete response."""


@dataclass
class Response:
    status: int
    headers: dict[bytes, bytes]
    body: bytes = b""
    messages: list[dict[str, Any]] | None = None
    """The JSON-RPC messages of an SSE body (``None`` for any other body)."""
    last_event_id: str | None = None
    """The last SSE ``id:`` seen (to resume the stream with ``Last-Event-ID``)."""
    retry_ms: int | None = None
    """The last SSE ``retry:`` hint seen."""

    def header(self, name: bytes) -> str | None:
        value = self.headers.get(name)
        return value.decode("latin-1") if value is not None else None

    def json_messages(self) -> list[dict[str, Any]]:
        if self.messages is not None:
            return self.messages
        if not self.body:
            return []
        decoded = json.loads(self.body)
        return decoded if isinstance(decoded, list) else [decoded]


OnEvent = Callable[[dict[str, Any]], Awaitable[None]]


class SSEParser:
    """Incremental ``text/event-stream`` parser: yields the JSON of each non-empty ``data``."""

    def __init__(self) -> None:
        self._buffer = b""
        self.last_event_id: str | None = None
        self.retry_ms: int | None = None

    def feed(self, chunk: bytes) -> list[dict[str, Any]]:
        buffer = (self._buffer + chunk).replace(b"\r\n", b"\n")
        *events, self._buffer = buffer.split(b"\n\n")
        out = []
        for event in events:
            data = []
            for line in event.split(b"\n"):
                if line.startswith(b"data:"):
                    data.append(line[5:].lstrip(b" "))
                elif line.startswith(b"id:"):
                    self.last_event_id = line[3:].strip().decode()
                elif line.startswith(b"retry:") and line[6:].strip().isdigit():
                    self.retry_ms = int(line[6:].strip())
            payload = b"\n".join(data)
            if payload.strip():
                out.append(json.loads(payload))
        return out


class HTTPConnection:
    """One keep-alive HTTP/1.1 connection to 127.0.0.1."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.used = False
        self.reconnects = 0

    async def _open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        self.used = False

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None

    async def request(self, data: bytes, on_event: OnEvent | None = None) -> Response:
        """Send ``data`` (a whole request) and read the whole response.

        A reused connection that the server closed while idle (keep-alive timeout) is reopened
        and the request sent again, once, as HTTP clients do.
        """
        for attempt in (0, 1):
            if self.writer is None:
                await self._open()
            assert self.reader is not None and self.writer is not None
            reused = self.used
            self.used = True
            try:
                self.writer.write(data)
                head = await self.reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError) as exc:
                self.close()
                partial = isinstance(exc, asyncio.IncompleteReadError) and exc.partial
                if reused and attempt == 0 and not partial:
                    self.reconnects += 1
                    continue
                raise Closed(f"connection closed before the response ({type(exc).__name__})") from exc
            break
        try:
            return await self._read_response(head, on_event)
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            self.close()
            raise Closed(f"connection closed mid-response ({type(exc).__name__})") from exc

    async def _read_response(self, head: bytes, on_event: OnEvent | None) -> Response:
        reader = self.reader
        assert reader is not None
        lines = head.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        headers: dict[bytes, bytes] = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(b":")
                headers[name.strip().lower()] = value.strip()
        sse = headers.get(b"content-type", b"").startswith(b"text/event-stream")
        parser = SSEParser() if sse else None
        messages: list[dict[str, Any]] = []
        body = bytearray()

        async def take(chunk: bytes) -> None:
            if parser is None:
                body.extend(chunk)
                return
            for message in parser.feed(chunk):
                messages.append(message)
                if on_event is not None:
                    await on_event(message)

        close_after = headers.get(b"connection", b"").lower() == b"close"
        if status in (204, 304) or 100 <= status < 200:
            pass
        elif headers.get(b"transfer-encoding", b"").lower() == b"chunked":
            while True:
                size_line = await reader.readuntil(b"\r\n")
                size = int(size_line.split(b";", 1)[0], 16)
                if size == 0:
                    # Trailers (none expected) end with an empty line.
                    while (await reader.readuntil(b"\r\n")) != b"\r\n":
                        pass
                    break
                chunk = await reader.readexactly(size + 2)
                await take(chunk[:-2])
        elif b"content-length" in headers:
            length = int(headers[b"content-length"])
            if length:
                await take(await reader.readexactly(length))
        else:
            # No length: the body ends when the server closes the connection.
            while chunk := await reader.read(65536):
                await take(chunk)
            close_after = True
        if close_after:
            self.close()
        if parser is None:
            return Response(status, headers, bytes(body))
        return Response(status, headers, b"", messages, parser.last_event_id, parser.retry_ms)


def build_request(host: str, port: int, path: str, body: bytes, headers: dict[str, str]) -> bytes:
    head = [f"POST {path} HTTP/1.1", f"Host: {host}:{port}", f"Content-Length: {len(body)}"]
    head += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


# -- measurement --------------------------------------------------------------------------------


@dataclass
class Stats:
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    setup_errors: int = 0
    error_samples: list[str] = field(default_factory=list)
    recording: bool = False
    stopping: bool = False
    window: tuple[float, float] = (float("inf"), float("inf"))
    """The measured window (perf_counter); its end is known once it is over."""

    resumes: int = 0
    """Streams resumed with ``Last-Event-ID`` during the window."""

    def resumed(self) -> None:
        if self.recording:
            self.resumes += 1

    def note(self, message: str) -> None:
        if len(self.error_samples) < 5 and message not in self.error_samples:
            self.error_samples.append(message)

    def done(self, started: float, ok: bool, why: str = "") -> None:
        """A request (or round trip) ended. A success counts when it ends inside the window; a
        failure counts when it overlaps the window at all (a request stuck across the whole
        window and failing afterwards is an error of this cell, not a silent nothing)."""
        if ok:
            if self.recording:
                self.latencies.append(time.perf_counter() - started)
            return
        if self.recording or (started < self.window[1] and time.perf_counter() > self.window[0]):
            self.errors += 1
            self.note(why)


@dataclass
class CellResult:
    workload: str
    concurrency: int
    duration: float
    requests: int
    errors: int
    setup_errors: int
    stalled: int
    rps: float
    p50_ms: float | None
    p99_ms: float | None
    gen_cpu_pct: float
    reconnects: int
    resumes: int
    error_samples: list[str]

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def percentile(sorted_values: list[float], fraction: float) -> float | None:
    """Nearest-rank percentile of an already sorted list."""
    if not sorted_values:
        return None
    rank = max(0, min(len(sorted_values) - 1, round(fraction * len(sorted_values) + 0.5) - 1))
    return sorted_values[rank]


class Target:
    """Where a cell sends its traffic (always a loopback address)."""

    def __init__(self, host: str, port: int, path: str, honor_retry: bool = True) -> None:
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError(f"the load generator only talks to loopback addresses, not {host!r}")
        self.host = host
        self.port = port
        self.path = path
        self.honor_retry = honor_retry
        """Wait the SSE ``retry:`` hint before resuming a stream the server ended (as the
        official client does); ``False`` resumes at once, to measure the server alone."""

    def connection(self) -> HTTPConnection:
        return HTTPConnection(self.host, self.port)

    def request(self, body: bytes, headers: dict[str, str]) -> bytes:
        return build_request(self.host, self.port, self.path, body, headers)


JSON_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def modern_headers(tool: str) -> dict[str, str]:
    return {**JSON_HEADERS, "MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": tool}


def modern_body(tool: str, **extra: Any) -> bytes:
    params = {"name": tool, "arguments": {"text": "hi"}, "_meta": _META, **extra}
    return _dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})


def result_text(message: dict[str, Any]) -> str:
    try:
        content = message["result"]["content"]
        if len(content) != 1 or content[0]["type"] != "text":
            raise ProtocolError(f"expected one text content item, got {content!r}")
        return str(content[0]["text"])
    except (KeyError, TypeError) as exc:
        raise ProtocolError(f"not a tool result: {str(message)[:200]}") from exc


def find_reply(messages: list[dict[str, Any]], request_id: int) -> dict[str, Any] | None:
    for message in messages:
        if message.get("id") == request_id and ("result" in message or "error" in message):
            return message
    return None


def reply_to(response: Response, request_id: int) -> dict[str, Any]:
    reply = find_reply(response.json_messages(), request_id)
    if reply is None:
        raise ProtocolError(f"no reply to request {request_id} (HTTP {response.status}): {response.body[:200]!r}")
    return reply


def check_text(reply: dict[str, Any]) -> None:
    text = result_text(reply)
    if text != EXPECTED_TEXT:
        raise ProtocolError(f"unexpected answer {text!r}")


def check_echo(response: Response, request_id: int) -> None:
    if response.status != 200:
        raise ProtocolError(f"HTTP {response.status}: {response.body[:200]!r}")
    check_text(reply_to(response, request_id))


class Client:
    """One virtual client of a workload: ``setup`` once, then ``once`` in a loop."""

    def __init__(self, target: Target, stats: Stats) -> None:
        self.target = target
        self.stats = stats
        self.connections: list[HTTPConnection] = []

    def connection(self) -> HTTPConnection:
        conn = self.target.connection()
        self.connections.append(conn)
        return conn

    async def setup(self) -> None:
        pass

    async def once(self) -> None:
        raise NotImplementedError

    async def teardown(self) -> None:
        pass

    @property
    def reconnects(self) -> int:
        return sum(c.reconnects for c in self.connections)

    def close(self) -> None:
        for conn in self.connections:
            conn.close()


class BareClient(Client):
    """The very request ``modern-call`` sends (body and headers), to the fixed-answer view."""

    def __init__(self, target: Target, stats: Stats) -> None:
        super().__init__(target, stats)
        self.conn = self.connection()
        self.data = target.request(modern_body("echo"), modern_headers("echo"))

    async def setup(self) -> None:
        check_echo(await self.conn.request(self.data), 1)

    async def once(self) -> None:
        started = time.perf_counter()
        response = await self.conn.request(self.data)
        ok = response.status == 200 and _EXPECTED in response.body
        self.stats.done(started, ok, "" if ok else f"HTTP {response.status}: {response.body[:120]!r}")


class ModernCallClient(BareClient):
    async def once(self) -> None:
        started = time.perf_counter()
        response = await self.conn.request(self.data)
        if response.messages is None:
            ok = response.status == 200 and _EXPECTED in response.body
        else:
            ok = response.status == 200 and any(_EXPECTED in _dumps(m) for m in response.messages)
        self.stats.done(started, ok, "" if ok else f"HTTP {response.status}: {response.body[:120]!r}")


class ModernElicitClient(Client):
    """``confirm_echo`` -> ``input_required`` -> retry with the answer and ``requestState``."""

    def __init__(self, target: Target, stats: Stats) -> None:
        super().__init__(target, stats)
        self.conn = self.connection()
        self.headers = modern_headers("confirm_echo")
        self.first = target.request(modern_body("confirm_echo"), self.headers)

    async def round_trip(self) -> None:
        asked = await self.conn.request(self.first)
        if asked.status != 200:
            raise ProtocolError(f"HTTP {asked.status}: {asked.body[:200]!r}")
        result = reply_to(asked, 1).get("result") or {}
        if result.get("resultType") != "input_required":
            raise ProtocolError(f"expected input_required, got {str(result)[:200]}")
        (key,) = result["inputRequests"]
        answer = {key: {"action": "accept", "content": {"ok": True}}}
        retry = modern_body("confirm_echo", inputResponses=answer, requestState=result["requestState"])
        check_echo(await self.conn.request(self.target.request(retry, self.headers)), 1)

    async def setup(self) -> None:
        await self.round_trip()

    async def once(self) -> None:
        started = time.perf_counter()
        try:
            await self.round_trip()
        except ProtocolError as exc:
            self.stats.done(started, False, str(exc))
        else:
            self.stats.done(started, True)


class LegacyClient(Client):
    """A legacy session: ``initialize``, ``notifications/initialized``, then calls."""

    def __init__(self, target: Target, stats: Stats) -> None:
        super().__init__(target, stats)
        self.conn = self.connection()
        self.session = ""
        self.next_id = 1
        self.headers: dict[str, str] = {}

    async def setup(self) -> None:
        init = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": LEGACY,
                "capabilities": {"elicitation": {}},
                "clientInfo": {"name": "bench", "version": "0"},
            },
        }
        response = await self.conn.request(self.target.request(_dumps(init), JSON_HEADERS))
        session = response.header(b"mcp-session-id")
        if response.status != 200 or not session:
            raise ProtocolError(f"initialize: HTTP {response.status}, session {session!r}: {response.body[:200]!r}")
        reply_to(response, 0)
        self.session = session
        self.headers = {**JSON_HEADERS, "Mcp-Session-Id": session, "MCP-Protocol-Version": LEGACY}
        note = _dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})
        acked = await self.conn.request(self.target.request(note, self.headers))
        if acked.status != 202:
            raise ProtocolError(f"notifications/initialized: HTTP {acked.status}")
        await self.call()

    def resume_request(self, last_event_id: str) -> bytes:
        head = [
            f"GET {self.target.path} HTTP/1.1",
            f"Host: {self.target.host}:{self.target.port}",
            "Accept: text/event-stream",
            f"Mcp-Session-Id: {self.session}",
            f"MCP-Protocol-Version: {LEGACY}",
            f"Last-Event-ID: {last_event_id}",
        ]
        return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1")

    async def exchange(self, data: bytes, request_id: int, on_event: OnEvent | None = None) -> dict[str, Any]:
        """POST a request and read until its reply. When the server ends the call's SSE stream
        before the reply (under WSGI it does once the call waits for the client), resume it
        with ``Last-Event-ID``, after the ``retry:`` hint, as the official client does."""
        response = await self.conn.request(data, on_event)
        if response.status != 200:
            raise ProtocolError(f"HTTP {response.status}: {response.body[:200]!r}")
        if response.messages is None:
            return reply_to(response, request_id)
        last_id, retry_ms = response.last_event_id, response.retry_ms
        for _ in range(MAX_RESUMES):
            reply = find_reply(response.messages or [], request_id)
            if reply is not None:
                return reply
            if last_id is None:
                raise ProtocolError("the SSE stream ended before the reply, with no event id to resume from")
            self.stats.resumed()
            if self.target.honor_retry:
                await asyncio.sleep((retry_ms if retry_ms is not None else DEFAULT_RETRY_MS) / 1000)
            response = await self.conn.request(self.resume_request(last_id), on_event)
            if response.status != 200 or response.messages is None:
                raise ProtocolError(f"resume: HTTP {response.status}: {response.body[:200]!r}")
            last_id = response.last_event_id or last_id
            retry_ms = response.retry_ms if response.retry_ms is not None else retry_ms
        raise ProtocolError(f"no reply after {MAX_RESUMES} resumptions of the stream")

    def call_request(self, tool: str) -> tuple[int, bytes]:
        request_id = self.next_id
        self.next_id += 1
        params = {"name": tool, "arguments": {"text": "hi"}}
        body = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
        return request_id, self.target.request(_dumps(body), self.headers)

    async def call(self) -> None:
        request_id, data = self.call_request("echo")
        check_text(await self.exchange(data, request_id))

    async def once(self) -> None:
        started = time.perf_counter()
        try:
            await self.call()
        except ProtocolError as exc:
            self.stats.done(started, False, str(exc))
        else:
            self.stats.done(started, True)

    async def teardown(self) -> None:
        if self.session:
            data = f"DELETE {self.target.path} HTTP/1.1\r\nHost: {self.target.host}:{self.target.port}\r\n"
            data += f"Mcp-Session-Id: {self.session}\r\nMCP-Protocol-Version: {LEGACY}\r\nContent-Length: 0\r\n\r\n"
            await self.conn.request(data.encode())


class LegacyElicitClient(LegacyClient):
    """``confirm_echo`` on the call's SSE stream; the answer POSTed on a second connection."""

    def __init__(self, target: Target, stats: Stats) -> None:
        super().__init__(target, stats)
        self.answers = self.connection()

    async def call(self) -> None:
        request_id, data = self.call_request("confirm_echo")
        asked: list[Any] = []

        async def on_event(message: dict[str, Any]) -> None:
            if message.get("method") != "elicitation/create":
                return
            asked.append(message["id"])
            answer = {"jsonrpc": "2.0", "id": message["id"], "result": {"action": "accept", "content": {"ok": True}}}
            acked = await self.answers.request(self.target.request(_dumps(answer), self.headers))
            if acked.status != 202:
                raise ProtocolError(f"answer to elicitation/create: HTTP {acked.status}: {acked.body[:200]!r}")

        reply = await self.exchange(data, request_id, on_event)
        if len(asked) != 1:
            raise ProtocolError(f"expected one elicitation/create on the call's stream, got {len(asked)}")
        check_text(reply)


CLIENTS: dict[str, type[Client]] = {
    "bare": BareClient,
    "modern-call": ModernCallClient,
    "legacy-call": LegacyClient,
    "modern-elicit": ModernElicitClient,
    "legacy-elicit": LegacyElicitClient,
}

_FAILURES = (ProtocolError, Closed, OSError, ValueError, KeyError, TypeError)


async def _drive(client: Client, go: asyncio.Event, ready: list[bool]) -> None:
    stats = client.stats
    try:
        await client.setup()
    except _FAILURES as exc:
        stats.setup_errors += 1
        stats.note(f"setup: {type(exc).__name__}: {exc}")
        client.close()
        return
    ready.append(True)
    await go.wait()
    while not stats.stopping:
        started = time.perf_counter()
        try:
            await client.once()
        except _FAILURES as exc:
            stats.done(started, False, f"{type(exc).__name__}: {exc}")
            # Whatever state the connection was left in, start afresh on the next request.
            for conn in client.connections:
                conn.close()
            if isinstance(exc, Closed | OSError) and not stats.stopping:
                await asyncio.sleep(0.01)  # do not spin on a server that refuses connections


async def run_cell(
    host: str,
    port: int,
    path: str,
    workload: str,
    concurrency: int,
    *,
    warmup: float = 1.0,
    duration: float = 5.0,
    grace: float = 15.0,
    on_measure_start: Callable[[], None] | None = None,
    on_measure_end: Callable[[], None] | None = None,
    honor_retry: bool = True,
) -> CellResult:
    """Run one cell and return its numbers; the hooks run at the edges of the measured window."""
    target = Target(host, port, path, honor_retry)
    stats = Stats()
    clients = [CLIENTS[workload](target, stats) for _ in range(concurrency)]
    go = asyncio.Event()
    ready: list[bool] = []
    tasks = [asyncio.create_task(_drive(client, go, ready)) for client in clients]
    # Set-up (sessions, first answers checked in full) is not measured.
    setup_deadline = time.monotonic() + grace
    while len(ready) + stats.setup_errors < concurrency and time.monotonic() < setup_deadline:
        await asyncio.sleep(0.01)
    go.set()
    await asyncio.sleep(warmup)
    if on_measure_start is not None:
        on_measure_start()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    stats.window = (wall0, float("inf"))
    stats.recording = True
    await asyncio.sleep(duration)
    stats.recording = False
    cpu1, wall1 = time.process_time(), time.perf_counter()
    stats.window = (wall0, wall1)
    if on_measure_end is not None:
        on_measure_end()
    stats.stopping = True
    _, pending = await asyncio.wait(tasks, timeout=grace)
    for task in pending:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    stalled = len(pending)
    if stalled:
        stats.note(f"{stalled} client(s) still waiting for an answer {grace:.0f} s after the cell ended")
    for client, task in zip(clients, tasks, strict=True):
        if task not in pending:
            try:
                await asyncio.wait_for(client.teardown(), 2)
            except (TimeoutError, *_FAILURES):
                pass
        client.close()
    elapsed = wall1 - wall0
    latencies = sorted(stats.latencies)
    p50, p99 = percentile(latencies, 0.50), percentile(latencies, 0.99)
    return CellResult(
        workload=workload,
        concurrency=concurrency,
        duration=elapsed,
        requests=len(latencies),
        errors=stats.errors + stats.setup_errors + stalled,
        setup_errors=stats.setup_errors,
        stalled=stalled,
        rps=len(latencies) / elapsed,
        p50_ms=p50 * 1000 if p50 is not None else None,
        p99_ms=p99 * 1000 if p99 is not None else None,
        gen_cpu_pct=100 * (cpu1 - cpu0) / elapsed,
        reconnects=sum(c.reconnects for c in clients),
        resumes=stats.resumes,
        error_samples=stats.error_samples,
    )


def main() -> None:
    """``python -m benchmarks.loadgen PORT PATH WORKLOAD [CONCURRENCY [SECONDS]]``: one cell."""
    import sys

    port, path, workload = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    concurrency = int(sys.argv[4]) if len(sys.argv) > 4 else 8
    duration = float(sys.argv[5]) if len(sys.argv) > 5 else 5.0
    result = asyncio.run(run_cell("127.0.0.1", port, path, workload, concurrency, duration=duration))
    print(json.dumps(result.as_dict(), indent=2))


if __name__ == "__main__":
    main()
