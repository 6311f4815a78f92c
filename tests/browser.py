"""Headless Chromium for the browser tests: Debian's package, driven by Playwright (whose own
browser download is not used)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest


def chromium() -> str:
    """Debian's Chromium; outside CI a machine without it skips these tests, in CI it fails."""
    for candidate in (os.environ.get("MCP_CHROMIUM"), shutil.which("chromium"), "/usr/bin/chromium"):
        if candidate and Path(candidate).exists():
            return candidate
    message = "Chromium is not installed (scripts/test.sh installs Debian's chromium package)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def screenshots(tmp_path: Path) -> Path:
    """Where screenshots go: ``MCP_SCREENSHOTS`` when set (``scripts/test.sh`` keeps them in
    ``.cache/screenshots``), else the test's temporary folder."""
    shots = Path(os.environ.get("MCP_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    return shots
