"""The wheel a user installs: built from the tracked files, offline, with the build backend the
project declares. Everything under the three packages ships (migrations, the Alembic script
template, the management command, ``py.typed``); nothing else does (the example project, tests,
benchmarks)."""

from __future__ import annotations

import email
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("mcp_common", "mcp_django", "mcp_flask")


def tracked_files() -> list[str]:
    """The repository's files as a fresh clone has them (no build/, .venv, caches)."""
    if shutil.which("git") and (ROOT / ".git").exists():
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
        return [name for name in out.stdout.decode().split("\0") if name and (ROOT / name).is_file()]
    skip = {".git", ".venv", ".venv-django6", ".cache", "build", "dist", "__pycache__", "node_modules"}
    return [
        str(path.relative_to(ROOT))
        for path in ROOT.rglob("*")
        if path.is_file() and not skip & set(path.relative_to(ROOT).parts) and not path.name.endswith(".egg-info")
    ]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[zipfile.ZipFile]:
    source = tmp_path_factory.mktemp("source")
    for name in tracked_files():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    dist = tmp_path_factory.mktemp("dist")
    # Offline and without build isolation: the backend is the one installed here (the dev extra
    # brings it), and --check-build-dependencies holds it to [build-system].requires.
    out = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-index", "--no-build-isolation"),
            *("--check-build-dependencies", "--disable-pip-version-check", "-w", str(dist), str(source)),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    (built,) = dist.glob("*.whl")
    with zipfile.ZipFile(built) as archive:
        yield archive


def test_the_wheel_ships_every_file_of_the_packages(wheel: zipfile.ZipFile) -> None:
    shipped = set(wheel.namelist())
    wanted = {name for name in tracked_files() if name.split("/")[0] in PACKAGES}
    assert wanted - shipped == set()
    # What a user's `migrate`, `flask mcp migrate`, `mcp_purge` and type checker need, by name,
    # so that a package-data rule that stops matching cannot go unnoticed.
    for name in (
        "mcp_django/migrations/0001_initial.py",
        "mcp_django/management/commands/mcp_purge.py",
        "mcp_flask/migrations/env.py",
        "mcp_flask/migrations/script.py.mako",
        "mcp_flask/migrations/versions/0001_initial.py",
        "mcp_common/py.typed",
        "mcp_django/py.typed",
        "mcp_flask/py.typed",
    ):
        assert name in shipped


def test_the_wheel_installs_only_the_three_packages(wheel: zipfile.ZipFile) -> None:
    top = {name.split("/")[0] for name in wheel.namelist() if not name.split("/")[0].endswith(".dist-info")}
    assert top == set(PACKAGES)


def test_the_wheel_offers_the_extras_the_readme_installs(wheel: zipfile.ZipFile) -> None:
    (metadata,) = [name for name in wheel.namelist() if name.endswith(".dist-info/METADATA")]
    message = email.message_from_bytes(wheel.read(metadata))
    extras = set(message.get_all("Provides-Extra"))
    readme = (ROOT / "README.md").read_text()
    named = {
        extra
        for group in re.findall(r'pip install "mcp-django-flask\[([a-z,]+)\]"', readme)
        for extra in group.split(",")
    }
    assert {"django", "flask"} <= named, "the README says what a Django or a Flask project installs"
    assert named <= extras


def test_the_declared_build_backend_can_build_the_project() -> None:
    # A license given as an SPDX expression (PEP 639) is read by setuptools 77 and later; an
    # older one, which the lower bound allowed, fails the build on `project.license`.
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert isinstance(pyproject["project"]["license"], str)
    (setuptools,) = [req for req in pyproject["build-system"]["requires"] if req.startswith("setuptools")]
    minimum = re.fullmatch(r"setuptools>=(\d+)(?:\.\d+)*", setuptools.replace(" ", ""))
    assert minimum is not None and int(minimum.group(1)) >= 77, setuptools


def test_the_wheel_carries_the_license_it_declares(wheel: zipfile.ZipFile) -> None:
    # MIT asks that its text travel with every copy: a user's site-packages holds the wheel alone.
    (metadata,) = [name for name in wheel.namelist() if name.endswith(".dist-info/METADATA")]
    assert email.message_from_bytes(wheel.read(metadata))["License-Expression"] == "MIT"
    texts = [name for name in wheel.namelist() if re.search(r"\.dist-info/licenses/LICENSE$", name)]
    assert texts, "the license's text is in the wheel"
    assert b"Permission is hereby granted, free of charge" in wheel.read(texts[0])


def test_users_type_checkers_see_the_public_api_typed() -> None:
    """The wheel ships ``py.typed``, so a user's type checker reads the annotations: the
    README's code in ``tests/typing_check.py`` must pass ``mypy --strict`` (a public name typed
    ``Any``, a decorator that loses the view's signature, a parameter narrower than the values
    it takes all fail it), and each misuse there must be refused."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--follow-imports=silent",
            "--cache-dir=/dev/null",
            "tests/typing_check.py",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Success: no issues found in 1 source file" in done.stdout
