"""Provisioning, the service the CLI calls: read actual state over SSH, compare with the desired
state, plan, apply (in safe rollout batches), verify; the end-to-end checks, the optics check and
firmware compliance.

One module per job — :mod:`~mfctl.provision.plan` (read, compare, the actions in safe order),
:mod:`~mfctl.provision.apply` (apply, re-plan after a NIC reset, verify), :mod:`~mfctl.provision.rollout`
(batches, Slurm drain, the management-NIC guard), :mod:`~mfctl.provision.journal` (per-run records),
:mod:`~mfctl.provision.checks` (show_gids, ib_write_bw, PFC counters), :mod:`~mfctl.provision.optics`,
:mod:`~mfctl.provision.firmware` — gathered here. Every fan-out goes through
:meth:`mfctl.transport.ssh.SSHPool.map` (at most ``fanout`` hosts at once) and reports to an
:class:`mfctl.observer.Observer` (a phase — ``plan``, ``apply``, ``verify``, ``optics``,
``firmware``, ``check`` — then each host started and done); the per-host results carry an ``exit_code``, so
:meth:`mfctl.transport.results.Results.of` gives the command's.
"""

from mfctl.provision.apply import ApplyResult, apply, replanner, verify
from mfctl.provision.checks import check_paths
from mfctl.provision.checks import exit_code as checks_exit_code
from mfctl.provision.firmware import HostFirmware, firmware_check
from mfctl.provision.optics import check_optics, recent_ocs_changes
from mfctl.provision.plan import PHASES, Action, HostActual, HostPlan, plan, plan_host, read_actual
from mfctl.provision.rollout import SlurmDrain, batches
from mfctl.provision.rollout import roll as rollout

__all__ = ["PHASES", "Action", "ApplyResult", "HostActual", "HostFirmware", "HostPlan", "SlurmDrain", "apply", "batches",
           "check_optics", "check_paths", "checks_exit_code", "firmware_check", "plan", "plan_host", "read_actual",
           "recent_ocs_changes", "replanner", "rollout", "verify"]
