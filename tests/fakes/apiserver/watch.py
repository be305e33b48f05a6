"""Watch streams: the initial ADDED events (no resourceVersion) or a replay of the history from
one, then live events, with selector transitions turned into ADDED/DELETED as the watch cache
does, bookmarks when asked, and a 410 ``Expired`` ERROR event for a resourceVersion older than
the retained history.  A server going down (``Store.epoch``) cuts the stream without a clean end.
"""

from __future__ import annotations

import bisect
import copy
import time
from typing import TYPE_CHECKING, Any

from .errors import ApiStatusError, bad_request
from .objects import Encoded
from .resources import Resource
from .selectors import Filter
from .store import Event, Store

if TYPE_CHECKING:
    from .http import Handler


def _line(event: dict[str, Any]) -> bytes:
    return Encoded.of(event).data + b"\n"


def _bookmark(res: Resource, rv: int) -> dict[str, Any]:
    return {
        "type": "BOOKMARK",
        "object": {"kind": res.kind, "apiVersion": res.api_version, "metadata": {"resourceVersion": str(rv)}},
    }


def _watch_event(event: Event, flt: Filter) -> dict[str, Any] | None:
    """The event as this watcher sees it: selector transitions become ADDED/DELETED."""
    if event.resource != flt.res.plural:
        return None
    now = flt.matches(event.obj)
    before = flt.matches(event.old) if event.old is not None else False
    if event.type == "ADDED":
        return {"type": "ADDED", "object": event.obj} if now else None
    if event.type == "DELETED":
        return {"type": "DELETED", "object": event.obj} if before or now else None
    if now and before:
        return {"type": "MODIFIED", "object": event.obj}
    if now:
        return {"type": "ADDED", "object": event.obj}
    if before:
        return {"type": "DELETED", "object": event.obj}
    return None


def serve_watch(
    store: Store,
    handler: Handler,
    flt: Filter,
    query: dict[str, str],
    *,
    bookmark_interval: float | None,
    default_timeout: float,
) -> None:
    """Stream ``flt``'s events to ``handler`` until the timeout, a 410, or the server going down."""
    res = flt.res
    rv_text = query.get("resourceVersion", "")
    try:
        timeout = float(query["timeoutSeconds"]) if query.get("timeoutSeconds") else default_timeout
    except ValueError:
        raise bad_request(f"invalid timeoutSeconds: {query.get('timeoutSeconds')!r}") from None
    bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
    if rv_text not in ("", "0"):
        try:
            start_rv: int | None = int(rv_text)
        except ValueError:
            raise ApiStatusError(400, "BadRequest", f"invalid resource version: {rv_text}") from None
    else:
        start_rv = None
    deadline = time.monotonic() + timeout

    with store.lock:
        epoch = store.epoch
        initial: list[dict[str, Any]] = []
        if start_rv is None:
            initial = [{"type": "ADDED", "object": copy.deepcopy(obj)} for _, obj in store.matching(flt)]
            last = store.rv
        else:
            last = start_rv
    handler.start_stream()
    try:
        for event in initial:
            handler.send_chunk(_line(event))
        next_bookmark = time.monotonic() + bookmark_interval if bookmarks and bookmark_interval else None
        while True:
            pending: list[dict[str, Any]] = []
            expired: dict[str, Any] | None = None
            with store.cond:
                while True:
                    if store.epoch != epoch:  # the server went down: cut the stream, no clean end
                        handler.close_connection = True
                        return
                    if last < store.compacted_rv:
                        expired = ApiStatusError(
                            410, "Expired", f"too old resource version: {last} ({store.compacted_rv + 1})"
                        ).status()
                        break
                    if store.rv > last:
                        index = bisect.bisect_right(store.history_rvs, last)
                        for stored in list(store.history)[index:]:
                            converted = _watch_event(stored, flt)
                            if converted is not None:
                                pending.append(converted)
                        last = store.rv
                        if pending:
                            break
                    now = time.monotonic()
                    if now >= deadline or (next_bookmark is not None and now >= next_bookmark):
                        break
                    wake = deadline if next_bookmark is None else min(deadline, next_bookmark)
                    store.cond.wait(timeout=min(max(wake - now, 0.0), 0.5))
            if expired is not None:
                handler.send_chunk(_line({"type": "ERROR", "object": expired}))
                break
            for event in pending:
                handler.send_chunk(_line(event))
            now = time.monotonic()
            if bookmarks and next_bookmark is not None and now >= next_bookmark:
                handler.send_chunk(_line(_bookmark(res, last)))
                next_bookmark = now + (bookmark_interval or 0)
            if now >= deadline:
                if bookmarks:
                    handler.send_chunk(_line(_bookmark(res, last)))
                break
        handler.end_stream()
    except (BrokenPipeError, ConnectionResetError, OSError):
        handler.close_connection = True
