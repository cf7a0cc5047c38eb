"""The mock's watch on the process that started it (``python -m mfctl.mock serve --owner-pid``).

Light on purpose (os, select, :mod:`mfctl.procs`): the watch begins before the mock imports its
servers (~1-3 s of a loaded machine), so a run killed with -9 that early is seen at once too.
"""

from __future__ import annotations

import os
import select
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

from mfctl.procs import start_ticks

POLL_S = 0.2  #: how often the owner is looked at where no pidfd tells (and how soon a watch ends), s


def owner_gone(pid: int, ticks: int | None) -> bool:
    """Process ``pid`` (started at ``ticks``, :func:`mfctl.procs.start_ticks`; None: whatever its
    start time) is no longer running (a zombie counts as gone)."""
    now = start_ticks(pid)
    return now is None or (ticks is not None and now != ticks)


def watch(pid: int, ticks: int | None, on_gone: Callable[[], None], *, done: Callable[[], bool] = lambda: False,
          poll_s: float = POLL_S) -> None:
    """Call ``on_gone()`` as soon as process ``pid`` (started at ``ticks``) is gone — told by the
    kernel through a pidfd (``pidfd_open(2)``: readable once the process has exited), else by
    polling its start time every ``poll_s`` s — unless ``done()`` is true by then (it is asked
    before each wait and once more before ``on_gone``). Blocks: run it in a thread of its own."""
    try:
        fd: int | None = os.pidfd_open(pid)
    except (OSError, AttributeError):  # gone already, or no pidfd (Linux < 5.3)
        fd = None
    try:
        while not done():
            if owner_gone(pid, ticks):  # (after the pidfd is open: a reused pid has another start time)
                if not done():  # (what it waited for may have come meanwhile: the owner then left on purpose)
                    on_gone()
                return
            if fd is None:
                time.sleep(poll_s)
            else:
                select.select([fd], [], [], poll_s)  # readable once the owner has exited: checked above
    finally:
        if fd is not None:
            os.close(fd)


def watch_in_background(pid: int, ticks: int | None, until: Path | None = None) -> threading.Thread:
    """SIGTERM this process once ``pid`` is gone (until file ``until`` exists, if given: the mock's
    ``status.json``, for an owner that only waits for the mock to be up). SIGTERM, not an exit:
    before the mock's handlers are in place it ends the process (nothing is started yet), after
    it stops the mock cleanly, a start under way included."""
    t = threading.Thread(target=watch, args=(pid, ticks, lambda: os.kill(os.getpid(), signal.SIGTERM)),
                         kwargs={"done": (lambda: until.exists()) if until is not None else (lambda: False)},
                         daemon=True, name="mock-owner")
    t.start()
    return t
