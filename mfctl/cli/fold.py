"""Fold identical per-host results into one line with a compact host set (``gpu[01-04]``):
how ``mfctl exec`` and ``mfctl health`` render many hosts."""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Iterable, TypeVar

from mfctl.inventory.hostsets import hostset

T = TypeVar("T")


def one_host(hostset_text: str) -> bool:
    """Whether a folded host set (:func:`hostset`) names a single host (``gpu03``, not ``gpu[01-02]``)."""
    return "," not in hostset_text and "[" not in hostset_text


def fold(items: Iterable[T], host: Callable[[T], str], key: Callable[[T], object]) -> list[tuple[str, T]]:
    """Group ``items`` by ``key``; return ``(folded host set, first item)`` in first-seen order."""
    groups: "OrderedDict[object, list[T]]" = OrderedDict()
    for it in items:
        groups.setdefault(key(it), []).append(it)
    return [(hostset(host(i) for i in g), g[0]) for g in groups.values()]
