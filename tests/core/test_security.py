"""Host and Origin rules (DNS-rebinding protection)."""

from __future__ import annotations

import pytest

from mcp_common.config import MCPConfig
from mcp_common.security import check_request, host_allowed, origin_allowed, split_host


@pytest.mark.parametrize(
    ("host", "allowed", "ok"),
    [
        ("127.0.0.1:8000", (), True),
        ("localhost", (), True),
        ("[::1]:8000", (), True),
        ("evil.example", (), False),
        ("api.example.com", ("api.example.com",), True),
        ("api.example.com:443", ("api.example.com",), True),
        ("x.example.com", (".example.com",), True),
        ("example.com", (".example.com",), True),
        ("badexample.com", (".example.com",), False),
        ("anything", ("*",), True),
        ("api.example.com:8443", ("api.example.com:8443",), True),
        ("api.example.com:9999", ("api.example.com:8443",), False),
        ("127.0.0.1:5", ("127.0.0.1:*",), True),
        ("", ("*",), False),
        ("localhost", ("api.example.com",), False),
        # After an IPv6 literal only a port may follow: anything else is not that host.
        ("[::1]x", (), False),
        ("[::1]:80:80", (), False),
        ("[::1]:", (), False),
        ("[::1]x", ("[::1]",), False),
        ("[::1]x", ("*",), False),
        ("[::1", ("*",), False),
        ("[::1]:8000", ("[::1]",), True),
        # A list of hosts (X-Forwarded-Host through several proxies) is no host.
        ("evil.example,www.example.com", (".example.com",), False),
        ("evil.example, example.com", ("*",), False),
    ],
)
def test_host_allowed(host: str, allowed: tuple[str, ...], ok: bool) -> None:
    assert host_allowed(host, allowed) is ok


@pytest.mark.parametrize(
    ("host", "parts"),
    [
        ("Example.com:8000", ("example.com", "8000")),
        ("example.com", ("example.com", None)),
        ("[::1]", ("[::1]", None)),
        ("[::1]:8000", ("[::1]", "8000")),
        ("[::1]x", ("", None)),
        ("[::1]:80:80", ("", None)),
        ("[::1]:", ("", None)),
        ("[::1", ("", None)),
        ("[::1]:\u00b2", ("", None)),
        ("localhost:\u00b2", ("localhost:\u00b2", None)),
    ],
)
def test_split_host(host: str, parts: tuple[str, str | None]) -> None:
    assert split_host(host) == parts


@pytest.mark.parametrize(
    ("origin", "host", "allowed", "ok"),
    [
        ("http://127.0.0.1:8000", "127.0.0.1:8000", (), True),
        ("http://evil.example", "127.0.0.1:8000", (), False),
        ("null", "127.0.0.1:8000", (), False),
        ("https://app.example.com", "api.example.com", ("https://app.example.com",), True),
        ("http://localhost:3000", "api.example.com", ("http://localhost:*",), True),
        ("http://evil.example", "api.example.com", ("*",), True),
    ],
)
def test_origin_allowed(origin: str, host: str, allowed: tuple[str, ...], ok: bool) -> None:
    assert origin_allowed(origin, host, allowed) is ok


@pytest.mark.parametrize(
    ("origin", "secure", "ok"),
    [
        # A request over HTTPS: a page of the same host served over plain HTTP (which anyone
        # on the network can alter) is another origin.
        ("http://api.example.com", True, False),
        ("https://api.example.com", True, True),
        # A request the framework sees as plain HTTP (maybe through a TLS-terminating proxy
        # that does not say so): either scheme of the same host passes.
        ("http://api.example.com", False, True),
        ("https://api.example.com", False, True),
    ],
)
def test_a_same_host_origin_over_https_must_be_https(origin: str, secure: bool, ok: bool) -> None:
    assert origin_allowed(origin, "api.example.com", (), secure) is ok
    config = MCPConfig(allowed_hosts=("api.example.com",))
    refusal = check_request(config, {"host": "api.example.com", "origin": origin}, 1, secure)
    assert (refusal is None) is ok
    if refusal is not None:
        assert refusal.status == 403
    # A listed origin passes whatever the scheme of the request.
    assert origin_allowed(origin, "api.example.com", (origin,), secure)


@pytest.mark.parametrize(
    ("origin", "host", "secure", "ok"),
    [
        # A Host naming the port its scheme implies (a proxy's "$host:$server_port", ProxyFix
        # with x_port): browsers leave the default port out of Origin; the same origin.
        ("https://api.example.com", "api.example.com:443", True, True),
        ("https://api.example.com", "api.example.com:443", False, True),
        ("http://api.example.com", "api.example.com:80", False, True),
        # The port the Origin implies is not the Host's: another origin.
        ("http://api.example.com", "api.example.com:443", False, False),
        ("https://api.example.com", "api.example.com:80", False, False),
        ("https://api.example.com", "api.example.com:8443", True, False),
        ("https://api.example.com:443", "api.example.com:8443", True, False),
        # Over HTTPS a plain-HTTP page stays another origin, its port named or not.
        ("http://api.example.com:443", "api.example.com:443", True, False),
        ("https://[::1]", "[::1]:443", True, True),
        ("https://other.example.com", "api.example.com:443", True, False),
    ],
)
def test_a_host_naming_the_default_port_is_the_same_origin(origin: str, host: str, secure: bool, ok: bool) -> None:
    assert origin_allowed(origin, host, (), secure) is ok


def test_check_request_statuses() -> None:
    config = MCPConfig(max_body_size=10)
    too_big = check_request(config, {"host": "localhost"}, 11)
    assert too_big is not None and too_big.status == 413
    foreign = check_request(config, {"host": "evil.example"}, 1)
    assert foreign is not None and foreign.status == 421
    cross = check_request(config, {"host": "localhost", "origin": "http://evil.example"}, 1)
    assert cross is not None and cross.status == 403
    assert check_request(config, {"host": "localhost", "origin": "http://localhost"}, 1) is None


@pytest.mark.parametrize("host", ["a.example,b.example", "[::1", "evil example", ""])
def test_a_host_header_that_names_no_host_is_not_logged_as_one_to_allow(
    host: str, caplog: pytest.LogCaptureFixture
) -> None:
    """No setting admits a Host that is no host name (a list, a broken IPv6 literal): the log
    says so, rather than "You may need to add '' to ..."."""
    config = MCPConfig(allowed_hosts=("*",), hosts_setting="MCP_ALLOWED_HOSTS")
    refused = check_request(config, {"host": host}, 1, log=True)
    assert refused is not None and refused.status == 421
    assert "add ''" not in caplog.text
    assert f"Invalid Host header {host!r}: not a host name" in caplog.text


def test_an_opaque_origin_is_not_logged_as_one_to_allow(caplog: pytest.LogCaptureFixture) -> None:
    """``Origin: null`` (a sandboxed frame, a file: page) is refused whatever the allowed
    origins list, ``*`` apart: listing "null" would not admit it, so the log must not say to."""
    config = MCPConfig(allowed_origins=("null",), origins_setting="MCP_ALLOWED_ORIGINS")
    refused = check_request(config, {"host": "localhost", "origin": "null"}, 1, log=True)
    assert refused is not None and refused.status == 403
    assert "add 'null'" not in caplog.text
    assert "only '*' in MCP_ALLOWED_ORIGINS admits" in caplog.text
