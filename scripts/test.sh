#!/usr/bin/env bash
# The whole test suite, from a fresh clone: services, venv, installs, Node for the conformance
# suite, then pytest. Extra arguments go to pytest (e.g. scripts/test.sh -k django -x).
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n== %s %s\n' "$(date +%T)" "$*"; }

# -- services this machine runs on localhost; start any that is down -------------------------
if command -v pg_isready >/dev/null 2>&1 && ! pg_isready -h 127.0.0.1 -p 5432 -q; then
  log "starting PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
  for _ in $(seq 1 30); do pg_isready -h 127.0.0.1 -p 5432 -q && break; sleep 1; done
fi
# The live tests run example servers side by side in two processes, and each gunicorn thread of
# a Django one keeps its connection (CONN_MAX_AGE, as production sets it): up to 95 at once were
# seen, at PostgreSQL's default limit of 100. A local cluster gets room for 300 (once; the
# setting persists); MCP_TEST_KEEP_PG_CONFIG=1 leaves it alone.
if [ -z "${MCP_TEST_KEEP_PG_CONFIG:-}" ] && [ -d /etc/postgresql ] && command -v psql >/dev/null 2>&1 \
  && pg_isready -h 127.0.0.1 -p 5432 -q; then
  limit=$(psql -h 127.0.0.1 -p 5432 -U postgres -d postgres -Atc "SHOW max_connections" 2>/dev/null || echo "")
  if [ -n "$limit" ] && [ "$limit" -lt 300 ]; then
    log "raising PostgreSQL's max_connections from $limit to 300 for the live tests"
    if psql -h 127.0.0.1 -p 5432 -U postgres -d postgres -qc "ALTER SYSTEM SET max_connections = 300"; then
      pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main restart || true
      for _ in $(seq 1 30); do pg_isready -h 127.0.0.1 -p 5432 -q && break; sleep 1; done
    fi
  fi
fi
if command -v redis-cli >/dev/null 2>&1 && ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  log "starting Redis"
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
fi
RABBITMQ=$(command -v rabbitmq-server || echo /usr/sbin/rabbitmq-server)
if [ -x "$RABBITMQ" ] && ! (echo > /dev/tcp/127.0.0.1/5672) 2>/dev/null; then
  log "starting RabbitMQ"
  "$RABBITMQ" -detached
  for _ in $(seq 1 60); do (echo > /dev/tcp/127.0.0.1/5672) 2>/dev/null && break; sleep 1; done
fi

# MariaDB (MySQL) for the store tests on it: the server, Django's time zone tables, and the
# C client library that the mysqlclient driver builds against. Skipped where there is no server.
MARIADB_URL=${MCP_TEST_MARIADB:-}
if [ -z "$MARIADB_URL" ] && [ -x /usr/sbin/mariadbd ]; then
  MARIADB_URL=mysql://root@127.0.0.1:3306
  if ! mariadb-admin -h 127.0.0.1 -P 3306 -u root --connect-timeout=2 ping >/dev/null 2>&1; then
    log "starting MariaDB"
    start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
    for _ in $(seq 1 30); do
      mariadb-admin -h 127.0.0.1 -P 3306 -u root --connect-timeout=2 ping >/dev/null 2>&1 && break
      sleep 1
    done
  fi
  # Django's time zone support on MySQL/MariaDB needs the server's time zone tables (the admin's
  # date drill-down converts to TIME_ZONE in SQL); a fresh server has them empty.
  if [ "$(mariadb -h 127.0.0.1 -u root -N -e 'SELECT COUNT(*) FROM mysql.time_zone_name' 2>/dev/null || echo 0)" = 0 ]; then
    log "loading MariaDB's time zone tables"
    mariadb-tzinfo-to-sql /usr/share/zoneinfo 2>/dev/null | mariadb -h 127.0.0.1 -u root mysql
  fi
fi
if [ -n "$MARIADB_URL" ] && ! pkg-config --exists libmariadb 2>/dev/null && command -v apt-get >/dev/null 2>&1; then
  log "installing Debian's libmariadb-dev and pkg-config (mysqlclient builds against them)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y --no-install-recommends libmariadb-dev pkg-config >/dev/null 2>&1 \
    || { apt-get update >/dev/null && apt-get install -y --no-install-recommends libmariadb-dev pkg-config >/dev/null; }
fi
if [ -n "$MARIADB_URL" ] && ! pkg-config --exists libmariadb 2>/dev/null && ! pkg-config --exists mysqlclient 2>/dev/null; then
  # Without the C library mysqlclient cannot build: say so loudly, and test the rest.
  echo "WARNING: libmariadb-dev could not be installed: the MariaDB tests are skipped" >&2
  MARIADB_URL=
fi
if [ -n "$MARIADB_URL" ]; then
  export MCP_TEST_MARIADB=$MARIADB_URL
else
  echo "no MariaDB server on this machine: the MariaDB tests are skipped (set MCP_TEST_MARIADB)" >&2
fi

