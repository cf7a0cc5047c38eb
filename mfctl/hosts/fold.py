"""Fold identical per-host results into one line with a compact host set (``gpu[01-04]``),
using ClusterShell's NodeSet."""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Iterable, TypeVar

T = TypeVar("T")


def hostset(hosts: Iterable[str]) -> str:
    from ClusterShell.NodeSet import NodeSet

    return str(NodeSet.fromlist(list(hosts)))


def fold(items: Iterable[T], host: Callable[[T], str], key: Callable[[T], object]) -> list[tuple[str, T]]:
    """Group ``items`` by ``key``; return ``(folded host set, first item)`` in first-seen order."""
    groups: "OrderedDict[object, list[T]]" = OrderedDict()
    for it in items:
        groups.setdefault(key(it), []).append(it)
    return [(hostset(host(i) for i in g), g[0]) for g in groups.values()]
