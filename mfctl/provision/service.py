"""Provisioning, the service the CLI calls: read actual state over SSH, compare with the desired
state, plan, apply, verify; the optics check and firmware compliance.

One module per job — :mod:`~mfctl.provision.plan` (read, compare, the actions in safe order),
:mod:`~mfctl.provision.apply` (apply, verify, the journal), :mod:`~mfctl.provision.optics`,
:mod:`~mfctl.provision.firmware` — gathered here. Every fan-out goes through
:meth:`mfctl.transport.ssh.SSHPool.map` (at most ``fanout`` hosts at once) and reports to an
:class:`mfctl.observer.Observer` (a phase — ``plan``, ``apply``, ``verify``, ``optics``,
``firmware`` — then each host started and done); the per-host results carry an ``exit_code``, so
:meth:`mfctl.transport.results.Results.of` gives the command's.
"""

from mfctl.provision.apply import ApplyResult, apply, verify
from mfctl.provision.firmware import HostFirmware, firmware_check
from mfctl.provision.optics import check_optics
from mfctl.provision.plan import PHASES, Action, HostActual, HostPlan, plan, plan_host, read_actual

__all__ = ["PHASES", "Action", "ApplyResult", "HostActual", "HostFirmware", "HostPlan", "apply", "check_optics",
           "firmware_check", "plan", "plan_host", "read_actual", "verify"]
