#!/usr/bin/env bash
# The demo, from a fresh clone: a venv, the project, then the example Django site on SQLite
# at http://127.0.0.1:8000/mcp (Ctrl-C to stop). Arguments go to the launcher, e.g.
#   scripts/demo.sh --framework flask      scripts/demo.sh --server gunicorn --workers 4
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${MCP_VENV:-.venv}
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e '.[django,flask,server]'
exec "$VENV/bin/python" -m example_project serve "$@"
