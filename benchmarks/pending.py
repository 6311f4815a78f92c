"""Scale of waiting: many elicitations pending at once on one worker, on both wires.

    python -m benchmarks.pending [--count 10000] [--framework django|flask] [--wire modern,legacy]

For each wire it starts one gunicorn worker (gthread, 4 threads) of the benchmark project,
warms it up, then leaves ``--count`` questions unanswered (``confirm_echo`` asks through a
resolver) and reports:

* the worker's RSS growth per pending elicitation;
* its thread count, and whether its 4 request threads are free: while every question waits,
  200 plain ``echo`` calls (8 at a time) must be served at their usual latency;
* how many pending rows the database holds;
* 2026-07-28: how long answering 200 of the waiting questions takes (each retry must reach its
  own row, not walk the backlog).

2026-07-28: a question is a row and a handle in the client's hands; the server holds nothing.
Legacy: the tool's coroutine waits on the event loop (that is the legacy protocol: the call is
open until answered); after ``WAIT_DETACH_SECONDS`` its SSE response is ended with a ``retry:``
hint, so no thread stays with it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def proc_status(pid: int) -> dict[str, str]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return fields


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kib(pid: int) -> int:
    return int(proc_status(pid)["VmRSS"].split()[0])


class Server:
    def __init__(self, framework: str, data: Path) -> None:
        self.framework = framework
        self.port = free_port()
        self.data = data
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "BENCH_DATA_DIR": str(data),
            "DJANGO_SETTINGS_MODULE": "benchmarks.django_bench.settings",
            # Questions are left unanswered for the whole measurement.
            "BENCH_REQUEST_TIMEOUT": "3600",
            # The thread of a waiting call is freed at once (the default waits 0.25 s for a
            # quick answer first, which caps a 4-thread worker at 16 new questions a second).
            "BENCH_WAIT_DETACH": os.environ.get("BENCH_WAIT_DETACH", "0"),
        }
        self.env = env
        if framework == "django":
            subprocess.run([sys.executable, "-m", "django", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
            app = "benchmarks.django_bench.wsgi:application"
        else:
            subprocess.run([sys.executable, "-m", "benchmarks.flask_bench"], cwd=ROOT, env=env, check=True)
            app = "benchmarks.flask_bench:create_app()"
        command = [
            sys.executable,
            "-m",
            "gunicorn",
            "-k",
            "gthread",
            "--threads",
            "4",
            "-w",
            "1",
            "--bind",
            f"127.0.0.1:{self.port}",
            "--log-level",
            "warning",
            "--timeout",
            "600",
            app,
        ]
        self.log = (data / "server.log").open("wb")
        self.process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    break
            except OSError:
                time.sleep(0.2)
        time.sleep(1.0)

    @property
    def worker(self) -> int:
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children").read_text().split()
        return int(children[0])

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()

    def pending_rows(self) -> int:
        name = "django-bench.sqlite3" if self.framework == "django" else "flask-bench.sqlite3"
        table = "mcp_django_mcpelicitation" if self.framework == "django" else "mcp_elicitation"
        path = self.data / name
        if not path.exists():
            candidates = list(self.data.glob("*.sqlite3"))
            path = candidates[0]
        with sqlite3.connect(path) as db:
            return int(db.execute(f"SELECT COUNT(*) FROM {table} WHERE status = 'pending'").fetchone()[0])


async def http(port: int, body: dict, headers: dict[str, str], *, until: bytes | None = None) -> tuple[dict, bytes]:
    """One request on its own connection; reads the whole body, or an SSE body until ``until``."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    payload = json.dumps(body).encode()
    head = [
        "POST /mcp HTTP/1.1",
        f"Host: 127.0.0.1:{port}",
        "Content-Type: application/json",
        "Accept: application/json, text/event-stream",
        f"Content-Length: {len(payload)}",
        "Connection: close",
        *[f"{k}: {v}" for k, v in headers.items()],
    ]
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + payload)
    await writer.drain()
    raw = await reader.readuntil(b"\r\n\r\n")
    response_headers = {}
    for line in raw.decode().split("\r\n")[1:]:
        if ":" in line:
            key, _, value = line.partition(":")
            response_headers[key.strip().lower()] = value.strip()
    data = b""
    while True:
        chunk = await reader.read(65536)
        if not chunk:
            break
        data += chunk
        if until is not None and until in data:
            break
    writer.close()
    return response_headers, data


def json_of(data: bytes) -> dict:
    text = data.decode()
    start = text.find("{")
    return json.loads(text[start : text.rfind("}") + 1])


MODERN_HEADERS = {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "confirm_echo"}
ASKED: list[tuple[str, str]] = []
"""``(inputRequests key, requestState handle)`` of each 2026-07-28 question asked, to answer later."""


def modern_call(**extra: object) -> dict[str, object]:
    params = {"name": "confirm_echo", "arguments": {"text": "wait"}, "_meta": META, **extra}
    return {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}


async def ask_modern(port: int) -> None:
    _, data = await http(port, modern_call(), MODERN_HEADERS)
    result = json_of(data)["result"]
    assert result["resultType"] == "input_required", data[:200]
    (key,) = result["inputRequests"]
    ASKED.append((key, result["requestState"]))


