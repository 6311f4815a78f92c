"""Benchmark the MCP endpoints of Django and Flask against the SDK's own server and a bare view.

    python -m benchmarks.run --quick            # 1 worker, 8 clients, 3 rounds, everything
    python -m benchmarks.run --full             # 1 and 2 workers, 1/8/32 clients, 3 rounds
    python -m benchmarks.run --targets django-gunicorn,sdk-uvicorn --workloads modern-call

Every target is a real server process on 127.0.0.1 (a free port), started once per worker count
and kept running across rounds. Rounds are interleaved (round r: every workload and
concurrency, every target in turn), so that drift of the machine hits every target alike; the
table shows medians over rounds. Raw results go to ``benchmarks/results/<timestamp>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from benchmarks import loadgen

try:
    import psutil
except ImportError:  # pragma: no cover - run.sh installs it
    sys.exit("psutil is missing: pip install psutil (or run benchmarks/run.sh, which installs everything)")

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
HOST = "127.0.0.1"
WORKLOADS = loadgen.WORKLOADS
LEGACY_WORKLOADS = ("legacy-call", "legacy-elicit")
GEN_CPU_WARNING = 80.0


def _executable(name: str) -> str:
    candidate = Path(sys.executable).parent / name
    found = str(candidate) if candidate.exists() else shutil.which(name)
    if found is None:
        sys.exit(f"{name} is not installed: pip install -e '.[server]'")
    return found


def _gunicorn_extra() -> list[str]:
    """gunicorn >= 25 opens a control socket at a fixed path in $HOME; two masters would share it."""
    try:
        out = subprocess.run([_executable("gunicorn"), "--help"], capture_output=True, text=True, check=False).stdout
    except OSError:
        return []
    return ["--no-control-socket"] if "--no-control-socket" in out else []


@dataclass(frozen=True)
class TargetSpec:
    name: str
    framework: str
    """Whose bare view is this target's physical limit: ``django`` or ``flask``."""
    server: str
    app: str
    has_bare: bool
    env: dict[str, str] = field(default_factory=dict)
    sessions_in_memory: bool = False
    """Legacy sessions live in one process: with several workers legacy workloads are n/a."""

    def unsupported(self, workload: str, workers: int) -> str | None:
        """Why this target cannot serve ``workload`` (``None`` when it can)."""
        if workload == "bare" and not self.has_bare:
            return "no bare view"
        if self.sessions_in_memory and workers > 1 and workload in LEGACY_WORKLOADS:
            return "SDK legacy sessions are per process"
        return None

    def prepare(self, env: dict[str, str], log: Any) -> None:
        if self.framework == "django":
            command = [sys.executable, "-m", "django", "migrate", "--verbosity", "0", "--no-input"]
        elif self.framework == "flask":
            command = [sys.executable, "-m", "benchmarks.flask_bench"]
        else:
            return
        subprocess.run(command, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, check=True)

    def command(self, port: int, workers: int, threads: int, gunicorn_extra: list[str]) -> list[str]:
        if self.server == "gunicorn":
            return [
                _executable("gunicorn"),
                "-k",
                "gthread",
                "--threads",
                str(threads),
                "-w",
                str(workers),
                "--bind",
                f"{HOST}:{port}",
                "--log-level",
                "warning",
                *gunicorn_extra,
                self.app,
            ]
        return [
            _executable("uvicorn"),
            self.app,
            "--host",
            HOST,
            "--port",
            str(port),
            "--workers",
            str(workers),
            "--no-access-log",
            "--log-level",
            "warning",
        ]


