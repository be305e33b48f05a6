"""``InFlight``: the kubelet calls being served, so a stopping server lets them finish first."""

from __future__ import annotations

import threading


class InFlight:
    """Counts the calls being served (``with in_flight:``); ``wait_idle`` waits for none."""

    def __init__(self) -> None:
        self._idle = threading.Condition()
        self._count = 0

    def __enter__(self) -> None:
        with self._idle:
            self._count += 1

    def __exit__(self, *exc: object) -> None:
        with self._idle:
            self._count -= 1
            if not self._count:
                self._idle.notify_all()

    def wait_idle(self, timeout: float | None) -> bool:
        """True once no call is in flight; False after ``timeout`` seconds with some still are."""
        with self._idle:
            return self._idle.wait_for(lambda: self._count == 0, timeout=timeout)
