"""Processes on this machine, named so that a later process given the same pid is not mistaken
for them: a pid together with its start time."""

from __future__ import annotations


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
