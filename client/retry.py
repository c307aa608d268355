"""When to retry a request and how long to wait first.

The policy of posthog-python's consumer, with full jitter: network errors, 5xx, 408 and 429 (and
401, 403, 404, 405: see below) are retried after ``uniform(0, min(cap, base * 2**attempt))``
seconds, never sooner than the server's ``Retry-After``; any other 4xx is final.
"""

from __future__ import annotations

import random
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Mapping

from ..shared.checks import parse_digits

# A Retry-After beyond a day is more likely a bug than a plan; never let it silence a device.
MAX_RETRY_AFTER = 86_400.0
# An HTTP date is 29 characters (obsolete forms up to ~40); delay-seconds past MAX_RETRY_AFTER are
# capped anyway, so a longer value is garbage, never a wait worth honouring.
_MAX_RETRY_AFTER_TEXT = 64
_MAX_EXPONENT = 60  # 2**60 * base is past any cap; a bigger power of two only risks overflow


# 401, 403, 404 and 405 say the request never reached an aggregator that judged the reports (a
# wrong endpoint, or auth or a proxy in front of it): no verdict on the reports, so they wait on
# disk and are retried rather than lost. Other 4xx reject the reports themselves.
_NOT_ABOUT_THE_REPORTS = (401, 403, 404, 405)


def is_retryable(status: int) -> bool:
    """Whether a request answered with ``status`` may succeed if sent again unchanged."""
    return status in (408, 429) or status in _NOT_ABOUT_THE_REPORTS or status >= 500


def backoff_delay(attempt: int, *, base: float, cap: float, rng: random.Random) -> float:
    """Seconds to wait before retry number ``attempt`` (0 for the first retry): full jitter."""
    return rng.uniform(0.0, min(cap, base * 2 ** min(attempt, _MAX_EXPONENT)))


def retry_after(headers: Mapping[str, str], now: datetime) -> float | None:
    """The server's ``Retry-After`` (delay-seconds or an HTTP date) in seconds from ``now``,
    within [0, :data:`MAX_RETRY_AFTER`].

    ``headers`` has lower-case names. None when absent or unreadable. Read strictly, as RFC 9110
    writes it: delay-seconds are ASCII digits only (``str.isdigit`` also takes "²" or "٣",
    which ``float`` then refuses), and a value too long to be either form is not parsed at all
    (a run of digits past ``int``'s limit of 4,300 raises, and a day's worth of seconds needs 5).
    """
    value = headers.get("retry-after")
    if not isinstance(value, str):
        return None
    value = value.strip(" \t")
    if len(value) > _MAX_RETRY_AFTER_TEXT:
        return None
    delay = parse_digits(value, _MAX_RETRY_AFTER_TEXT)
    if delay is not None:
        seconds = float(delay)
    else:
        try:
            when = parsedate_to_datetime(value)
            if when.tzinfo is None:
                when = when.replace(tzinfo=timezone.utc)
            seconds = (when - now).total_seconds()
        except (TypeError, ValueError, IndexError, OverflowError):  # what a malformed date raises
            return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)
