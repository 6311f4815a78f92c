"""The elicitation page's ``ctx.elicit`` (form) and ``ctx.elicit_url`` (URL) examples, and the
URL-mode resolver this package adds (``hold_table``), which works on both protocol eras."""

from __future__ import annotations

from typing import Annotated

from mcp.server import MCPServer
from mcp.server.mcpserver import (
    AcceptedElicitation,
    CancelledElicitation,
    Context,
    DeclinedElicitation,
    ElicitationResult,
    Resolve,
)
from pydantic import BaseModel, Field

from mcp_common.elicitation import ElicitUrl, UrlConsent, caller_elicitation_id, elicitation_completed

mcp = MCPServer("Bistro")


class AlternativeDate(BaseModel):
    accept_alternative: bool = Field(description="Try another date?")
    date: str = Field(default="2025-12-26", description="Alternative date (YYYY-MM-DD)")


@mcp.tool()
async def book_table(date: str, party_size: int, ctx: Context) -> str:
    """Book a table at the bistro."""
    if date != "2025-12-25":
        return f"Booked a table for {party_size} on {date}."

    result = await ctx.elicit(
        message=f"No tables for {party_size} on {date}. Would you like to try another date?",
        schema=AlternativeDate,
    )
    if result.action == "accept" and result.data.accept_alternative:
        return await book_table(result.data.date, party_size, ctx)
    return "No booking made."


@mcp.tool()
async def pay_deposit(booking_id: str, ctx: Context) -> str:
    """Take the deposit that confirms a booking."""
    result = await ctx.elicit_url(
        message="A 20 EUR deposit confirms your booking.",
        url=f"https://pay.example.com/deposit/{booking_id}",
        elicitation_id=f"deposit-{booking_id}",
    )
    if result.action == "accept":
        return "Complete the payment in your browser."
    return "No deposit taken. The booking expires in one hour."


@mcp.tool()
async def confirm_deposit(booking_id: str, ctx: Context) -> str:
    """Record a payment reported by the payment provider."""
    await ctx.session.send_elicit_complete(f"deposit-{booking_id}")
    return f"Deposit received for booking {booking_id}."


async def deposit_link(booking_id: str) -> UrlConsent | ElicitUrl:
    """Resolver: every hold needs the deposit, so it sends the user to pay, unless the payment
    provider already reported this guest's payment (its webhook completed the elicitation).

    The id is the caller's own (``caller_elicitation_id``): a payment completes every open
    question with its id, and another user asking to hold the same booking must not have
    theirs completed by this user's payment. The payment link carries it to the provider,
    whose webhook reports it back."""
    elicitation_id = caller_elicitation_id(f"hold-{booking_id}")
    question = ElicitUrl(
        "A 20 EUR deposit holds your table.",
        url=f"https://pay.example.com/deposit/{booking_id}?ref={elicitation_id}",
        elicitation_id=elicitation_id,
    )
    if await elicitation_completed(question.elicitation_id):
        return question.completed()
    return question


@mcp.tool()
async def hold_table(
    booking_id: str,
    consent: Annotated[ElicitationResult[UrlConsent], Resolve(deposit_link)],
) -> str:
    """Hold a table once the guest agrees to pay the deposit (URL mode, through a resolver)."""
    match consent:
        case AcceptedElicitation(data=data) if data.completed:
            return f"Deposit received: table held for booking {booking_id}."
        case AcceptedElicitation(data=data):
            return f"Holding booking {booking_id}; complete the payment at {data.url}."
        case DeclinedElicitation():
            return "declined: no hold"
        case CancelledElicitation():
            return "cancelled: no hold"