DJANGO_ENV = {"DJANGO_SETTINGS_MODULE": "benchmarks.django_bench.settings"}
CHECKPOINTS_OFF = {"BENCH_SQLITE_CHECKPOINT_INTERVAL": "0"}
TARGETS: dict[str, TargetSpec] = {
    spec.name: spec
    for spec in (
        TargetSpec(
            "django-gunicorn", "django", "gunicorn", "benchmarks.django_bench.wsgi:application", True, DJANGO_ENV
        ),
        TargetSpec(
            "django-uvicorn",
            "django",
            "uvicorn",
            "benchmarks.django_bench.asgi:application",
            True,
            {**DJANGO_ENV, "BENCH_DJANGO_ASYNC": "1"},
        ),
        TargetSpec("flask-gunicorn", "flask", "gunicorn", "benchmarks.flask_bench:create_app()", True),
        TargetSpec("sdk-uvicorn", "sdk", "uvicorn", "benchmarks.sdk_app:app", False, sessions_in_memory=True),
        # Only when named: SQLite's checkpoints in commits, as without MCP's checkpoint thread.
        TargetSpec(
            "django-gunicorn-ckpt-off",
            "django",
            "gunicorn",
            "benchmarks.django_bench.wsgi:application",
            True,
            {**DJANGO_ENV, **CHECKPOINTS_OFF},
        ),
        TargetSpec(
            "flask-gunicorn-ckpt-off", "flask", "gunicorn", "benchmarks.flask_bench:create_app()", True, CHECKPOINTS_OFF
        ),
    )
}
DEFAULT_TARGETS = ["django-gunicorn", "django-uvicorn", "flask-gunicorn", "sdk-uvicorn"]
BARE_OF = {
    "django-gunicorn": "django-gunicorn",
    "django-uvicorn": "django-uvicorn",
    "flask-gunicorn": "flask-gunicorn",
    "sdk-uvicorn": "django-gunicorn",
    "django-gunicorn-ckpt-off": "django-gunicorn-ckpt-off",
    "flask-gunicorn-ckpt-off": "flask-gunicorn-ckpt-off",
}
"""Whose ``/bare`` each target is compared with: its own process's (Django under uvicorn: an
async view, what Django's ASGI handler costs by itself); the SDK: Django's under gunicorn."""


def target_label(spec: TargetSpec, threads: int, thread_counts: list[int]) -> str:
    """A target's name in the results: with several ``--threads`` counts, a gunicorn target
    runs once per count, as ``<name>/t<count>``."""
    if spec.server == "gunicorn" and len(thread_counts) > 1:
        return f"{spec.name}/t{threads}"
    return spec.name


def _bare_label(target: str, thread_counts: list[int]) -> str:
    name, _, suffix = target.partition("/")
    bare = BARE_OF[name]
    if suffix:  # a gunicorn target at one thread count: its own process's bare view
        return f"{bare}/{suffix}"
    if len(thread_counts) > 1 and TARGETS[bare].server == "gunicorn":
        return f"{bare}/t{thread_counts[0]}"
    return bare


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


class Server:
    """One target's server process (its own process group), with its own data folder."""

    def __init__(
        self,
        spec: TargetSpec,
        workers: int,
        threads: int,
        gunicorn_extra: list[str],
        logs: Path,
        database: str = "sqlite",
        label: str | None = None,
    ) -> None:
        self.spec = spec
        self.label = label or spec.name
        self.workers = workers
        self.database = database
        self.postgres_db: str | None = None
        self.port = free_port()
        self.data_dir = tempfile.mkdtemp(prefix=f"mcp-bench-{self.label.replace('/', '-')}-")
        self.log_path = logs / f"{self.label.replace('/', '-')}-w{workers}.log"
        self.command = spec.command(self.port, workers, threads, gunicorn_extra)
        self.process: subprocess.Popen[bytes] | None = None
        self._log: Any = None

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        env["BENCH_DATA_DIR"] = self.data_dir
        if self.postgres_db is not None:
            env["BENCH_POSTGRES_DB"] = self.postgres_db
        env.update(self.spec.env)
        for proxy in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
            env.pop(proxy, None)
        return env

    def start(self) -> None:
        self._log = open(self.log_path, "ab")  # noqa: SIM115 (closed in stop())
        if self.database == "postgres" and self.spec.framework in ("django", "flask"):
            self.postgres_db = f"mcp_bench_{self.label.replace('-', '_').replace('/', '_')}_{os.getpid()}"
            postgres_admin(f'DROP DATABASE IF EXISTS "{self.postgres_db}"', f'CREATE DATABASE "{self.postgres_db}"')
        env = self.env()
        self.spec.prepare(env, self._log)
        self.process = subprocess.Popen(
            self.command, cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self._wait_ready()

    def _wait_ready(self, timeout: float = 60.0) -> None:
        assert self.process is not None
        target = loadgen.Target(HOST, self.port, "/mcp")
        data = target.request(loadgen.modern_body("echo"), loadgen.modern_headers("echo"))
        deadline = time.monotonic() + timeout

        async def probe() -> bool:
            conn = target.connection()
            try:
                response = await asyncio.wait_for(conn.request(data), 10)
                loadgen.check_echo(response, 1)
                return True
            except (TimeoutError, OSError, loadgen.Closed, loadgen.ProtocolError, ValueError):
                return False
            finally:
                conn.close()

        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.label} exited with {self.process.returncode}; see {self.log_path}")
            # Several successes in a row: every worker has booted, or nearly.
            if all(asyncio.run(probe()) for _ in range(3 * self.workers)):
                time.sleep(0.5)
                return
            time.sleep(0.2)
        raise RuntimeError(f"{self.label} did not answer within {timeout:.0f} s; see {self.log_path}")

    def processes(self) -> list[psutil.Process]:
        if self.process is None:
            return []
        try:
            root = psutil.Process(self.process.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def cpu_seconds(self) -> float:
        total = 0.0
        for proc in self.processes():
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                times = proc.cpu_times()
                total += times.user + times.system
        return total

    def rss_mib(self) -> float:
        total = 0
        for proc in self.processes():
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                total += proc.memory_info().rss
        return total / (1024 * 1024)

    def stop(self) -> None:
        try:
            if self.process is not None and self.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGTERM)
                try:
                    self.process.wait(15)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(self.process.pid, signal.SIGKILL)
                    self.process.wait(5)
            # Workers left behind by a master that died first: same process group.
            if self.process is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.process.pid, signal.SIGKILL)
        finally:
            if self._log is not None:
                self._log.close()
            shutil.rmtree(self.data_dir, ignore_errors=True)
            if self.postgres_db is not None:
                with contextlib.suppress(Exception):
                    postgres_admin(f'DROP DATABASE IF EXISTS "{self.postgres_db}" WITH (FORCE)')


