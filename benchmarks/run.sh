#!/usr/bin/env bash
# One command: build benchmarks/.venv if needed (Python >= 3.11, the project with its Django,
# Flask and server extras, psutil), then run the benchmark. Arguments go to benchmarks.run:
#
#   bash benchmarks/run.sh --quick
#   bash benchmarks/run.sh --full
#   bash benchmarks/run.sh --targets django-gunicorn,sdk-uvicorn --workloads modern-call --duration 10
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=benchmarks/.venv
STAMP="$VENV/.bench-installed"

find_python() {
    for candidate in ${PYTHON:-} python3 python3.13 python3.12 python3.11; do
        if command -v "$candidate" >/dev/null 2>&1 &&
            "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            echo "$candidate"
            return 0
        fi
    done
    echo "benchmarks/run.sh: Python >= 3.11 is needed (set PYTHON=/path/to/python3.11+)" >&2
    return 1
}

# Reinstall when pyproject.toml or this script changes (new or bumped dependencies).
want="$(cat pyproject.toml benchmarks/run.sh | cksum)"
if [ ! -x "$VENV/bin/python" ] || [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$want" ]; then
    python="$(find_python)"
    echo "benchmarks/run.sh: building $VENV with $("$python" --version)" >&2
    "$python" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    "$VENV/bin/python" -m pip install --quiet -e '.[django,flask,server,postgres]' psutil
    echo "$want" > "$STAMP"
fi

export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec "$VENV/bin/python" -m benchmarks.run "$@"
