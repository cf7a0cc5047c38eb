"""The one runner of the health sweep: every selected check on every host, over the pool's
fan-out (:meth:`mfctl.transport.ssh.SSHPool.map`), and the OCS beside them.

Per host the checks run in :data:`mfctl.health.checks.CHECKS` order on one :class:`Probe`: each
distinct command once, a host that cannot be reached given up at its first command (one
``ssh.unreachable`` finding, the other checks not run).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from mfctl.errors import ParseError
from mfctl.health.checks import CHECKS, ocs, select_checks
from mfctl.health.checks.base import Check, Probe
from mfctl.health.findings import GROUPS, Finding, HostHealth
from mfctl.health.thresholds import thresholds


def run_check(p: Probe, check: Check) -> None:
    """Run one check's commands on ``p``'s host, parse their output and judge it (see :class:`Check`)."""
    p.source, p.group = check.name, check.group
    data: dict = {}
    for key, argv in check.argv(p).items():
        r = (check.run or Probe.run)(p, argv)
        if p.gone is not None:
            return
        parse = check.parser(key)
        if parse is None:
            data[key] = r
        elif r.ok:
            try:
                data[key] = parse(r.stdout)
            except ParseError as e:
                p.add("warning", str(e), f"{check.group}.unparsable", component=argv[0])
    check.judge(p, data)


@dataclass
class _Failed:
    """Why a host's sweep gave no result (the MfctlError its function raised), as a CommandResult says it."""

    error: str
    endpoint: str = ""


def _unreachable(name: str, r) -> HostHealth:
    return HostHealth(name, reachable=False, findings=[
        Finding(name, "critical", "ssh", r.error, "ssh.unreachable", value=r.endpoint or None)])  # (see shared_message)


def sweep_host(pool, inv_host, checks: list[Check], lim: dict[str, float], *, now: float | None = None,
               baseline: dict | None = None, since_boot: bool = False) -> HostHealth:
    """One host's sweep: ``checks`` in order on one probe (``lim``: the full thresholds)."""
    t0 = time.monotonic()
    p = Probe(pool, inv_host, lim, now=time.time() if now is None else now, baseline=baseline, since_boot=since_boot)
    for c in checks:
        run_check(p, c)
        if p.gone is not None:
            break
    why = p.unreachable
    hh = p.health if why is None else _unreachable(p.name, why)
    hh.elapsed_s = time.monotonic() - t0
    return hh


@dataclass
class HealthReport:
    """A sweep's targets (hosts, then the OCS), the thresholds and the checks it ran."""

    targets: list[HostHealth]
    thresholds: dict[str, float]
    checks: list[str]

    def __iter__(self):
        return iter(self.targets)

    def __len__(self) -> int:
        return len(self.targets)

    @property
    def findings(self) -> list[Finding]:
        return [f for t in self.targets for f in t.findings]

    @property
    def healthy(self) -> bool:
        """No critical finding (warnings allowed)."""
        return not any(f.severity == "critical" for f in self.findings)

    @property
    def groups(self) -> tuple[str, ...]:
        """The groups of the host checks that ran (the JUnit test cases of each host)."""
        return tuple(g for g in GROUPS if any(CHECKS[n].group == g for n in self.checks if n in CHECKS))

    def exit_code(self):
        """DESIGN §9 for a sweep: 4 when no target could be reached, 1 when anything is critical
        (an unreachable host is), else 0 (:meth:`mfctl.transport.results.Results.exit_code`)."""
        from mfctl.transport.results import HostResult, Results

        return Results([HostResult(t.host, t, exit_code=t.exit_code) for t in self.targets]).exit_code(unreachable="all")

    def junit(self) -> str:
        from mfctl.health.findings import junit

        return junit(self.targets, self.groups)

    def to_dict(self) -> dict:
        """The ``mfctl.health/v1`` document (docs/health.md)."""
        return {"schema": "mfctl.health/v1", "healthy": self.healthy, "thresholds": self.thresholds,
                "checks": list(self.checks), "targets": [t.to_dict() for t in self.targets]}


def sweep(pool, inv, hosts: list[str] | None = None, *, checks: list[str] | None = None,
          limits: dict[str, float] | None = None, baseline: dict | None = None, since_boot: bool = False,
          ocs_state: dict | None = None, observer=None) -> HealthReport:
    """The health sweep: ``checks`` (names, :func:`mfctl.health.checks.select_checks`; default the
    default set) on ``hosts`` (default all) over ``pool`` (an SSHPool: its ``run`` and ``map``), then
    the OCS when ``ocs`` is
    among the checks and ``ocs_state`` is given: each OCS's state by name
    (:func:`mfctl.health.checks.ocs.read_states`; one OCS's :func:`~mfctl.health.checks.ocs.read_state` too).

    ``limits``: threshold overrides (:func:`mfctl.health.thresholds.thresholds`). NIC error counters
    are judged by what they gained over ``nic_error_window_s`` against the earlier sweeps' readings in
    ``baseline`` (:func:`mfctl.health.history.load_baseline`), as totals with ``since_boot``; each
    target's ``nic_counters`` holds this sweep's readings. ``observer`` hears the fan-out's phase
    (``health``, the number of hosts) and each host."""
    names = list(checks) if checks is not None else select_checks(None)
    host_checks = [CHECKS[n] for n in names if n in CHECKS]
    lim, now = thresholds(limits), time.time()
    hosts = list(hosts or [h.name for h in inv.hosts])

    def one(name: str) -> HostHealth:
        return sweep_host(pool, inv.host(name), host_checks, lim, now=now, baseline=baseline, since_boot=since_boot)

    res = pool.map(hosts, one, observer=observer, phase="health")
    targets = [r.value if isinstance(r.value, HostHealth) else _unreachable(r.host, _Failed(r.error or "no result"))
               for r in res]
    if ocs.NAME in names and ocs_state is not None:
        targets += ocs.judge_all(inv, ocs_state)
    return HealthReport(targets, lim, names)