# -- Debian's Chromium, for the browser tests (Playwright drives it; its own download is not used) --
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  log "installing Debian's chromium package"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y --no-install-recommends chromium >/dev/null 2>&1 \
    || { apt-get update >/dev/null && apt-get install -y --no-install-recommends chromium >/dev/null; } \
    || echo "could not install chromium: the browser tests will fail under CI, skip elsewhere" >&2
fi
export MCP_SCREENSHOTS=${MCP_SCREENSHOTS:-$PWD/.cache/screenshots}

# -- Debian's PgBouncer, for the tests behind a pooler in transaction mode --------------------------
if ! command -v pgbouncer >/dev/null 2>&1 && [ ! -x /usr/sbin/pgbouncer ] && command -v apt-get >/dev/null 2>&1; then
  log "installing Debian's pgbouncer package"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y --no-install-recommends pgbouncer >/dev/null 2>&1 \
    || { apt-get update >/dev/null && apt-get install -y --no-install-recommends pgbouncer >/dev/null; } \
    || echo "could not install pgbouncer: the PgBouncer tests will fail under CI, skip elsewhere" >&2
fi

# -- Python environments ------------------------------------------------------------------------
PYTHON=${PYTHON:-python3}
VENV=${MCP_VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
  log "creating $VENV with $($PYTHON --version)"
  "$PYTHON" -m venv "$VENV"
fi
log "installing the project and its test dependencies"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e ".[dev${MCP_TEST_MARIADB:+,mysql}]"

# -- Node 22 and the pinned conformance suites (cached in .cache/) -----------------------------
log "installing Node 22 and the MCP conformance suite"
"$VENV/bin/python" scripts/conformance.py --install-only

log "running the test suite ($("$VENV/bin/python" -c 'import django, sys; print("Python", sys.version.split()[0], "Django", django.__version__)'))"
# The slowest tests are listed at the end: the whole run should stay well under 20 minutes.
# Two processes (MCP_TEST_PROCESSES), each taking whole files: most tests wait on servers they
# start, so two share the machine's cores well; a file's tests keep its shared servers.
PARALLEL=(-n "${MCP_TEST_PROCESSES:-2}" --dist loadfile)
"$VENV/bin/python" -m pytest "${PARALLEL[@]}" --durations=15 "$@"

# -- Django 6 needs Python >= 3.12: run the core, Django and Flask tests on the newest Python this
# -- machine has (3.11 runs above), with Django 6 -------------------------------------------------
PY312=${PY312:-}
if [ -z "$PY312" ]; then
  # pyenv's shim named python3.12 exists but fails when 3.12 is not selected: test each candidate,
  # the newest first.
  for candidate in $(ls -d /root/.pyenv/versions/3.1[2-9]*/bin/python3 2>/dev/null | sort -rV) \
      "$(command -v python3.13 || true)" "$(command -v python3.12 || true)"; do
    if [ -n "$candidate" ] && "$candidate" -c 'import sys; assert sys.version_info >= (3, 12)' 2>/dev/null; then
      PY312=$candidate
      break
    fi
  done
fi
# The later passes' environments (Django 6 on that Python, the oldest Flask releases) are built
# in one background job while the store passes below run: those mostly wait on their database.
# One job, the two one after the other: each pip install builds the project's metadata in the
# source tree.
later_venvs() {
  if [ -n "$PY312" ]; then
    [ -x "$VENV6/bin/python" ] || "$PY312" -m venv "$VENV6"
    "$VENV6/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
    "$VENV6/bin/python" -m pip install --quiet --disable-pip-version-check -e ".[dev${MCP_TEST_MARIADB:+,mysql}]" 'Django>=6.0,<6.2'
    touch .cache/venv-django6.ready
  fi
  [ -x "$VENVMIN/bin/python" ] || "$PYTHON" -m venv "$VENVMIN"
  "$VENVMIN/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
  "$VENVMIN/bin/python" -m pip install --quiet --disable-pip-version-check -e ".[dev${MCP_TEST_MARIADB:+,mysql}]" -c scripts/minimum-versions.txt
}
VENV6=${MCP_VENV_DJANGO6:-.venv-django6}
VENVMIN=${MCP_VENV_MINIMUM:-.venv-minimum}
if [ "$#" -eq 0 ]; then
  mkdir -p .cache
  log "building ${PY312:+$VENV6 with $($PY312 --version) and }$VENVMIN in the background (log: .cache/later-venvs.log)"
  rm -f .cache/venv-django6.ready
  later_venvs > .cache/later-venvs.log 2>&1 &
  LATER_VENVS=$!
fi
# Background jobs (the environments' build, the MariaDB pass) still running when the script
# stops on a failure stop with it.
background_jobs() {
  for job in "${LATER_VENVS:-}" "${MARIADB_PASS:-}"; do
    [ -n "$job" ] && { pkill -TERM -P "$job" 2>/dev/null; kill "$job" 2>/dev/null; }
  done
  true
}
trap background_jobs EXIT
# Whether the background job has built the environment whose marker is $1 (it touches it when
# that one is done): waits until it has, or until the job has ended without it.
venv_built() {
  while [ ! -e "$1" ]; do
    kill -0 "$LATER_VENVS" 2>/dev/null || [ -e "$1" ] || return 1
    sleep 1
  done
}
# Waits for them; their log, and the script's failure, if they could not be built.
later_venvs_ready() {
  if [ -n "${LATER_VENVS:-}" ]; then
    if ! wait "$LATER_VENVS"; then
      cat .cache/later-venvs.log >&2
      echo "could not build the later passes' environments (above)" >&2
      exit 1
    fi
    LATER_VENVS=
  fi
}

# -- the Django store's own tests again, on MariaDB and on PostgreSQL (their SQL differs), the two
# -- side by side: each mostly waits on its own database server ------------------------------------
if [ "$#" -eq 0 ] && [ -n "${MCP_TEST_MARIADB:-}" ]; then
  # In a database of its own (pytest-django creates test_<name> and drops it); its output is
  # shown after the PostgreSQL pass's.
  log "running the Django store tests on MariaDB, beside the PostgreSQL ones (log: .cache/mariadb-pass.log)"
  MCP_EXAMPLE_DATABASE_URL="${MCP_TEST_MARIADB%/}/mcp_test_$(date +%s)_$$" \
    "$VENV/bin/python" -m pytest -p no:cacheprovider tests/django/test_django_elicitation.py \
    tests/django/test_django_store.py > .cache/mariadb-pass.log 2>&1 &
  MARIADB_PASS=$!
fi
if [ "$#" -eq 0 ]; then
  log "running the Django store tests on PostgreSQL"
  postgres_status=0
  MCP_EXAMPLE_DATABASE_URL=${MCP_TEST_POSTGRES:-postgresql://postgres@127.0.0.1:5432/test} \
    "$VENV/bin/python" -m pytest tests/django/test_django_elicitation.py tests/django/test_django_store.py \
    tests/django/test_django_asgi.py::test_a_sync_tools_connection_is_closed_after_the_call_as_a_requests_would_be \
    tests/django/test_django_asgi.py::test_async_tools_use_the_orm_on_threads_of_their_own_and_close_their_connections \
    tests/django/test_django_asgi.py::test_an_async_tool_waiting_for_its_client_holds_no_thread \
    tests/django/test_django_home.py \
    --deselect tests/django/test_django_elicitation.py::test_a_redemption_reaches_its_question_by_state_not_through_every_pending_row \
    || postgres_status=$?
  if [ -n "${MARIADB_PASS:-}" ]; then
    mariadb_status=0
    wait "$MARIADB_PASS" || mariadb_status=$?
    MARIADB_PASS=
    log "the Django store tests on MariaDB"
    cat .cache/mariadb-pass.log
    [ "$mariadb_status" -eq 0 ] || { echo "the MariaDB pass failed (above)" >&2; exit "$mariadb_status"; }
  fi
  [ "$postgres_status" -eq 0 ] || { echo "the PostgreSQL pass failed (above)" >&2; exit "$postgres_status"; }
fi

if [ -n "$PY312" ] && [ "$#" -eq 0 ]; then
  # As soon as its environment is built (the oldest-Flask one is built after it).
  venv_built .cache/venv-django6.ready || later_venvs_ready
  log "running the Django tests on $("$VENV6/bin/python" -c 'import django, sys; print(f"Python {sys.version.split()[0]}, Django {django.__version__}")')"
  # Not again here: how the servers stop on a signal and behave behind a proxy, a pooler or
  # gevent's worker, and how many worker processes share the store's rows (a worker killed,
  # fifty rounds over four workers), is gunicorn's, uvicorn's, the pooler's and the store's,
  # whichever Django runs in them: about three minutes of the suite on a 2-core machine.
  "$VENV6/bin/python" -m pytest "${PARALLEL[@]}" -m "not conformance" \
    -k "(django or core) and not four_workers and not worker_killed" tests/core tests/django tests/protocol \
    --ignore tests/protocol/test_reverse_proxy.py --ignore tests/protocol/test_server_shutdown.py \
    --ignore tests/protocol/test_pgbouncer.py --ignore tests/protocol/test_gevent.py
  log "running the Flask tests on $("$VENV6/bin/python" -c 'import sys; print(f"Python {sys.version.split()[0]}")')"
  "$VENV6/bin/python" -m pytest "${PARALLEL[@]}" tests/flask
fi

# -- the Flask adapter on the oldest releases pyproject.toml admits (scripts/minimum-versions.txt) --
if [ "$#" -eq 0 ]; then
  later_venvs_ready
  log "running the Flask tests on $("$VENVMIN/bin/python" -c 'from importlib.metadata import version as v; print(*(f"{n} {v(n)}" for n in ("Flask", "Werkzeug", "SQLAlchemy", "alembic")), sep=", ")')"
  "$VENVMIN/bin/python" -m pytest "${PARALLEL[@]}" tests/flask
fi
log "every pass done in $((SECONDS / 60)) min $((SECONDS % 60)) s"
