"""The log of background database work that retries: an outage said once, not per attempt.

The answer poll, the heartbeat and the noting of a running call's worker retry on their own, up to
once a second, and the clients of SSE streams resume them as often: a WARNING (and its traceback)
per attempt filled an operator's log for as long as the database was away. :class:`Outage` says
it when it starts, reminds at a slow pace while it lasts, and says when it ends.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

REMIND_SECONDS = 300.0
"""How often an outage that lasts is said again (with the latest traceback)."""


class Outage:
    """The failures of one retried task (or of all of one kind, on one event loop thread).

    ``failed()`` from the ``except`` block of each failed attempt, ``succeeded()`` after each
    attempt that worked::

        WARNING  Polling for answers from other workers failed; retrying      (traceback)
        WARNING  ... still fails after 300 s (291 attempts); retrying        (traceback)
        INFO     ... works again after 312 s (301 failed attempts)
    """

    def __init__(
        self,
        logger: logging.Logger,
        what: str,
        *,
        remind_every: float = REMIND_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.what = what
        self.remind_every = remind_every
        self.clock = clock
        self.since: float | None = None
        """When the outage started (``clock()``), or ``None`` while the work succeeds."""
        self.failures = 0
        self._said = 0.0

    def failed(self) -> None:
        """An attempt failed: logged with the exception being handled when it starts an
        outage, or when the last word about it is ``remind_every`` old."""
        now = self.clock()
        self.failures += 1
        if self.since is None:
            self.since = self._said = now
            self.logger.warning("%s failed; retrying", self.what, exc_info=True)
        elif now - self._said >= self.remind_every:
            self._said = now
            self.logger.warning(
                "%s still fails after %.0f s (%d attempts); retrying",
                self.what,
                now - self.since,
                self.failures,
                exc_info=True,
            )

    def succeeded(self) -> None:
        """An attempt worked: the end of the outage, if there was one, is logged (INFO)."""
        if self.since is None:
            return
        self.logger.info(
            "%s works again after %.0f s (%d failed attempts)", self.what, self.clock() - self.since, self.failures
        )
        self.since, self.failures = None, 0
