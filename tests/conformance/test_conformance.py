"""The official MCP conformance suite against the example apps, on real servers.

Both legs of ``@modelcontextprotocol/conformance`` 0.2.0-alpha.12 (the default wire, which
mixes legacy sessions and 2026 scenarios, and ``--spec-version 2026-07-28``), plus the legacy
leg of 0.1.16 as a second opinion. A scenario fails on any FAILURE check, and a vacuous pass
(nothing but the generic wire-schema check succeeded) counts as a failure. Only what
``expected_failures.txt`` lists may fail, and a listed scenario that passes fails the test
too (stale entry).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from scripts.conformance import load_expected_failures, run_suite
from tests.conftest import LiveServer

TARGETS = [("django", "gunicorn", "sqlite"), ("django", "uvicorn", "sqlite"), ("flask", "gunicorn", "postgres")]
RUNS = [("0.2.0-alpha.12", "default"), ("0.2.0-alpha.12", "2026"), ("0.1.16", "default")]

pytestmark = [pytest.mark.conformance, pytest.mark.slow]


@pytest.mark.parametrize(("version", "leg"), RUNS, ids=[f"{v}-{leg}" for v, leg in RUNS])
@pytest.mark.parametrize("target", TARGETS, ids=["-".join(t) for t in TARGETS])
def test_conformance(
    target: tuple[str, str, str],
    version: str,
    leg: str,
    example_server: Callable[..., LiveServer],
    tmp_path: Path,
) -> None:
    framework, server, database = target
    live = example_server(framework, server, 2, database)
    result = run_suite(live.url("/conformance"), leg=leg, version=version, out_dir=tmp_path / "out")
    assert result.unsupported is None, result.unsupported
    assert len(result.scenarios) >= 30, f"the suite ran only {len(result.scenarios)} scenarios:\n{result.log[-3000:]}"
    unexpected, stale = result.compare(load_expected_failures())
    details = "\n".join(f"{name}: {result.scenarios[name].problems[:3]}" for name in unexpected)
    assert not unexpected, f"{len(unexpected)} unexpected failure(s) ({framework}/{server}):\n{details}"
    assert not stale, f"expected failures that now pass (delete them from expected_failures.txt): {stale}"
    print(f"{framework}/{server} {version} {leg}: {len(result.passed)} passed of {len(result.scenarios)}")
