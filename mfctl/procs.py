"""Processes on this machine, named so that a later process given the same pid is not mistaken
for them: a pid together with its start time."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterable


def start_ticks(pid: int) -> int | None:
    """Process ``pid``'s start time (clock ticks since boot, field 22 of ``/proc/PID/stat``,
    proc(5)), or None when there is no such process or it has exited (a zombie its parent has not
    reaped yet: state Z or X)."""
    try:
        with open(f"/proc/{int(pid)}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # fields 3 (state) and on: the name may hold ") "
    except (OSError, IndexError, ValueError):
        return None
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    try:
        return int(fields[19])
    except ValueError:
        return None


def reap(procs: Iterable[subprocess.Popen], deadline: float, on_kill: Callable[[subprocess.Popen], None]) -> None:
    """Wait for each of ``procs`` until ``deadline`` (``time.monotonic()``), then for each one still
    running call ``on_kill(p)`` (to say so), SIGKILL its process group and wait for it: nothing is left."""
    procs = list(procs)
    for p in procs:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for p in procs:
        if p.poll() is None:
            on_kill(p)
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            p.wait()
