"""Fold identical per-host results into one line with a compact host set (``gpu[01-04]``),
using ClusterShell's NodeSet."""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Iterable, TypeVar

T = TypeVar("T")


def hostset(hosts: Iterable[str]) -> str:
    """``gpu[01-04]`` for gpu01..gpu04 (names only: never resolved as ClusterShell @groups)."""
    from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet

    return str(NodeSet.fromlist(list(hosts), resolver=RESOLVER_NOGROUP))


def fold(items: Iterable[T], host: Callable[[T], str], key: Callable[[T], object]) -> list[tuple[str, T]]:
    """Group ``items`` by ``key``; return ``(folded host set, first item)`` in first-seen order."""
    groups: "OrderedDict[object, list[T]]" = OrderedDict()
    for it in items:
        groups.setdefault(key(it), []).append(it)
    return [(hostset(host(i) for i in g), g[0]) for g in groups.values()]


def select_hosts(spec: str, known: list[str]) -> list[str]:
    """The inventory hosts a host set names: ``all``, ``gpu01,gpu03`` or ``gpu[01-04]``
    (ClusterShell syntax, no ``@groups``). Raises UsageError for an empty or malformed set, a
    set of more hosts than exist, or names the inventory does not have (folded: ``gpu[05-99]``)."""
    from mfctl.errors import UsageError

    if not spec.strip():
        raise UsageError("empty host set (all, gpu01,gpu02 or gpu[01-04])")
    if spec.strip() == "all":
        return list(known)
    from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet, NodeSetExternalError, NodeSetParseError  # not for "all"

    try:
        ns = NodeSet(spec, resolver=RESOLVER_NOGROUP)
    except (NodeSetParseError, NodeSetExternalError) as e:
        raise UsageError(f"bad host set {spec!r}: {e}") from None
    if len(ns) > len(known):
        raise UsageError(f"host set {spec!r} names {len(ns)} hosts; the inventory has {len(known)}: {hostset(known)}")
    names = list(ns)
    unknown = [h for h in names if h not in set(known)]
    if unknown:
        raise UsageError(f"unknown host(s) {hostset(unknown)}; the inventory has {hostset(known)}")
    return names