def postgres_admin(*statements: str) -> None:
    """Run statements outside a transaction on the machine's PostgreSQL (``BENCH_POSTGRES_*``)."""
    import psycopg

    with psycopg.connect(
        host=os.environ.get("BENCH_POSTGRES_HOST", "127.0.0.1"),
        port=int(os.environ.get("BENCH_POSTGRES_PORT", "5432")),
        user=os.environ.get("BENCH_POSTGRES_USER", "postgres"),
        dbname=os.environ.get("BENCH_POSTGRES_ADMIN_DB", "postgres"),
        autocommit=True,
    ) as conn:
        for statement in statements:
            conn.execute(statement)


@contextlib.contextmanager
def running(servers: list[Server]) -> Iterator[list[Server]]:
    try:
        for server in servers:
            print(f"  starting {server.label} ({server.workers} worker(s)) on port {server.port}", file=sys.stderr)
            server.start()
        yield servers
    finally:
        for server in servers:
            server.stop()


def schedule(
    workloads: list[str], concurrencies: list[int], servers: list[Any], round_: int
) -> list[tuple[str, int, Any]]:
    """The cells of one round, in the order they run: ``(workload, concurrency, server)``.

    Every (workload, concurrency) runs on every server in turn, so that a ratio to the SDK
    compares cells measured seconds apart. Concurrency by concurrency, the bare view runs right
    after the 2026-07-28 call (its reference) instead of last, and every other round runs the
    servers in reverse order: a machine that speeds up or slows down during a round moves both
    sides of a ratio alike.
    """
    ordered = [w for w in workloads if w != "bare"]
    if "bare" in workloads:
        ordered.insert(ordered.index("modern-call") + 1 if "modern-call" in ordered else len(ordered), "bare")
    turn = servers if round_ % 2 else servers[::-1]
    return [(workload, concurrency, server) for concurrency in concurrencies for workload in ordered for server in turn]


def run_cell(server: Server, workload: str, concurrency: int, args: argparse.Namespace) -> dict[str, Any]:
    marks: dict[str, float] = {}

    def start() -> None:
        marks["cpu0"] = server.cpu_seconds()

    def end() -> None:
        marks["cpu1"] = server.cpu_seconds()

    path = "/bare" if workload == "bare" else "/mcp"
    result = asyncio.run(
        loadgen.run_cell(
            HOST,
            server.port,
            path,
            workload,
            concurrency,
            warmup=args.warmup,
            duration=args.duration,
            on_measure_start=start,
            on_measure_end=end,
            honor_retry=not args.no_retry_wait,
        )
    )
    cell = result.as_dict()
    cpu = marks.get("cpu1", 0.0) - marks.get("cpu0", 0.0)
    cell["server_cpu_s"] = cpu
    cell["server_cpu_ms_per_op"] = 1000 * cpu / result.requests if result.requests else None
    cell["server_cpu_pct"] = 100 * cpu / result.duration
    cell["rss_mib"] = server.rss_mib()
    if server.process is not None and server.process.poll() is not None:
        raise RuntimeError(f"{server.label} died during {workload}; see {server.log_path}")
    return cell


