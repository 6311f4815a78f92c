"""The private SDK names mcp_common/_sdk.py relies on: fails loudly when the SDK moves them."""

from __future__ import annotations

import importlib.metadata

from mcp.server import MCPServer
from mcp.server.lowlevel.server import Server
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity

from mcp_common import _sdk


def test_sdk_version_is_the_supported_line() -> None:
    version = importlib.metadata.version("mcp")
    assert version.startswith("2.3."), f"mcp {version}: re-check mcp_common/_sdk.py, then widen the bound"


def test_mcpserver_keeps_its_lowlevel_server() -> None:
    server = MCPServer("contract")
    lowlevel = _sdk.lowlevel_server(server)
    assert isinstance(lowlevel, Server)
    assert lowlevel.name == "contract"
    assert _sdk.lowlevel_server(lowlevel) is lowlevel


def test_request_state_boundary_is_replaced_in_place() -> None:
    server = MCPServer("contract")
    chain = _sdk.lowlevel_server(server).middleware
    before = [type(m) for m in chain]
    assert RequestStateBoundary in before, "MCPServer no longer installs a RequestStateBoundary"
    security = RequestStateSecurity(keys=[b"k" * 32])
    _sdk.install_request_state_security(server, security)
    after = _sdk.lowlevel_server(server).middleware
    assert [type(m) for m in after] == before
    boundary = next(m for m in after if isinstance(m, RequestStateBoundary))
    assert boundary._security is security
