"""Server instructions per operation, counted by valgrind's callgrind.

    python -m benchmarks.instructions                       # Django, Flask, the SDK; four workloads
    python -m benchmarks.instructions --ops 100 --rounds 2 --targets django-gunicorn,sdk-uvicorn

Requests per second move with whatever else the machine is doing; the number of instructions a
server executes to answer a request does not. Each target of ``benchmarks.run`` is started
under callgrind with counting off; for each workload the generator warms the server up, the
serving process is told (``/__callgrind__/...``, see ``callgrind_apps.py``) to start counting
from zero, exactly ``--ops`` operations are sent one after the other (one client, keep-alive),
and the count is dumped. Everything that process executes in user space in that window counts:
the HTTP server (gunicorn or uvicorn), the framework, this project or the SDK, SQLite, and the
timers that fired meanwhile. The kernel's share (sockets, file writes) does not count.

The table's ratios read like those of ``benchmarks.run``: ``x bare`` is the bare view's count
divided by the target's (1.0: the endpoint costs what the bare view costs), ``x sdk`` the SDK's
count divided by the target's (above 1.0: fewer instructions than the SDK's server). A
CPU-bound server's requests per second follow the inverse of its instructions per request when
instructions per cycle are alike; this is the cost side of the rps targets, without the noise,
and not a replacement for them: waiting, contention and the kernel's work show only there.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import loadgen
from benchmarks.run import BARE_OF, HOST, TARGETS, Server, TargetSpec, _gunicorn_extra

WORKLOADS = ("modern-call", "bare", "modern-elicit", "legacy-call")
DEFAULT_TARGETS = ("django-gunicorn", "flask-gunicorn", "sdk-uvicorn")
"""Django under uvicorn is left out: its ASGI handler is not the path the targets are about."""


CALLGRIND_APPS = {
    "django-gunicorn": "benchmarks.callgrind_apps:django_wsgi()",
    "flask-gunicorn": "benchmarks.callgrind_apps:flask_wsgi()",
    "sdk-uvicorn": "benchmarks.callgrind_apps:sdk_asgi",
}


def build_control_library(folder: Path) -> Path:
    """``callgrind_ctl.c`` compiled: callgrind's client requests, for ctypes."""
    library = folder / "callgrind_ctl.so"
    source = Path(__file__).with_name("callgrind_ctl.c")
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    return library


class CallgrindServer(Server):
    """A target's server under ``valgrind --tool=callgrind``, counting only when told to (by
    requests to ``/__callgrind__/...``, which reach the serving process, forked or not)."""

    def __init__(self, spec: TargetSpec, out_dir: Path, logs: Path, library: Path) -> None:
        super().__init__(spec, 1, 4, _gunicorn_extra(), logs)
        self.out_dir = out_dir
        self.library = library
        command = list(self.command)
        # The interpreter itself, not a console script: valgrind follows no exec by default.
        command[0:1] = [sys.executable, "-m", Path(command[0]).name]
        command[command.index(spec.app)] = CALLGRIND_APPS[spec.name]
        if spec.server == "gunicorn":
            command[3:3] = ["--timeout", "900"]  # a worker booting under valgrind is slow
        else:
            command.append("--factory")
        self.command = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={out_dir / 'callgrind.%p'}",
            *command,
        ]

    def env(self) -> dict[str, str]:
        env = super().env()
        env["BENCH_CALLGRIND_LIB"] = str(self.library)
        return env

    def _wait_ready(self, timeout: float = 600.0) -> None:
        super()._wait_ready(timeout)

    def control(self, op: str) -> None:
        async def post() -> None:
            conn = loadgen.HTTPConnection(HOST, self.port)
            try:
                data = loadgen.build_request(HOST, self.port, f"/__callgrind__/{op}", b"", {})
                response = await asyncio.wait_for(conn.request(data), 300)
                if response.status != 204:
                    raise RuntimeError(f"callgrind {op}: HTTP {response.status}")
            finally:
                conn.close()

        asyncio.run(post())

    def dumped(self, since: float) -> int:
        """The instructions in the dumps written after ``since``."""
        total = 0
        for path in self.out_dir.glob("callgrind.*.*"):
            if path.stat().st_mtime < since:
                continue
            for line in path.read_text(errors="replace").splitlines():
                if line.startswith("totals:"):
                    total += int(line.split()[1])
                    break
        return total

    def count(self, action: Any) -> int:
        """Instructions the server executes while ``action()`` runs (control requests aside)."""
        self.control("start")
        try:
            self.control("zero")
            action()
            since = time.time() - 0.01
            self.control("dump")
        finally:
            self.control("stop")
        return self.dumped(since)


