"""Plan step for GPU settings (:func:`plan_gpu`): persistence and MIG mode."""

from __future__ import annotations

from mfctl.provision.actions import Action, PlanContext


def plan_gpu(ctx: PlanContext) -> list[Action]:
    """Persistence mode and MIG mode of all GPUs."""
    return _plan_gpu(ctx.act, ctx.spec)


def _plan_gpu(act, spec) -> list[Action]:
    """Persistence mode and MIG mode of all GPUs (MIG needs a GPU reset)."""
    acts = []
    pm = [g.get("persistence_mode") for g in act.gpus]
    if spec.gpu.persistence and any(v != "Enabled" for v in pm):
        acts.append(Action("gpu", "all GPUs", "persistence mode", ",".join(sorted(set(map(str, pm)))), "Enabled",
                           [["nvidia-smi", "-pm", "1"]]))
    mig = [g.get("mig.mode.current") for g in act.gpus]
    want_mig = "Enabled" if spec.gpu.mig else "Disabled"
    if any(v != want_mig and v is not None for v in mig):
        acts.append(Action("gpu", "all GPUs", "MIG mode", ",".join(sorted(set(map(str, mig)))), want_mig,
                           [["nvidia-smi", "-mig", "1" if spec.gpu.mig else "0"]], needs=["GPU reset"]))
    return acts
