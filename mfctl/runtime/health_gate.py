"""The run's health gate: ``mfctl health``'s sweep before anything starts, and the one place in
``runtime/`` that imports the health package (:mod:`mfctl.runtime.sampler` takes it from here).

:func:`sweep` runs the checks (the OCS apart: the run reads it itself) against the NIC counters'
history that ``mfctl health`` keeps, keeps the new readings, stores each host's findings;
:meth:`Preflight.gate` then stops the run on an unreachable host (UnreachableError, exit 4) or a
critical finding (OperationFailed, exit 1; ``--skip-health`` lets the latter pass).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Callable

from mfctl import health  # the health package's one import in runtime/
from mfctl.errors import OperationFailed, UnreachableError

log = logging.getLogger(__name__)
parse_overrides = health.parse_overrides  # `mfctl run --threshold NAME=VALUE`


@dataclass
class Preflight:
    """One sweep's results (:class:`mfctl.health.HostHealth`), its wall seconds and the NIC
    counters' history it was judged against (the in-run samples continue it)."""

    results: list = field(default_factory=list)
    seconds: float = 0.0
    history: dict | None = None

    @property
    def hosts(self) -> list[dict]:
        return [h.to_dict() for h in self.results]

    @property
    def healthy(self) -> int:
        return sum(h.worst == "ok" for h in self.results)

    def summary(self) -> dict:
        """The summary's ``health``: ``{hosts, ok, sweep_s}``."""
        return {"hosts": len(self.results), "ok": self.healthy, "sweep_s": self.seconds}

    def gate(self, skip_health: bool) -> None:
        unreachable = [h for h in self.results if not h.reachable]
        if unreachable:
            raise UnreachableError("unreachable: " + "; ".join(f"{h.host}: {f.message}" for h in unreachable
                                                               for f in h.findings[:1]))
        crit = [f for h in self.results for f in h.findings if f.severity == "critical"]
        if crit and not skip_health:
            msg = "; ".join(f"{f.host}: {f.message}" for f in crit[:5])
            raise OperationFailed(f"health sweep found {len(crit)} critical problem(s): {msg}")


def sweep(pool, inv, *, limits: dict[str, float], store: Callable[[str, str, list], None]) -> Preflight:
    """``mfctl health``'s checks on every host (``limits``: threshold overrides); ``store(host,
    worst, findings)`` gets each host's."""
    t = time.monotonic()
    before = health.load_baseline(inv)  # the NIC counters' history, as `mfctl health` keeps it
    res = health.sweep(pool, inv, limits=limits, baseline=before).targets  # the default checks
    try:
        health.save_baseline(inv, res, before)
    except OSError as e:
        log.warning("NIC counters of the pre-flight sweep not kept: %s", e)
    for h in res:
        store(h.host, h.worst, [f.to_dict() for f in h.findings])
    return Preflight(results=res, seconds=time.monotonic() - t, history=before)
