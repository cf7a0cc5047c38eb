"""Plan steps for NIC firmware: the pinned image (:func:`plan_firmware`), the recipe's ``mlxconfig``
settings (:func:`plan_settings`) and the ``mlxfwreset`` that makes either active (:func:`plan_reset`)."""

from __future__ import annotations

from mfctl.hosts import mellanox
from mfctl.provision.actions import Action, PlanContext
from mfctl.provision.models import FirmwareManifest, ProvisionSpec


def plan_firmware(ctx: PlanContext) -> list[Action]:
    """Every NIC's firmware against the manifest (a NIC that mlxfwmanager does not list is MANUAL)."""
    acts: list[Action] = []
    for nic in ctx.host.nics:
        fwd = ctx.act.fw.get(nic.pci)
        if fwd is None:
            acts.append(Action("firmware", f"{nic.name} ({nic.pci})", "NIC present", "missing", "present", [],
                               manual="mlxfwmanager does not list this NIC"))
        else:
            acts += _plan_firmware(nic, fwd, ctx.manifest, ctx.reset)
    return acts


def plan_settings(ctx: PlanContext) -> list[Action]:
    """The recipe's firmware settings on every NIC mlxfwmanager lists."""
    return [a for nic in ctx.host.nics if nic.pci in ctx.act.fw
            for a in _plan_mlxconfig(nic, ctx.act.mlx.get(nic.pci), ctx.spec, ctx.reset)]


def plan_reset(ctx: PlanContext) -> list[Action]:
    """One ``mlxfwreset`` per NIC that an earlier step said needs it."""
    return [Action("firmware-reset", f"{nic.name} ({nic.pci})", "firmware reset", "pending", "active",
                   [mellanox.mlxfwreset_argv(nic.pci)]) for nic in ctx.host.nics if nic.pci in ctx.reset]


def _plan_firmware(nic, fwd: mellanox.FirmwareDevice, manifest: FirmwareManifest | None, reset: set[str]) -> list[Action]:
    """Burn the pinned image (checksummed on the host first) when the NIC's burnt version differs;
    a burnt image that is not running yet needs only the reset."""
    im = manifest.for_nic(fwd.part_number or "", fwd.psid) if manifest else None
    if im and fwd.fw_current != im.version:
        reset.add(nic.pci)
        return [Action("firmware", f"{nic.name} ({nic.pci})", "firmware", fwd.fw_current or "?", im.version,
                       [["sha256sum", im.image], mellanox.mlxfwmanager_burn_argv(nic.pci, im.image)],
                       needs=["reset"], expect={"sha256": im.sha256})]
    if im and fwd.running != im.version:  # burnt, not yet active
        reset.add(nic.pci)
    return []


def _plan_mlxconfig(nic, dev: mellanox.MlxconfigDevice | None, spec: ProvisionSpec, reset: set[str]) -> list[Action]:
    """The recipe's firmware settings against the NIC's next-boot values (pending ones need the reset)."""
    want = {k: str(v) for k, v in spec.mlxconfig.items()}
    if dev is None or not want:
        return []
    tgt, acts = f"{nic.name} ({nic.pci})", []
    missing = [k for k in want if k not in dev.params]
    if missing:
        acts.append(Action("firmware-settings", tgt, "mlxconfig", "unsupported", ",".join(missing), [],
                           manual=f"the firmware does not know {', '.join(missing)}"))
    change = {k: v for k, v in want.items() if k in dev.params and mellanox.value_code(dev.params[k].get("next_boot")) != v}
    if change:
        before = ", ".join(f"{k}={dev.params[k].get('next_boot')}" for k in change)
        acts.append(Action("firmware-settings", tgt, "mlxconfig", before, ", ".join(f"{k}={v}" for k, v in change.items()),
                           [mellanox.mlxconfig_set_argv(nic.pci, change)], needs=["reset"]))
        reset.add(nic.pci)
    if any(mellanox.value_code(dev.params[k].get("current")) != v for k, v in want.items() if k in dev.params):
        reset.add(nic.pci)
    return acts
