"""Durations and GPU lists as the health messages say them."""

from __future__ import annotations


def ago(seconds: float) -> str:
    """``45 s``, ``12 min``, ``5 h``, ``3 d`` (whole units, rounded down; a second short of a unit is
    the unit: /proc/uptime has two decimals, dmesg six)."""
    seconds += 1.0
    for unit, n in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= n:
            return f"{int(seconds // n)} {unit}"
    return f"{int(seconds - 1.0)} s"


def span(seconds: float) -> str:
    """A configured duration as given: ``1 d``, ``90 min``, ``5400.5 s`` (the largest unit that divides it)."""
    for unit, n in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= n and seconds % n == 0:
            return f"{int(seconds // n)} {unit}"
    return f"{seconds:g} s"


def indexes(ix: list[int]) -> str:
    """GPU indexes for a message: ``0-7`` when contiguous, else ``0, 3, 5``."""
    if len(ix) > 1 and ix == list(range(ix[0], ix[-1] + 1)):
        return f"{ix[0]}-{ix[-1]}"
    return ", ".join(map(str, ix))
