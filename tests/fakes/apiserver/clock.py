"""The server's clock and ``metav1.Time``'s wire form (``k8s.io/apimachinery/pkg/apis/meta/v1``
``time.go``: ``Time.MarshalJSON`` writes ``time.RFC3339`` in UTC at second precision;
``Time.UnmarshalJSON`` accepts RFC 3339 with any fraction and offset; the zero time is
``0001-01-01T00:00:00Z``, which ``Time.IsZero`` reports)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
_RFC3339 = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:\d{2})$")
ZERO = datetime(1, 1, 1, tzinfo=UTC)


def now_rfc3339() -> str:
    """``metav1.Now()`` as the server writes it."""
    return datetime.now(UTC).strftime(_FORMAT)


def parse_rfc3339(value: object) -> datetime | None:
    """``time.Parse(time.RFC3339, ...)`` in UTC; None when ``value`` is not one."""
    if not isinstance(value, str):
        return None
    m = _RFC3339.match(value)
    if not m:
        return None
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    frac, zone = m.group(7), m.group(8)
    try:
        if zone in ("Z", "z"):
            tz = UTC
        else:
            hours, minutes = int(zone[1:3]), int(zone[4:6])
            if hours > 23 or minutes > 59:
                return None
            sign = 1 if zone[0] == "+" else -1
            tz = timezone(sign * timedelta(hours=hours, minutes=minutes))
        moment = datetime(year, month, day, hour, minute, second, int((frac or "0")[:6].ljust(6, "0")), tzinfo=tz)
        return moment.astimezone(UTC)
    except (ValueError, OverflowError):
        return None


def format_rfc3339(moment: datetime) -> str:
    """``Time.MarshalJSON``: UTC, seconds."""
    return moment.astimezone(UTC).strftime(_FORMAT)
