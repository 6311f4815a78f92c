"""Background database work that fails is retried; its log is what an operator needs: the
outage when it starts, a reminder at a slow pace while it lasts, and its end."""

from __future__ import annotations

import logging

import pytest

from mcp_common.outage import REMIND_SECONDS, Outage

logger = logging.getLogger("mcp_common.tests")


def records(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    return [(r.levelname, r.getMessage()) for r in caplog.records if r.name == logger.name]


def test_an_outage_is_logged_when_it_starts_at_a_slow_pace_while_it_lasts_and_when_it_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [1000.0]
    outage = Outage(logger, "Polling the database", clock=lambda: now[0])
    caplog.set_level(logging.INFO, logger=logger.name)
    outage.succeeded()  # no outage: nothing to say
    for _ in range(int(REMIND_SECONDS) + 1):  # a failure a second
        try:
            raise ConnectionError("the database went away")
        except ConnectionError:
            outage.failed()
        now[0] += 1
    outage.succeeded()
    outage.succeeded()
    assert records(caplog) == [
        ("WARNING", "Polling the database failed; retrying"),
        ("WARNING", f"Polling the database still fails after {REMIND_SECONDS:.0f} s (301 attempts); retrying"),
        ("INFO", f"Polling the database works again after {REMIND_SECONDS + 1:.0f} s (301 failed attempts)"),
    ]
    # Its own logger's only: an endpoint left running by an earlier test may log a warning too.
    warnings = [r for r in caplog.records if r.name == logger.name and r.levelno == logging.WARNING]
    assert all(r.exc_info and "the database went away" in str(r.exc_info[1]) for r in warnings)
    caplog.clear()
    try:
        raise ConnectionError("again")
    except ConnectionError:
        outage.failed()  # a new outage: said again
    assert records(caplog) == [("WARNING", "Polling the database failed; retrying")]
