"""Time as the Kubernetes API writes it: RFC 3339, UTC, seconds precision (``metav1.Time``).

``now_rfc3339`` is on the CNI hot path and needs only ``time``; parsing imports ``datetime``
and ``re`` when first used.
"""

from __future__ import annotations

import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    import re
    from datetime import datetime

_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
_RFC3339_PATTERN = (
    r"^([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]+))?"
    r"([Zz]|[+-][0-9]{2}:[0-9]{2})$"
)
_rfc3339: re.Pattern[str] | None = None


def now_rfc3339() -> str:
    """The current time in ``metav1.Time`` form."""
    return time.strftime(_FORMAT, time.gmtime())


def zero_time() -> datetime:
    """Go's zero ``time.Time`` (what the API server treats as "not set")."""
    from datetime import UTC, datetime

    return datetime(1, 1, 1, tzinfo=UTC)


def parse_rfc3339(value: object) -> datetime | None:
    """An RFC 3339 timestamp (any fractional precision, ``Z`` or an offset) in UTC, or None."""
    global _rfc3339
    import re
    from datetime import UTC, datetime, timedelta, timezone

    if not isinstance(value, str):
        return None
    if _rfc3339 is None:
        _rfc3339 = re.compile(_RFC3339_PATTERN)
    m = _rfc3339.match(value)
    if not m:
        return None
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    frac, zone = m.group(7), m.group(8)
    try:
        if zone in ("Z", "z"):
            tz = UTC
        else:
            sign = 1 if zone[0] == "+" else -1
            hours, minutes = int(zone[1:3]), int(zone[4:6])
            if hours > 23 or minutes > 59:
                return None
            tz = timezone(sign * timedelta(hours=hours, minutes=minutes))
        micro = int((frac or "0")[:6].ljust(6, "0"))
        parsed = datetime(year, month, day, hour, minute, second, micro, tzinfo=tz)
    except ValueError:
        return None
    try:
        return parsed.astimezone(UTC)
    except OverflowError:  # e.g. 0001-01-01T00:00:00+01:00
        return None


def format_rfc3339(moment: datetime) -> str:
    """``metav1.Time`` form: seconds precision, UTC, ``Z``."""
    from datetime import UTC

    return moment.astimezone(UTC).strftime(_FORMAT)


def normalize_time(value: object) -> str:
    """``value`` as an RFC 3339 seconds-precision UTC time; now when it is missing or bad."""
    parsed = parse_rfc3339(value)
    if parsed is None or parsed == zero_time():
        return now_rfc3339()
    return format_rfc3339(parsed)
