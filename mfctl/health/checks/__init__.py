"""The table of named checks (``mfctl health --checks``, ``--list-checks``).

A new check is a :class:`~mfctl.health.checks.base.Check` in a module of this package (its
commands, the parser from :mod:`mfctl.hosts`, its judge), added to :data:`CHECKS`; the runner,
the selection, the CLI's table and the JUnit groups follow.
"""

from __future__ import annotations

import re

from mfctl.health.checks import gpu, nic, ocs, optics, rdma
from mfctl.health.checks.base import Check, Probe

#: Every host check, in the order they run on a host (a check's facts are there for later ones).
CHECKS: dict[str, Check] = {c.name: c for c in (gpu.GPU, nic.LINKS, gpu.XID, gpu.NVLINK, rdma.RDMA, rdma.GIDS, nic.SPEED,
                                                 optics.OPTICS, nic.COUNTERS, nic.ROCE, gpu.DCGM)}
#: Every check's name: the host checks, then the OCS.
NAMES = (*CHECKS, ocs.NAME)
#: What ``mfctl health`` runs when no --checks is given (the opt-in ones apart: dcgm).
DEFAULT = tuple(n for n in NAMES if n == ocs.NAME or CHECKS[n].default)


def _unknown(name: str, spec: str):
    from mfctl.errors import UsageError

    return UsageError(f"--checks {spec!r}: unknown check {name!r}; the checks are {', '.join(NAMES)} "
                      "(mfctl health --list-checks)")


#: one item of --checks: a name, or one sign directly before it
_ITEM = re.compile(r"([+-]?)([a-z][a-z0-9_]*)")


def _apply(items: list[str], spec: str) -> tuple[set[str], set[str]]:
    """The checks ``items`` choose, and the ones they remove by name."""
    from mfctl.errors import UsageError

    for i in items:
        m = _ITEM.fullmatch(i)
        if m is None:
            raise UsageError(f"--checks {spec!r}: {i!r} is not NAME, +NAME or -NAME (one sign, directly before a "
                             f"check's name); the checks are {', '.join(NAMES)}")
        if m.group(2) not in NAMES:
            raise _unknown(m.group(2), spec)
    bare = [i for i in items if i[0] not in "+-"]
    chosen, removed = set(bare) if bare else set(DEFAULT), set()
    for i in items:
        name = i.lstrip("+-")
        if i[0] == "-":
            chosen.discard(name)
            removed.add(name)
        elif i[0] == "+":
            chosen.add(name)
    return chosen, removed


def _with_needs(chosen: set[str], removed: set[str], spec: str) -> set[str]:
    """``chosen`` and the checks they need; a needed check that was removed by name is a UsageError."""
    from mfctl.errors import UsageError

    out = set(chosen)
    for name in sorted(chosen & set(CHECKS)):
        for need in CHECKS[name].needs:
            if need in removed:
                raise UsageError(f"--checks {spec!r}: {name} needs {need} ({CHECKS[need].runs}): remove {name} too "
                                 f"(-{name}) or keep {need}")
            out.add(need)
    return out


def select_checks(spec: str | None, *, without: tuple[str, ...] = ()) -> list[str]:
    """The checks a ``--checks`` value names, in :data:`NAMES` order: ``+name`` adds to the default
    set, ``-name`` removes from it, bare names are exactly these (then ``+``/``-`` apply to them);
    a check another selected one needs (``optics`` needs ``links``) comes with it. None or empty:
    :data:`DEFAULT`. Raises UsageError (exit 2) for an unknown name, a needed check removed, or
    nothing selected. ``without``: checks a separate option removes (``--no-ocs``), named as that in errors."""
    from mfctl.errors import UsageError

    text = spec or ""
    items = [s.strip() for s in text.split(",") if s.strip()]
    chosen = _with_needs(*_apply(items, text), text) if items else set(DEFAULT)
    chosen -= set(without)
    if not chosen:
        also = f" without {', '.join(without)}" if without else ""
        raise UsageError(f"--checks {text!r}{also} selects no check; the checks are {', '.join(NAMES)}")
    return [n for n in NAMES if n in chosen]


def table() -> list[dict]:
    """One row per check: name, group, what it runs, what it judges, default or opt-in, what it needs."""
    rows = [{"name": c.name, "group": c.group, "runs": c.runs, "judges": c.judges, "default": c.default,
             "needs": list(c.needs)} for c in CHECKS.values()]
    rows.append({"name": ocs.NAME, "group": ocs.GROUP, "runs": ocs.RUNS, "judges": ocs.JUDGES, "default": True, "needs": []})
    return rows


__all__ = ["CHECKS", "DEFAULT", "NAMES", "Check", "Probe", "select_checks", "table"]
