"""Keep the chained conflist in sync with the primary: inotify on the conf dir, plus a resync timer."""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from ..defaults import CONF_FILE
from .chain import CONFIG_EXTENSIONS, sync
from .errors import InstallError

log = logging.getLogger(__name__)

RESYNC_SECONDS = 60.0


def watch(
    conf_dir: str,
    dracni_conf: dict[str, Any],
    primary_name: str | None = None,
    filename: str = CONF_FILE,
    *,
    stop: threading.Event,
    resync_seconds: float = RESYNC_SECONDS,
    debounce_seconds: float = 0.05,
) -> None:
    """Keep the chained conflist in sync until ``stop`` is set.

    Every create/modify/move/delete of a config file in ``conf_dir`` triggers a ``sync``, and
    so does a timer every ``resync_seconds`` in case events were missed.  Errors are logged
    (once per distinct message) and retried; they never end the watch.  ``conf_dir`` is
    created when missing, and watched again when it is removed and comes back.
    """
    from inotify_simple import INotify, flags

    mask = (
        flags.CREATE
        | flags.CLOSE_WRITE
        | flags.MODIFY
        | flags.MOVED_TO
        | flags.MOVED_FROM
        | flags.DELETE
        | flags.ATTRIB
        | flags.DELETE_SELF
        | flags.MOVE_SELF
    )
    gone = flags.IGNORED | flags.DELETE_SELF | flags.MOVE_SELF
    last_message: list[str | None] = [None]

    def do_sync() -> None:
        try:
            primary = sync(conf_dir, dracni_conf, primary_name, filename)
            message = None if primary else f"no CNI network config in {conf_dir} yet: waiting for the primary CNI"
        except (InstallError, OSError) as exc:
            message = str(exc)
        if message and message != last_message[0]:
            log.warning("%s", message)
        elif not message and last_message[0]:
            log.info("%s is in sync again", os.path.join(conf_dir, filename))
        last_message[0] = message

    notifier = INotify()
    try:
        watching = False
        next_sync = 0.0
        while not stop.is_set():
            if not watching:
                try:
                    os.makedirs(conf_dir, 0o755, exist_ok=True)
                    notifier.add_watch(conf_dir, mask)
                    watching = True
                    next_sync = 0.0  # whatever happened while unwatched
                except OSError as exc:
                    log.warning("cannot watch %s: %s", conf_dir, exc)
            if time.monotonic() >= next_sync:
                do_sync()
                next_sync = time.monotonic() + (resync_seconds if watching else min(resync_seconds, 1.0))
            timeout = max(0.0, min(next_sync - time.monotonic(), 0.25))
            if not watching:
                stop.wait(timeout)
                continue
            events = notifier.read(timeout=int(timeout * 1000))
            if not events:
                continue
            if any(ev.mask & gone for ev in events):
                watching = False
            if not any(ev.mask & gone or os.path.splitext(ev.name)[1] in CONFIG_EXTENSIONS for ev in events):
                continue  # temp files (ours and others'), unrelated names
            time.sleep(debounce_seconds)  # a burst (write + rename, several files) becomes one sync
            if any(ev.mask & gone for ev in notifier.read(timeout=0)):
                watching = False
            next_sync = 0.0
    finally:
        notifier.close()
