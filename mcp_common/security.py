"""Transport checks made before any JSON is parsed: DNS-rebinding (Host, Origin) and body size."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from functools import lru_cache
from urllib.parse import SplitResult, urlsplit

from mcp_types import INVALID_REQUEST

from mcp_common.config import MCPConfig
from mcp_common.http import HTTPResponse
from mcp_common.jsonrpc import error_response

logger = logging.getLogger(__name__)

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]", "::1")

_DEFAULT_PORTS = {"http": "80", "https": "443"}


def split_host(host: str) -> tuple[str, str | None]:
    """``example.com:8000`` -> (``example.com``, ``8000``); IPv6 literals keep their brackets.

    An IPv6 literal followed by anything but ``:port`` (``[::1]x``, ``[::1]:80:80``), or left
    unclosed, is no host at all: its name is empty. So is a list (``a.example, b.example``, an
    ``X-Forwarded-Host`` that proxies appended to), which Django refuses too: its last name
    must not pass a ``.b.example`` pattern.
    """
    host = host.strip().lower()
    if "," in host or any(char.isspace() for char in host):
        return "", None
    if host.startswith("["):
        end = host.find("]")
        rest = host[end + 1 :]
        if end == -1 or (rest and not (rest.startswith(":") and _is_port(rest[1:]))):
            return "", None
        return host[: end + 1], rest[1:] or None
    name, sep, port = host.rpartition(":")
    return (name, port) if sep and _is_port(port) else (host, None)


def _is_port(text: str) -> bool:
    # ASCII only: str.isdigit() also accepts "²", which a latin-1 Host header can carry.
    return text.isascii() and text.isdigit()


def host_allowed(host: str, allowed: tuple[str, ...]) -> bool:
    """Django ``ALLOWED_HOSTS`` semantics, plus the SDK's ``name:*`` (any port) patterns."""
    return _host_allowed(host, allowed if type(allowed) is tuple else tuple(allowed))


@lru_cache(maxsize=256)
def _host_allowed(host: str, allowed: tuple[str, ...]) -> bool:
    # A pure function, asked twice per request with the same few values: its verdicts are
    # cached (bounded, so that many forged Host headers cost memory only up to it).
    name, _ = split_host(host)
    if not name:
        return False
    patterns = allowed or LOOPBACK_HOSTS
    for pattern in patterns:
        pattern = pattern.lower()
        if pattern == "*":
            return True
        if pattern.endswith(":*"):
            pattern = pattern[:-2]
        elif ":" in pattern and not pattern.startswith("["):
            # An exact host:port pattern.
            if host.lower() == pattern:
                return True
            continue
        if pattern.startswith("."):
            if name == pattern[1:] or name.endswith(pattern):
                return True
        elif name == pattern or (pattern in LOOPBACK_HOSTS and name in LOOPBACK_HOSTS and not allowed):
            return True
    return False


def origin_allowed(origin: str, host: str, allowed: tuple[str, ...], secure: bool = False) -> bool:
    """Same-origin requests and listed origins pass; browsers on other sites do not.

    ``secure``: the request came over HTTPS, so a same-host origin must be ``https`` too (a
    page served over plain HTTP, which anyone on the network can alter, is another origin). A
    request the framework sees as plain HTTP may have come through a TLS-terminating proxy that
    does not say so: there either scheme passes, as before.
    """
    if "*" in allowed:
        return True
    origin = origin.strip().lower()
    if origin == "null":
        return False
    parts = urlsplit(origin)
    if parts.netloc and _same_host(parts, host) and (parts.scheme == "https" or not secure):
        return True
    for pattern in allowed:
        pattern = pattern.lower().rstrip("/")
        if origin == pattern:
            return True
        if pattern.endswith(":*") and origin.startswith(pattern[:-1]):
            return True
    return False


def _same_host(origin: SplitResult, host: str) -> bool:
    """Whether ``origin`` names the host and port of the ``Host`` header, which may name the
    port the origin's scheme implies and a browser leaves out (``example.com:443`` behind a
    proxy that sets ``$host:$server_port``, or werkzeug's ``ProxyFix`` with ``x_port``)."""
    host = host.strip().lower()
    if origin.netloc == host:
        return True
    name, port = split_host(host)
    return port is not None and port == _DEFAULT_PORTS.get(origin.scheme) and origin.netloc == name


def check_request(
    config: MCPConfig, headers: Mapping[str, str], body_size: int, secure: bool = False, log: bool = False
) -> HTTPResponse | None:
    """A refusal, or ``None`` when the request may go on to the protocol layer (``secure``:
    it came over HTTPS; see :func:`origin_allowed`). ``log``: a refused Host or Origin is
    logged with the setting that admits it (by the one caller that answers the refusal)."""
    if body_size > config.max_body_size:
        return error_response(413, INVALID_REQUEST, f"Request body too large (limit {config.max_body_size} bytes)")
    host = headers.get("host", "")
    if not host_allowed(host, config.allowed_hosts):
        if log:
            name = split_host(host)[0]
            if name:
                logger.warning(
                    "Invalid Host header %r. You may need to add %r to %s.", host, name, config.hosts_setting
                )
            else:
                # A list, whitespace, a broken IPv6 literal: no entry, not even "*", admits it.
                logger.warning(
                    "Invalid Host header %r: not a host name, which no entry of %s admits.", host, config.hosts_setting
                )
        return error_response(421, INVALID_REQUEST, "Invalid Host header")
    origin = headers.get("origin")
    if origin and not origin_allowed(origin, host, config.allowed_origins, secure):
        if log:
            if origin.strip().lower() == "null":
                # A sandboxed frame's or a file: page's: listing "null" would not admit it.
                logger.warning(
                    "Invalid Origin header %r for Host %r: an opaque origin, which only '*' in %s admits.",
                    origin,
                    host,
                    config.origins_setting,
                )
            else:
                logger.warning(
                    "Invalid Origin header %r for Host %r. You may need to add %r to %s.",
                    origin,
                    host,
                    origin,
                    config.origins_setting,
                )
        return error_response(403, INVALID_REQUEST, "Invalid Origin header")
    return None
