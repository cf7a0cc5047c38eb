"""Provisioning's data: an :class:`Action` (one change on one target, with its commands), a host's
:class:`HostPlan`, the :class:`HostActual` state read from it, and the :class:`PlanContext` a plan
step works in (:mod:`mfctl.provision.steps`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mfctl.errors import ExitCode
from mfctl.hosts import iproute, mellanox
from mfctl.provision.models import FirmwareManifest, ProvisionSpec

PHASES = ["firmware", "firmware-settings", "firmware-reset", "links", "addresses", "rails", "qos", "roce", "irq", "gpudirect",
          "gpu"]


@dataclass
class Action:
    phase: str
    target: str  # e.g. "nic0 (0000:0c:00.0)" or "ens1f0np0"
    what: str
    before: str
    after: str
    argvs: list[list[str]]
    needs: list[str] = field(default_factory=list)
    manual: str | None = None  # why it cannot be automated (apply fails here)
    expect: dict | None = None  # e.g. {"stdout_startswith": sha256}
    #: seconds each of ``argvs`` may take (None: the pool's per-command timeout); a firmware burn and
    #: an mlxfwreset get theirs from the settings ``firmware_burn_timeout`` / ``firmware_reset_timeout``
    timeout_s: float | None = None
    #: what a long step is doing, for the progress display ("burning 22.39.1002 on nic0 (up to 900 s)")
    progress: str | None = None
    #: a per-target result that runs nothing and does not block the host: ``OUTCOME_UNSUPPORTED``
    #: and ``OUTCOME_NO_PIN`` are findings, not drift; ``OUTCOME_REBOOT`` is drift that only a
    #: person can close (the reboot named in ``after``)
    outcome: str | None = None

    @property
    def is_drift(self) -> bool:
        """Something to change on the host (a command to run, a MANUAL step, a reboot to do)."""
        return self.outcome is None or self.outcome == OUTCOME_REBOOT

    @property
    def runs(self) -> bool:
        """Apply runs this action's commands (an outcome is reported, never run)."""
        return self.outcome is None

    def to_dict(self) -> dict:
        return {"phase": self.phase, "target": self.target, "what": self.what, "before": self.before,
                "after": self.after, "commands": [" ".join(a) for a in self.argvs], "needs": self.needs,
                "manual": self.manual, "timeout_s": self.timeout_s, "progress": self.progress, "outcome": self.outcome}


#: :attr:`Action.outcome` values
OUTCOME_UNSUPPORTED = "not supported on this card"
OUTCOME_NO_PIN = "no pinned image"
OUTCOME_REBOOT = "reboot required"


@dataclass
class HostPlan:
    host: str
    actions: list[Action] = field(default_factory=list)
    error: str | None = None  # could not read the host

    @property
    def exit_code(self) -> ExitCode:
        """UNREACHABLE (4) when the host could not be read, DRIFT (6) when it has actions that are
        drift (:attr:`Action.is_drift`: a finding such as "not supported on this card" is not), else OK."""
        return (ExitCode.UNREACHABLE if self.error else ExitCode.DRIFT if any(a.is_drift for a in self.actions)
                else ExitCode.OK)

    def to_dict(self) -> dict:
        return {"host": self.host, "error": self.error, "actions": [a.to_dict() for a in self.actions]}


@dataclass
class HostActual:
    fw: dict[str | None, mellanox.FirmwareDevice]  # by PCI
    mlx: dict[str, mellanox.MlxconfigDevice]
    ports: dict[str, mellanox.DevlinkPort]
    ifaces: dict[str, iproute.Iface]
    qos: dict[str, mellanox.QosState]  # by NIC name
    gpus: list[dict]
    more: dict[str, Any] = field(default_factory=dict)  #: what a step read for itself, by step name


@dataclass
class PlanContext:
    """What a plan step works from: host ``host`` (index ``hi`` in ``inv``), the recipe and the
    firmware manifest, the host's actual state. Steps add to ``reset`` the PCI addresses of NICs
    that need an mlxfwreset, and to ``resplit`` the NICs whose ports are re-split (their lanes
    appear after the reset)."""

    inv: Any
    hi: int
    host: Any
    spec: ProvisionSpec
    manifest: FirmwareManifest | None
    act: HostActual
    reset: set[str] = field(default_factory=set)
    resplit: set[str] = field(default_factory=set)
