"""What a sweep found: :class:`Finding` (one judgement), :class:`HostHealth` (one target's), and
the JUnit writer (one test case per target and group of checks)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: The groups a finding's ``check`` names — the JUnit test cases of a host, in this order
#: (``ssh`` only when the host could not be reached); the OCS has the one group ``ocs``.
GROUPS = ("ssh", "gpu", "nic", "rdma", "optics", "roce")


@dataclass
class Finding:
    """One judgement on one target. ``code`` is stable for machines (``gpu.xid``,
    ``optics.rx_power_low``, …: the list is in docs/health.md); ``component`` names the part
    (``gpu3``, ``ens1f0np0``, ``nic1``, ``mlx5_1/1``, ``port7``); ``value`` is what was read and
    ``limit`` what it was judged against, in ``unit``. ``check`` is the group (the JUnit test
    case: ssh | gpu | nic | rdma | optics | roce | ocs), ``source`` the named check that judged
    (``xid``, ``nvlink``…: ``mfctl health --list-checks``). The message says all of it for people."""

    host: str
    severity: str  # warning | critical
    check: str  # ssh | gpu | nic | rdma | optics | roce | ocs (the JUnit test case)
    message: str
    code: str = ""
    component: str | None = None
    value: Any = None
    limit: Any = None
    unit: str | None = None
    source: str = ""  # the named check (mfctl/health/checks); "" for findings of no check (ssh, a run's sampler)

    def to_dict(self) -> dict:
        return self.__dict__.copy()

    @property
    def shared_message(self) -> str:
        """The message as hosts that fail the same way share it, for folding them into one line:
        an unreachable host's own ``address:port`` (its ``value``) reads ``<address>:<port>``."""
        from mfctl.transport.ssh import without_endpoint

        if self.code != "ssh.unreachable" or not isinstance(self.value, str):
            return self.message
        return without_endpoint(self.message, self.value)


@dataclass
class HostHealth:
    """One target's sweep: its findings, and what the checks saw (``gpus`` nvidia-smi reported,
    lane netdevs up and down, each NIC's counter reading for the history). ``elapsed_s``: wall
    seconds of the target's sweep."""

    host: str
    gpus: int = 0
    links_up: list[str] = field(default_factory=list)
    links_down: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    elapsed_s: float = 0.0
    reachable: bool = True
    kind: str = "host"  # host | ocs
    gpu_by_pci: dict[tuple[str, str], int] = field(default_factory=dict)  # (bus, device) → GPU index
    nic_counters: dict[str, dict] = field(default_factory=dict)  # NIC → {"t": epoch s, "counters": {name: value}}

    @property
    def worst(self) -> str:
        sev = [f.severity for f in self.findings]
        return "critical" if "critical" in sev else ("warning" if "warning" in sev else "ok")

    @property
    def exit_code(self):
        """This target's outcome (DESIGN §9): UNREACHABLE, FAILED when anything is critical, else OK."""
        from mfctl.errors import ExitCode

        return ExitCode.UNREACHABLE if not self.reachable else ExitCode.FAILED if self.worst == "critical" else ExitCode.OK

    def to_dict(self) -> dict:
        return {"host": self.host, "status": self.worst, "gpus": self.gpus, "links_up": self.links_up,
                "links_down": self.links_down, "reachable": self.reachable, "findings": [f.to_dict() for f in self.findings],
                "elapsed_s": round(self.elapsed_s, 4)}


def _case(hh: HostHealth, group: str):
    """One test case of ``hh`` (:class:`mfctl.junit.Case`)."""
    from mfctl.junit import Case

    fs = [f for f in hh.findings if f.check == group]
    c = Case(group, classname=hh.host)
    if not hh.reachable and group not in ("ssh", "ocs"):  # not checked is not passed
        c.outcome, c.message = "skipped", f"{hh.host} was not reachable"
        return c
    crit = [f for f in fs if f.severity == "critical"]
    if crit:
        c.outcome, c.message, c.detail = "failure", crit[0].message, "\n".join(f.message for f in crit)
    warn = [f for f in fs if f.severity == "warning"]
    if warn:
        c.system_out = "\n".join("warning: " + f.message for f in warn)
    return c


def junit(results: list[HostHealth], groups: tuple[str, ...] = GROUPS) -> str:
    """JUnit XML (:mod:`mfctl.junit`: valid against junit-10.xsd, control characters shown as
    ``\\xNN``): one test case per target and group of the checks that ran (``groups``, in
    :data:`GROUPS` order; ``ssh`` only for a host that could not be reached); critical findings are
    failures, warnings go to ``system-out``, an unreachable host's other cases are skipped."""
    from mfctl.junit import Suite, document

    suite = Suite("mfctl-health", junit_cases(results, groups), time=max((hh.elapsed_s for hh in results), default=0.0))
    return document([suite])


def junit_cases(results: list[HostHealth], groups: tuple[str, ...] = GROUPS) -> list:
    """The test cases of :func:`junit` (:class:`mfctl.junit.Case`), for a report of its own or a run's."""
    cases_out: list = []
    for hh in results:
        cases = ("ocs",) if hh.kind == "ocs" else tuple(g for g in GROUPS if g in groups or g == "ssh")
        for group in cases:
            if group == "ssh" and not any(f.check == "ssh" for f in hh.findings):
                continue
            cases_out.append(_case(hh, group))
        if cases_out and cases_out[-1].classname == hh.host:
            cases_out[-1].time = hh.elapsed_s  # the target's sweep time on its last case: the cases sum to the sweeps
    return cases_out
