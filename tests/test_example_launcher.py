"""The example's launcher (``python -m example_project serve``): it migrates the database, then
becomes the server; ``--no-migrate`` serves a database migrated beforehand as it is (the test
servers' databases are copies of one migrated once, see ``tests/conftest.py``)."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from example_project import __main__ as launcher


@pytest.fixture
def launched(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[list[str]]]:
    """What the launcher ran (``subprocess.run``) and became (``os.execv``), with neither done."""
    seen: dict[str, list[list[str]]] = {"ran": [], "became": []}

    def run(command: list[str], **kwargs: Any) -> None:
        assert kwargs.get("check") is True  # a failed migration stops the launch
        seen["ran"].append(command)

    def execv(path: str, argv: list[str]) -> None:
        assert argv[0] == path
        seen["became"].append(argv)

    monkeypatch.setattr(launcher.subprocess, "run", run)
    monkeypatch.setattr(launcher.os, "execv", execv)
    # main() records the database and worker class for the server it becomes.
    for name in ("MCP_EXAMPLE_DATABASE_URL", "MCP_EXAMPLE_WORKER_CLASS", "DJANGO_SETTINGS_MODULE"):
        monkeypatch.delenv(name, raising=False)
    return seen


ARGS = ["serve", "--framework", "flask", "--server", "gunicorn", "--workers", "2", "--port", "8123"]


def test_serve_migrates_the_database_before_it_becomes_the_server(launched: dict[str, list[list[str]]]) -> None:
    launcher.main([*ARGS, "--database", "sqlite:////tmp/example.sqlite3"])
    assert launched["ran"] == [[sys.executable, "-m", "example_project", "migrate", "--framework", "flask"]]
    [server] = launched["became"]
    assert server[1:3] == ["example_project.flask_app.wsgi:app", "--bind"]
    assert server[3] == "127.0.0.1:8123" and server[server.index("--workers") + 1] == "2"


def test_no_migrate_serves_the_database_as_it_is(launched: dict[str, list[list[str]]]) -> None:
    launcher.main([*ARGS, "--database", "sqlite:////tmp/example.sqlite3", "--no-migrate"])
    assert launched["ran"] == []
    [server] = launched["became"]
    assert server[1] == "example_project.flask_app.wsgi:app"
