"""What a user's type checker sees of the public API: checked by
``tests/test_packaging.py`` with ``mypy --strict --follow-imports=silent tests/typing_check.py``
(mypy and django-stubs are dev requirements).
Each ``assert_type`` holds a type the README's examples rely on; each ``type: ignore`` is a
misuse the checker must refuse (``--strict`` reports an ignore that is not needed)."""

from __future__ import annotations

from typing import assert_type

from django.http import HttpRequest, HttpResponse
from flask_sqlalchemy import SQLAlchemy
from mcp.server import MCPServer
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

import mcp_django
import mcp_flask

mcp = MCPServer("typing")


# mcp_django's names come from a lazy module __getattr__: they must not be Any to a checker.
@mcp.tool()
@mcp_django.permission_required("shop.change_product")
def restock(product: str, units: int) -> str:
    return product * units


restock(1, 2)  # type: ignore[arg-type]
assert_type(mcp_django.complete_elicitation("deposit-17"), int)


# view_tool returns the view unchanged, called or as a decorator.
@mcp_django.view_tool(mcp, arguments={"status": (str | None, None)})
def order_list(request: HttpRequest) -> HttpResponse:
    return HttpResponse()


order_list("/orders")  # type: ignore[arg-type]


@mcp_flask.view_tool(mcp, name="orders")
def orders() -> str:
    return ""


assert_type(orders(), str)
assert_type(mcp_flask.view_tool(mcp, orders, name="orders_again")(), str)


# model_tools(session=...) may return a scoped_session, as its default (db.session) is one.
class Base(DeclarativeBase):
    pass


class Item(Base):
    __tablename__ = "item"
    id: Mapped[int] = mapped_column(primary_key=True)


db = SQLAlchemy()
mcp_flask.model_tools(mcp, Item, fields="__all__", session=lambda: db.session)
