"""A PgBouncer of the test's own in front of this machine's PostgreSQL, in transaction pooling
mode, on a free 127.0.0.1 port: how many production sites reach their database.

Debian's ``pgbouncer`` package (1.18 on bookworm), which ``scripts/test.sh`` installs: that
version keeps no protocol-level prepared statements across transactions, so a client that
prepares one meets "prepared statement ... does not exist" or "... already exists" as soon as
its transactions land on server connections other clients prepared on. One server connection
per database (``pool_size``) makes that certain instead of likely.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from tests.conftest import debian_binary, end_process, free_port


@contextlib.contextmanager
def transaction_pooler(database_url: str, pool_size: int = 1) -> Iterator[str]:
    """Run PgBouncer in transaction mode for the PostgreSQL server of ``database_url``; yields
    the same URL through PgBouncer, which stops when the block ends."""
    binary = debian_binary("pgbouncer", "MCP_PGBOUNCER", "PgBouncer")
    target = urlsplit(database_url)
    port = free_port()
    folder = Path(tempfile.mkdtemp(prefix="mcp-pgbouncer-"))
    command = [binary]
    if os.geteuid() == 0:
        # PgBouncer will not run as root (CI's containers): it switches to an unprivileged user,
        # who must read its files and write its log.
        user = next(name for name in ("postgres", "nobody") if _exists(name))
        os.chown(folder, pwd.getpwnam(user).pw_uid, -1)
        command += ["-u", user]
    users = folder / "userlist.txt"
    users.write_text(f'"{target.username or "postgres"}" ""\n')
    log = folder / "pgbouncer.log"
    ini = folder / "pgbouncer.ini"
    ini.write_text(
        "[databases]\n"
        f"* = host={target.hostname or '127.0.0.1'} port={target.port or 5432}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {users}\nlogfile = {log}\npidfile = {folder / 'pgbouncer.pid'}\n"
        f"pool_mode = transaction\ndefault_pool_size = {pool_size}\nmax_client_conn = 200\n"
        "ignore_startup_parameters = extra_float_digits,options\n"
    )
    process = subprocess.Popen([*command, str(ini)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 10
        while not _listening(port):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"PgBouncer did not start:\n{log.read_text() if log.exists() else ''}")
            time.sleep(0.05)
        yield urlunsplit(target._replace(netloc=f"{target.username or 'postgres'}@127.0.0.1:{port}"))
    finally:
        end_process(process)
        shutil.rmtree(folder, ignore_errors=True)


def _exists(user: str) -> bool:
    try:
        pwd.getpwnam(user)
    except KeyError:
        return False
    return True


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0
