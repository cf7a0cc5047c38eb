"""Plan step for GPU settings (:func:`plan_gpu`): persistence through the persistence daemon and
MIG mode, symmetric both ways.

Persistence: ``nvidia-persistenced`` running and enabled (NVIDIA Driver Persistence docs:
persistence mode via ``nvidia-smi -pm`` "is near end-of-life and will be eventually deprecated in
favor of the Persistence Daemon"); ``persistence: false`` stops and disables the daemon, and turns
off a legacy ``-pm 1``. MIG: ``nvidia-smi -mig 1|0`` leaves the change *pending* until a GPU
reset on A100 (NVIDIA MIG user guide; ``mig.mode.pending``); a pending change that already
matches the recipe is planned once as "reboot required" (nothing is re-issued), not forever."""

from __future__ import annotations

from mfctl.provision.actions import OUTCOME_REBOOT, Action, PlanContext
from mfctl.provision.steps import gpudirect

UNIT = gpudirect.UNIT


def plan_gpu(ctx: PlanContext) -> list[Action]:
    """Persistence (daemon) and MIG mode of all GPUs."""
    return _plan_gpu(ctx.act, ctx.spec)


def _plan_gpu(act, spec) -> list[Action]:
    acts = []
    pm = [g.get("persistence_mode") for g in act.gpus]
    unit = act.more.get(gpudirect.MORE_KEY, {}).get("unit")
    if unit is not None:
        state = f"{UNIT} {unit[0]}/{unit[1] or 'not installed'}"
        if spec.gpu.persistence and unit != ("active", "enabled"):
            acts.append(Action("gpu", "all GPUs", "persistence daemon", state, f"{UNIT} active/enabled",
                               [["systemctl", "enable", "--now", UNIT]]))
        elif not spec.gpu.persistence and (unit[0] == "active" or unit[1] == "enabled"):
            acts.append(Action("gpu", "all GPUs", "persistence daemon", state, f"{UNIT} inactive/disabled",
                               [["systemctl", "disable", "--now", UNIT]]))
        elif not spec.gpu.persistence and any(v == "Enabled" for v in pm):
            acts.append(Action("gpu", "all GPUs", "persistence mode (legacy -pm)", "Enabled", "Disabled",
                               [["nvidia-smi", "-pm", "0"]]))
    elif spec.gpu.persistence != all(v == "Enabled" for v in pm):  # no daemon state read: the legacy switch
        want = "Enabled" if spec.gpu.persistence else "Disabled"
        if any(v != want for v in pm):
            acts.append(Action("gpu", "all GPUs", "persistence mode", ",".join(sorted(set(map(str, pm)))), want,
                               [["nvidia-smi", "-pm", "1" if spec.gpu.persistence else "0"]]))
    want_mig = "Enabled" if spec.gpu.mig else "Disabled"
    cur = [g.get("mig.mode.current") for g in act.gpus]
    pend = [g.get("mig.mode.pending", g.get("mig.mode.current")) for g in act.gpus]
    off = [i for i, v in enumerate(cur) if v is not None and v not in ("[N/A]", "N/A") and v != want_mig]
    if off and all(pend[i] == want_mig for i in off):
        acts.append(Action("gpu", "all GPUs", "MIG mode", f"{','.join(sorted(set(map(str, cur))))} ({want_mig} pending)",
                           f"{want_mig} after a GPU reset (nvidia-smi -r with no GPU clients, or a reboot)", [],
                           needs=["GPU reset"], outcome=OUTCOME_REBOOT))
    elif off:
        acts.append(Action("gpu", "all GPUs", "MIG mode", ",".join(sorted(set(map(str, cur)))), want_mig,
                           [["nvidia-smi", "-mig", "1" if spec.gpu.mig else "0"]], needs=["GPU reset"]))
    return acts