async def answer_latencies(port: int, count: int = 200, concurrency: int = 8) -> list[float]:
    """Answer ``count`` of the waiting 2026-07-28 questions (the retry with the answer and the
    handle) while the others keep waiting: each must find its own row, not walk the backlog."""
    latencies: list[float] = []

    async def one(_port: int) -> None:
        key, handle = ASKED.pop(0)
        answer = {key: {"action": "accept", "content": {"ok": True}}}
        started = time.perf_counter()
        _, data = await http(port, modern_call(inputResponses=answer, requestState=handle), MODERN_HEADERS)
        assert json_of(data)["result"]["content"][0]["text"] == "echo: wait", data[:200]
        latencies.append((time.perf_counter() - started) * 1000)

    await run_many(one, port, count, concurrency)
    return latencies


async def ask_legacy(port: int) -> None:
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {"elicitation": {}},
            "clientInfo": {"name": "pending", "version": "0"},
        },
    }
    response_headers, _ = await http(port, init, {})
    session = response_headers["mcp-session-id"]
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "confirm_echo", "arguments": {"text": "w"}},
    }
    headers = {"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"}
    # The client reads the question and goes to ask its human: it closes the connection.
    _, data = await http(port, call, headers, until=b"elicitation/create")
    assert b"elicitation/create" in data, data[:300]


async def run_many(fn, port: int, count: int, concurrency: int = 32) -> float:
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(count):
        queue.put_nowait(i)

    async def worker() -> None:
        while not queue.empty():
            queue.get_nowait()
            await fn(port)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - started


async def echo_latencies(port: int, count: int = 200, concurrency: int = 8) -> list[float]:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "hi"}, "_meta": META},
    }
    headers = {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "echo"}
    latencies: list[float] = []

    async def one(_port: int) -> None:
        started = time.perf_counter()
        _, data = await http(port, body, headers)
        assert json_of(data)["result"]["content"][0]["text"] == "echo: hi"
        latencies.append((time.perf_counter() - started) * 1000)

    await run_many(one, port, count, concurrency)
    return latencies


def measure(framework: str, wire: str, count: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="mcp-pending-") as tmp:
        server = Server(framework, Path(tmp))
        try:
            ask = ask_modern if wire == "modern" else ask_legacy
            asyncio.run(run_many(ask, server.port, 300))
            asyncio.run(echo_latencies(server.port))
            time.sleep(3)
            worker = server.worker
            before_rss = rss_kib(worker)
            before_threads = int(proc_status(worker)["Threads"])
            before_rows = server.pending_rows()
            idle = asyncio.run(echo_latencies(server.port))
            seconds = asyncio.run(run_many(ask, server.port, count))
            time.sleep(3)  # legacy: let the last responses detach
            after_rss = rss_kib(worker)
            # What the waiting costs the worker while nothing else happens (legacy: its poll for
            # answers given to other workers, one query per round for all waiting tools).
            cpu_before, started = cpu_seconds(worker), time.monotonic()
            time.sleep(10)
            waiting_cpu = 100 * (cpu_seconds(worker) - cpu_before) / (time.monotonic() - started)
            busy = asyncio.run(echo_latencies(server.port))
            rows = server.pending_rows() - before_rows
            answered: dict[str, object] = {}
            if wire == "modern":
                ASKED[:] = ASKED[-count:]  # the questions still waiting (not the warm-up's)
                answers = asyncio.run(answer_latencies(server.port))
                answered = {"answer_p50_with_pending_ms": statistics.median(answers), "answer_max_ms": max(answers)}
            return {
                "framework": framework,
                "wire": wire,
                "pending": count,
                "rows": rows,
                "ask_rate_per_s": count / seconds,
                "rss_before_mib": before_rss / 1024,
                "rss_after_mib": after_rss / 1024,
                "kib_per_pending": (after_rss - before_rss) / count,
                "threads_before": before_threads,
                "threads_after": int(proc_status(worker)["Threads"]),
                "echo_p50_idle_ms": statistics.median(idle),
                "echo_p50_with_pending_ms": statistics.median(busy),
                "echo_max_with_pending_ms": max(busy),
                "worker_cpu_pct_while_waiting": waiting_cpu,
                **answered,
            }
        finally:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=10000)
    parser.add_argument("--framework", default="django", choices=["django", "flask"])
    parser.add_argument("--wire", default="modern,legacy")
    args = parser.parse_args()
    results = [measure(args.framework, wire, args.count) for wire in args.wire.split(",")]
    print(
        f"{'wire':8} {'pending':>8} {'rows':>6} {'KiB/pending':>12} {'RSS MiB':>15} {'threads':>9} "
        f"{'echo p50 idle':>14} {'with pending':>13} {'max':>7} {'CPU waiting':>12}"
    )
    for r in results:
        rss = f"{r['rss_before_mib']:.1f}->{r['rss_after_mib']:.1f}"
        threads = f"{r['threads_before']}->{r['threads_after']}"
        print(
            f"{r['wire']:8} {r['pending']:>8} {r['rows']:>6} {r['kib_per_pending']:>12.2f} {rss:>15} {threads:>9} "
            f"{r['echo_p50_idle_ms']:>11.1f} ms {r['echo_p50_with_pending_ms']:>10.1f} ms "
            f"{r['echo_max_with_pending_ms']:>5.0f} {r['worker_cpu_pct_while_waiting']:>10.1f} %"
        )
    for r in results:
        if "answer_p50_with_pending_ms" in r:
            print(
                f"{r['wire']}: answering 200 of the {r['pending']} waiting questions (retry with the handle), "
                f"p50 {r['answer_p50_with_pending_ms']:.1f} ms, max {r['answer_max_ms']:.0f} ms"
            )
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