# -- summary ------------------------------------------------------------------------------------


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def summarize(cells: list[dict[str, Any]], thread_counts: list[int] | None = None) -> list[dict[str, Any]]:
    """One row per (workload, concurrency, workers, target): medians over rounds, and the
    medians of the per-round ratios to the framework's bare view (at the same thread count)
    and to the SDK."""
    thread_counts = thread_counts or [8]
    by_key: dict[tuple[Any, ...], dict[str, Any]] = {}
    for cell in cells:
        key = (cell["workload"], cell["concurrency"], cell["workers"], cell["target"], cell["round"])
        by_key[key] = cell

    def rps(workload: str, concurrency: int, workers: int, target: str, round_: int) -> float | None:
        cell = by_key.get((workload, concurrency, workers, target, round_))
        if cell is None or cell.get("na") or not cell["requests"]:
            return None
        return float(cell["rps"])

    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for cell in cells:
        groups.setdefault((cell["workload"], cell["concurrency"], cell["workers"], cell["target"]), []).append(cell)
    rows = []
    for (workload, concurrency, workers, target), group in groups.items():
        row: dict[str, Any] = {
            "workload": workload,
            "concurrency": concurrency,
            "workers": workers,
            "target": target,
            "rounds": len(group),
        }
        na = [c["na"] for c in group if c.get("na")]
        if na:
            row["na"] = na[0]
            rows.append(row)
            continue
        vs_bare, vs_sdk = [], []
        for cell in group:
            mine = rps(workload, concurrency, workers, target, cell["round"])
            bare = rps("bare", concurrency, workers, _bare_label(target, thread_counts), cell["round"])
            sdk = rps(workload, concurrency, workers, "sdk-uvicorn", cell["round"])
            if workload != "bare" and mine is not None and bare:
                vs_bare.append(mine / bare)
            if target != "sdk-uvicorn" and mine is not None and sdk:
                vs_sdk.append(mine / sdk)
        row.update(
            rps=_median([c["rps"] for c in group]),
            p50_ms=_median([c["p50_ms"] for c in group]),
            p99_ms=_median([c["p99_ms"] for c in group]),
            errors=sum(c["errors"] for c in group),
            requests=sum(c["requests"] for c in group),
            resumes=sum(c["resumes"] for c in group),
            server_cpu_ms_per_op=_median([c["server_cpu_ms_per_op"] for c in group]),
            rss_mib=_median([c["rss_mib"] for c in group]),
            gen_cpu_pct=max(c["gen_cpu_pct"] for c in group),
            vs_bare=_median(vs_bare),  # type: ignore[arg-type]
            vs_sdk=_median(vs_sdk),  # type: ignore[arg-type]
            error_samples=sorted({s for c in group for s in c["error_samples"]})[:3],
        )
        rows.append(row)
    order = {w: i for i, w in enumerate(WORKLOADS)}
    targets = list(TARGETS)

    def place(target: str) -> tuple[int, int]:
        name, _, suffix = target.partition("/")
        return targets.index(name), int(suffix[1:]) if suffix else 0

    rows.sort(key=lambda r: (r["workers"], order[r["workload"]], r["concurrency"], place(r["target"])))
    return rows


def _fmt(value: float | None, digits: int = 1, width: int = 8) -> str:
    if value is None:
        return "-".rjust(width)
    return f"{value:{width}.{digits}f}"