async def _operations(port: int, workload: str, count: int) -> None:
    target = loadgen.Target(HOST, port, "/bare" if workload == "bare" else "/mcp", honor_retry=False)
    stats = loadgen.Stats(recording=True)
    client = loadgen.CLIENTS[workload](target, stats)
    try:
        await client.setup()
        for _ in range(count):
            await client.once()  # checks the answer
            if stats.errors:
                raise RuntimeError(f"{workload}: {stats.error_samples}")
    finally:
        await client.teardown()
        client.close()


def measure(server: CallgrindServer, workload: str, ops: int, warmup: int) -> float:
    """Instructions per operation of ``workload``: ``ops`` operations counted, less what the
    control requests themselves count (the same zero and dump with no operation between)."""
    asyncio.run(_operations(server.port, workload, warmup))
    baseline = server.count(lambda: None)
    total = server.count(lambda: asyncio.run(_operations(server.port, workload, ops)))
    return (total - baseline) / ops


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--targets", default=",".join(DEFAULT_TARGETS))
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--ops", type=int, default=100, help="operations counted per cell (100)")
    parser.add_argument("--warmup", type=int, default=20, help="operations before counting (20)")
    parser.add_argument("--rounds", type=int, default=2, help="counts per cell; the table shows medians (2)")
    parser.add_argument("--output", help="raw results as JSON")
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None or shutil.which("cc") is None:
        sys.exit("valgrind and a C compiler are needed (Debian: apt-get install valgrind gcc)")
    unknown = [name for name in args.targets.split(",") if name not in CALLGRIND_APPS]
    if unknown:
        sys.exit(f"unknown or unsupported target(s) {', '.join(unknown)}; choose from {', '.join(CALLGRIND_APPS)}")
    targets = [TARGETS[name] for name in args.targets.split(",")]
    workloads = args.workloads.split(",")
    logs = Path(tempfile.mkdtemp(prefix="mcp-instructions-"))
    print(f"callgrind outputs and server logs in {logs}", file=sys.stderr)
    library = build_control_library(logs)
    counts: dict[tuple[str, str], list[float]] = {}
    for spec in targets:
        out_dir = logs / spec.name
        out_dir.mkdir()
        server = CallgrindServer(spec, out_dir, logs, library)
        print(f"  starting {spec.name} under callgrind", file=sys.stderr)
        try:
            server.start()
            for round_ in range(args.rounds):
                for workload in workloads:
                    if spec.unsupported(workload, 1):
                        continue
                    per_op = measure(server, workload, args.ops, args.warmup)
                    counts.setdefault((workload, spec.name), []).append(per_op)
                    line = f"  r{round_ + 1} {workload:14s} {spec.name:16s} {per_op:12,.0f} instructions/op"
                    print(line, file=sys.stderr, flush=True)
        finally:
            server.stop()

    def median(workload: str, target: str) -> float | None:
        values = counts.get((workload, target))
        return statistics.median(values) if values else None

    header = f"{'workload':15s} {'target':16s} {'instr/op':>12s} {'spread':>7s} {'x bare':>7s} {'x sdk':>7s}"
    print(header)
    print("-" * len(header))
    rows = []
    for workload in workloads:
        for spec in targets:
            value = median(workload, spec.name)
            if value is None:
                continue
            values = counts[(workload, spec.name)]
            spread = (max(values) - min(values)) / value if len(values) > 1 else 0.0
            bare = median("bare", BARE_OF[spec.name]) if workload != "bare" else None
            sdk = median(workload, "sdk-uvicorn") if spec.name != "sdk-uvicorn" else None
            x_bare, x_sdk = _ratio(bare, value), _ratio(sdk, value)
            rows.append(
                {"workload": workload, "target": spec.name, "instructions": values, "x_bare": x_bare, "x_sdk": x_sdk}
            )
            print(
                f"{workload:15s} {spec.name:16s} {value:12,.0f} {spread:6.1%} "
                f"{'' if x_bare is None else f'{x_bare:.2f}':>7s} {'' if x_sdk is None else f'{x_sdk:.2f}':>7s}"
            )
        print()
    if args.output:
        Path(args.output).write_text(json.dumps({"ops": args.ops, "rounds": args.rounds, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
