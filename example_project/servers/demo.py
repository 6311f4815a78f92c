"""The product demo served at ``/mcp``: a small shop assistant that asks before it acts."""

from __future__ import annotations

from typing import Annotated

from mcp.server import MCPServer
from mcp.server.mcpserver import AcceptedElicitation, Context, Elicit, ElicitationResult, Resolve
from pydantic import BaseModel, Field

mcp = MCPServer("Demo", instructions="A demo shop served by Django or Flask. Try add_to_cart and checkout.")

_CATALOGUE = {"tea": 4.5, "coffee": 6.0, "biscuits": 2.25}


@mcp.tool()
def list_products() -> dict[str, float]:
    """The products on sale, with their prices in EUR."""
    return dict(_CATALOGUE)


class Quantity(BaseModel):
    quantity: int = Field(ge=1, le=99, description="How many?")


async def ask_quantity(product: str) -> Quantity | Elicit[Quantity]:
    """Ask how many only for products that are sold by the unit."""
    return Elicit(f"How many {product} would you like?", Quantity)


@mcp.tool()
async def add_to_cart(product: str, quantity: Annotated[ElicitationResult[Quantity], Resolve(ask_quantity)]) -> str:
    """Add a product to the cart; the quantity is asked of the user."""
    if product not in _CATALOGUE:
        return f"Unknown product {product!r}; try one of {', '.join(_CATALOGUE)}."
    match quantity:
        case AcceptedElicitation(data=Quantity(quantity=n)):
            return f"Added {n} x {product} ({n * _CATALOGUE[product]:.2f} EUR)."
        case _:
            return "Nothing added."


@mcp.tool()
async def greet(name: str, ctx: Context) -> str:
    """Say hello, and report the progress of saying it."""
    await ctx.report_progress(1, 1, "greeted")
    return f"Hello, {name}!"