def table(rows: list[dict[str, Any]]) -> str:
    header = (
        f"{'workload':<14}{'C':>4}{'W':>3}  {'target':<19}{'rps':>9}{'p50 ms':>9}{'p99 ms':>9}{'errors':>7}"
        f"{'CPU ms/op':>10}{'RSS MiB':>9}{'gen CPU%':>9}{'x bare':>8}{'x sdk':>7}{'resumed':>8}"
    )
    lines = [header, "-" * len(header)]
    previous = None
    for row in rows:
        group = (row["workers"], row["workload"], row["concurrency"])
        if previous is not None and group != previous:
            lines.append("")
        previous = group
        start = f"{row['workload']:<14}{row['concurrency']:>4}{row['workers']:>3}  {row['target']:<19}"
        if "na" in row:
            lines.append(f"{start}{'n/a':>9}  ({row['na']})")
            continue
        warn = "!" if row["gen_cpu_pct"] > GEN_CPU_WARNING else " "
        lines.append(
            f"{start}{_fmt(row['rps'], 1, 9)}{_fmt(row['p50_ms'], 2, 9)}{_fmt(row['p99_ms'], 2, 9)}"
            f"{row['errors']:>7}{_fmt(row['server_cpu_ms_per_op'], 2, 10)}{_fmt(row['rss_mib'], 1, 9)}"
            f"{_fmt(row['gen_cpu_pct'], 0, 8)}{warn}{_fmt(row['vs_bare'], 2, 8)}{_fmt(row['vs_sdk'], 2, 7)}"
            f"{row['resumes']:>8}"
        )
    return "\n".join(lines)


def notes(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    busy = [r for r in rows if "na" not in r and r["gen_cpu_pct"] > GEN_CPU_WARNING]
    if busy:
        out.append(
            f"WARNING: the load generator used more than {GEN_CPU_WARNING:.0f} % of a core in {len(busy)} row(s) "
            "(marked !): those numbers may be limited by the generator, not the server."
        )
    for row in rows:
        if "na" not in row and not row["requests"] and not row["errors"]:
            where = f"{row['workload']} C={row['concurrency']} W={row['workers']} {row['target']}"
            out.append(f"{where}: no operation ended inside the window (one takes longer than --duration?)")
        if "na" not in row and row["errors"]:
            where = f"{row['workload']} C={row['concurrency']} W={row['workers']} {row['target']}"
            out.append(f"errors in {where}: {row['errors']}; e.g. {'; '.join(row['error_samples']) or '?'}")
    return out


def environment(args: argparse.Namespace) -> dict[str, Any]:
    versions = {}
    for package in ("mcp", "Django", "Flask", "gunicorn", "uvicorn", "SQLAlchemy"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions[package] = metadata.version(package)
    try:
        commit = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
        ).stdout.strip()
        dirty = bool(
            subprocess.run(
                ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                capture_output=True,
                text=True,
                check=False,
            ).stdout.strip()
        )
    except OSError:
        commit, dirty = "", False
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "packages": versions,
        "git": commit + ("+dirty" if dirty else ""),
        "args": vars(args),
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="1 worker, 8 clients, 3 rounds (the default)")
    mode.add_argument("--full", action="store_true", help="1 and 2 workers, 1/8/32 clients, 3 rounds")
    parser.add_argument("--duration", type=float, default=5.0, help="measured seconds per cell (default 5)")
    parser.add_argument("--warmup", type=float, default=1.0, help="warm-up seconds per cell (default 1)")
    parser.add_argument("--rounds", type=int, help="rounds (default 3)")
    parser.add_argument("--targets", help=f"comma-separated, of: {', '.join(TARGETS)}")
    parser.add_argument("--workloads", help=f"comma-separated, of: {', '.join(WORKLOADS)}")
    parser.add_argument("--concurrency", help="comma-separated virtual clients per cell (overrides the mode)")
    parser.add_argument("--workers", help="comma-separated worker counts (overrides the mode)")
    parser.add_argument(
        "--threads",
        help="comma-separated threads per gunicorn gthread worker (default 8); with several, each "
        "gunicorn target runs once per count (named <target>/t<count>), in the same rounds",
    )
    parser.add_argument(
        "--no-retry-wait",
        action="store_true",
        help="resume a server-ended SSE stream at once instead of after its retry: hint (server cost only)",
    )
    parser.add_argument(
        "--database",
        choices=("sqlite", "postgres"),
        default="sqlite",
        help="where Django and Flask keep their rows: a SQLite file per target (default), or a "
        "database per target on the PostgreSQL server at 127.0.0.1:5432 (BENCH_POSTGRES_*)",
    )
    parser.add_argument("--output", type=Path, help="JSON results file (default benchmarks/results/<timestamp>.json)")
    args = parser.parse_args(argv)

    def listed(value: str | None, allowed: Any, default: list[Any], kind: type = str) -> list[Any]:
        if not value:
            return default
        items = [kind(v.strip()) for v in value.split(",") if v.strip()]
        bad = [v for v in items if allowed is not None and v not in allowed]
        if bad:
            parser.error(f"unknown: {', '.join(map(str, bad))} (choose from {', '.join(allowed)})")
        return items

    args.target_list = listed(args.targets, TARGETS, DEFAULT_TARGETS)
    args.workload_list = listed(args.workloads, WORKLOADS, list(WORKLOADS))
    args.concurrency_list = listed(args.concurrency, None, [1, 8, 32] if args.full else [8], int)
    args.workers_list = listed(args.workers, None, [1, 2] if args.full else [1], int)
    args.threads_list = listed(args.threads, None, [8], int)
    args.rounds = args.rounds or 3
    if args.rounds < 1 or args.duration <= 0 or args.warmup < 0:
        parser.error("--rounds must be >= 1, --duration > 0, --warmup >= 0")
    if min(args.concurrency_list) < 1 or min(args.workers_list) < 1 or min(args.threads_list) < 1:
        parser.error("concurrency, workers and threads must be >= 1")
    return args


