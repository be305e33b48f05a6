"""Bounded caches of what was made of JSON input lately, keyed by its exact JSON text.

A DeviceClass's network (its parameters, its address pool) comes with the allocation of every
claim of the class, so in a burst of pod starts most checks and parses are repeats.  Each cache
keeps only the last ``size`` results, so it never grows with requests; a failure is never kept,
so a refusal is worded again, with the caller's field, each time.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

from dracni import jsonio

T = TypeVar("T")


def exact_json_key(value: object) -> bytes | None:
    """``value`` as exact JSON text (1, true, 1.0, NaN and big integers kept apart), None when
    it has none (a lone surrogate, a non-JSON value: made again each time)."""
    try:
        return jsonio.dumps(value)
    except (TypeError, ValueError, RecursionError):
        return None


class RecentResults(Generic[T]):
    """The last ``size`` results by key, least recently used first out; thread-safe.

    ``copy``, when given, is applied to a result kept and to each one handed out, so that
    a caller may change what it got (mutable results); without it results are shared as they
    are and must be immutable."""

    def __init__(self, size: int, copy: Callable[[T], T] | None = None) -> None:
        self.size = size
        self._copy = copy
        self._lock = threading.Lock()
        self._results: OrderedDict[bytes, T] = OrderedDict()

    def made(self, value: object, make: Callable[[], T]) -> T:
        """What ``make()`` makes of ``value``: the result kept for the same JSON text, or made
        now and kept (a failure raises out of ``make`` and is not kept; a ``value`` with no JSON
        text is made each time)."""
        key = exact_json_key(value)
        if key is None:
            return make()
        result = self.get(key)
        if result is None:
            result = make()
            self.put(key, result)
        return result

    def get(self, key: bytes) -> T | None:
        with self._lock:
            result = self._results.get(key)
            if result is None:
                return None
            self._results.move_to_end(key)
        return result if self._copy is None else self._copy(result)

    def put(self, key: bytes, result: T) -> None:
        kept = result if self._copy is None else self._copy(result)
        with self._lock:
            self._results[key] = kept
            self._results.move_to_end(key)
            while len(self._results) > self.size:
                self._results.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._results)
