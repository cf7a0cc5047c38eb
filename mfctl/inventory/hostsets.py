"""Host sets (ClusterShell syntax): the inventory hosts a ``--hosts``/``HOSTS`` value names
(:func:`select_hosts`: ``all``, ``gpu[01-04]!gpu02``, ``@region0``), and a list of hosts written
as one (:func:`hostset`: ``gpu[01-04]``)."""

from __future__ import annotations

from typing import Iterable


def hostset(hosts: Iterable[str]) -> str:
    """``gpu[01-04]`` for gpu01..gpu04 (names only: never resolved as ClusterShell @groups)."""
    from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet

    return str(NodeSet.fromlist(list(hosts), resolver=RESOLVER_NOGROUP))


MAX_SET = 100_000  # hosts a host set may expand to (ClusterShell expands ranges in memory: 10 M take seconds)


def _set_size(spec: str) -> int:
    """An upper bound of the names ``spec`` expands to, without expanding it: the sum over its
    operands (separated by ``,`` ``!`` ``&`` ``^`` outside brackets) of the product of each one's
    bracket groups' sizes (``a-b`` counts b-a+1, ``/step`` ignored)."""
    import re

    total, depth, word = 0, 0, ""
    for ch in spec + ",":
        depth += (ch == "[") - (ch == "]")
        if ch in ",!&^" and depth == 0:
            n = 1
            for group in re.findall(r"\[([^\]]*)\]", word):
                size = 0
                for part in group.split(","):
                    lo, _, hi = part.partition("-")
                    hi = hi.split("/")[0]
                    size += int(hi) - int(lo) + 1 if lo.isdigit() and hi.isdigit() else 1
                n *= max(size, 1)
            total, word = total + n, ""
        else:
            word += ch
    return total


def _unpadded(name: str) -> str:
    import re

    return re.sub(r"\d+", lambda m: str(int(m[0])), name)


def _refuse_before_parsing(spec: str, shown: str, groups: dict[str, list[str]]) -> None:
    """A set that starts with an operator, names an unknown @group or expands past MAX_SET: UsageError."""
    import re

    from mfctl.errors import UsageError

    if spec.lstrip()[:1] in ("!", "&", "^"):
        raise UsageError(f"host set {shown!r} starts with {spec.lstrip()[0]!r}, which takes hosts away from (or intersects "
                         f"with) a set before it: e.g. all{spec.lstrip()}")
    for g in re.findall(r"@([^,!&^\s\[\]]*)", spec):
        if g not in groups:
            have = ", ".join(f"@{n}" for n in groups) or "none"
            raise UsageError(f"unknown group @{g} in host set {shown!r}; the groups are the inventory's regions: {have}")
    if _set_size(spec) > MAX_SET:
        raise UsageError(f"host set {shown!r} expands to more than {MAX_SET:,} names")


def _refuse_unknown(unknown, known: list[str]) -> None:
    """Names the inventory does not have: UsageError, with the padded names meant (gpu[1-2] for gpu01, gpu02)."""
    from mfctl.errors import UsageError

    have = {_unpadded(h): h for h in known}  # names are matched exactly, padding included
    near = [have[_unpadded(u)] for u in unknown if _unpadded(u) in have]
    hint = f" (did you mean {hostset(near)}? names are matched exactly, zero padding included)" if near else ""
    raise UsageError(f"unknown host(s) {str(unknown)[:200]}{hint}; the inventory has {hostset(known)}")


def select_hosts(spec: str, known: list[str], groups: dict[str, list[str]] | None = None) -> list[str]:
    """The inventory hosts a host set names: ``all``, ``gpu01,gpu03``, ``gpu[01-04]``,
    ``gpu[01-04]!gpu02`` (ClusterShell syntax) or ``@GROUP`` for one of ``groups`` (the
    inventory's regions). Raises UsageError for an empty or malformed set, an unknown group, a set
    larger than :data:`MAX_SET`, or names the inventory does not have (folded: ``gpu[05-99]``)."""
    import re

    from mfctl.errors import UsageError

    if not spec.strip():
        raise UsageError("empty host set (all, gpu01,gpu02 or gpu[01-04])")
    if spec.strip() == "all":
        return list(known)
    shown = spec if len(spec) <= 120 else spec[:100] + f"… ({len(spec):,} characters)"  # messages quote it, and logs
    groups = groups or {}
    _refuse_before_parsing(spec, shown, groups)
    from ClusterShell.NodeSet import NodeSet, NodeSetExternalError, NodeSetParseError  # not for "all"
    from ClusterShell.NodeUtils import GroupResolver, GroupSource

    if re.search(r"(^|[,!&^])\s*all\s*($|[,!&^])", spec):  # "all" inside an expression: every inventory host
        spec = re.sub(r"(?<![\w@.-])all(?![\w.-])", hostset(known), spec)
    resolver = GroupResolver(GroupSource("inventory", {g: ",".join(hs) for g, hs in groups.items()}))
    try:
        ns = NodeSet(spec, resolver=resolver)
    except (NodeSetParseError, NodeSetExternalError, ValueError) as e:
        if "bad range" in str(e):  # ClusterShell's own words quote its int() error: say what a range is
            raise UsageError(f"bad host set {shown!r}: brackets hold a numeric range, as in gpu[01-04] or "
                             "gpu[1,3,5-7]") from None
        raise UsageError(f"bad host set {shown!r}: {str(e)[:200]}") from None
    unknown = ns.difference(NodeSet.fromlist(known))
    if unknown:
        _refuse_unknown(unknown, known)
    if not ns:
        raise UsageError(f"host set {shown!r} names no host")
    return [h for h in ns]