def _terminate(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # Servers are stopped in ``finally`` blocks: make SIGTERM/SIGHUP (and SIGINT, even when
    # started in the background with it ignored) unwind the stack instead of killing outright.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGHUP, _terminate)
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    output = args.output or RESULTS / f"{stamp}.json"
    logs = Path(tempfile.mkdtemp(prefix="mcp-bench-logs-"))
    gunicorn_extra = _gunicorn_extra()
    specs = [TARGETS[name] for name in args.target_list]
    print(
        f"MCP benchmark: targets {', '.join(args.target_list)}; workloads {', '.join(args.workload_list)}; "
        f"clients {args.concurrency_list}; workers {args.workers_list}; {args.database}; {args.rounds} round(s) of "
        f"{args.warmup:g} s warm-up + {args.duration:g} s; server logs in {logs}",
        file=sys.stderr,
    )
    cells: list[dict[str, Any]] = []
    started = time.monotonic()
    # A gunicorn target once per thread count (interleaved in every round), the others once.
    variants = [
        (spec, threads) for spec in specs for threads in args.threads_list[: None if spec.server == "gunicorn" else 1]
    ]
    for workers in args.workers_list:
        servers = [
            Server(
                spec,
                workers,
                threads,
                gunicorn_extra,
                logs,
                args.database,
                target_label(spec, threads, args.threads_list),
            )
            for spec, threads in variants
        ]
        with running(servers):
            for round_ in range(1, args.rounds + 1):
                for workload, concurrency, server in schedule(
                    args.workload_list, args.concurrency_list, servers, round_
                ):
                    base = {
                        "round": round_,
                        "workload": workload,
                        "concurrency": concurrency,
                        "workers": workers,
                        "target": server.label,
                    }
                    reason = server.spec.unsupported(workload, workers)
                    if reason == "no bare view":
                        continue
                    if reason is not None:
                        cells.append({**base, "na": reason})
                        continue
                    cell = {**base, **run_cell(server, workload, concurrency, args)}
                    cells.append(cell)
                    print(
                        f"  r{round_} W{workers} {workload:<13} C={concurrency:<3} {server.label:<19} "
                        f"{cell['rps']:9.1f}/s  p50 {_fmt(cell['p50_ms'], 2, 0)} ms  errors {cell['errors']}  "
                        f"gen CPU {cell['gen_cpu_pct']:.0f} %",
                        file=sys.stderr,
                    )
    rows = summarize(cells, args.threads_list)
    report = {
        "started": stamp,
        "seconds": time.monotonic() - started,
        "environment": environment(args),
        "summary": rows,
        "cells": cells,
    }
    output.write_text(json.dumps(report, indent=2, default=str))
    print()
    print(
        f"MCP endpoints, medians of {args.rounds} round(s) x {args.duration:g} s, "
        f"{os.cpu_count()} CPUs, gunicorn gthread {'/'.join(map(str, args.threads_list))} threads/worker, "
        f"{args.database}" + ("; streams resumed without waiting for retry:" if args.no_retry_wait else "")
    )
    print(table(rows))
    for line in notes(rows):
        print(line)
    print(f"\nraw results: {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
