"""Headless Chromium for the browser tests: Debian's package, driven by Playwright (whose own
browser download is not used)."""

from __future__ import annotations

import os
from pathlib import Path

from tests.conftest import debian_binary


def chromium() -> str:
    """Debian's Chromium; outside CI a machine without it skips these tests, in CI it fails."""
    return debian_binary("chromium", "MCP_CHROMIUM", "Chromium")


def screenshots(tmp_path: Path) -> Path:
    """Where screenshots go: ``MCP_SCREENSHOTS`` when set (``scripts/test.sh`` keeps them in
    ``.cache/screenshots``), else the test's temporary folder."""
    shots = Path(os.environ.get("MCP_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    return shots
