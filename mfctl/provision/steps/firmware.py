"""Plan steps for NIC firmware: the pinned image (:func:`plan_firmware`), the recipe's ``mlxconfig``
settings (:func:`plan_settings`) and the ``mlxfwreset`` that makes either active (:func:`plan_reset`).

Rules (sources in ``docs/provisioning.md``, "Firmware that converges"):

* an image is pinned per PSID, matched exactly; a NIC whose PSID has no image is the finding
  ``no pinned image`` (an OEM PSID offered NVIDIA's image for the same board says so);
* an image that is not newer than the burnt one is burnt only with ``allow_downgrade: true``
  (then with ``mlxfwmanager --force``), else the host is refused (MANUAL) before it is touched;
* a recipe parameter the card does not expose is ``not supported on this card`` for that NIC (a
  finding: the host's other actions go on);
* the reset is ``mlxfwreset --level 3`` (driver restart and PCI reset) when ``mlxfwreset query``
  says level 3 is supported; when only a reboot (level 4/5) would do, the outcome is
  ``reboot required`` naming the command, never a reset that pretends.
"""

from __future__ import annotations

from mfctl import settings
from mfctl.errors import MfctlError
from mfctl.hosts import mellanox
from mfctl.provision.actions import OUTCOME_NO_PIN, OUTCOME_REBOOT, OUTCOME_UNSUPPORTED, Action, PlanContext
from mfctl.provision.models import FirmwareManifest, ProvisionSpec

#: ``HostActual.more`` key of :func:`read_reset_levels`'s result
MORE_KEY = "firmware-reset"
#: the reset level mfctl uses: it restarts the driver, so the pending firmware, mlxconfig settings and
#: splits become active (level 0, "live-Patch", keeps the driver: it is not used)
RESET_LEVEL = 3


def read_reset_levels(pool, inv_host, pcis: list[str] | None = None) -> dict[str, dict[int, mellanox.ResetLevel] | str]:
    """``mlxfwreset -d PCI query`` for every NIC of ``inv_host`` (``pcis``: these only):
    {pci: {level: ResetLevel}}, or {pci: why it could not be read} (a NIC mlxfwreset cannot query
    is planned as unverified, never reset blindly). Each query runs under ``firmware_reset_timeout``."""
    out: dict[str, dict[int, mellanox.ResetLevel] | str] = {}
    timeout = settings.get_float("firmware_reset_timeout")
    for nic in inv_host.nics:
        if not nic.pci or (pcis is not None and nic.pci not in pcis):
            continue
        try:
            out[nic.pci] = mellanox.parse_mlxfwreset_query(
                pool.run_checked(inv_host.name, mellanox.mlxfwreset_query_argv(nic.pci), timeout=timeout))
        except MfctlError as e:
            out[nic.pci] = str(e)
    return out


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
    """One reset per NIC that an earlier step said needs it, at the level ``mlxfwreset query`` offers."""
    levels = ctx.act.more.get(MORE_KEY, {})
    return [_plan_reset(nic, levels.get(nic.pci, None)) for nic in ctx.host.nics if nic.pci in ctx.reset]


def _plan_reset(nic, levels: dict[int, mellanox.ResetLevel] | str | None) -> Action:
    tgt, pci = f"{nic.name} ({nic.pci})", nic.pci
    timeout = settings.get_float("firmware_reset_timeout")
    if isinstance(levels, str):  # the query failed: unverified is never verified
        return Action("firmware-reset", tgt, "firmware reset", "pending", "active", [],
                      manual=f"mlxfwreset query failed, so no reset level is known ({levels})")
    if levels is None or (RESET_LEVEL in levels and levels[RESET_LEVEL].supported):
        what = f"firmware reset (level {RESET_LEVEL}: {mellanox.RESET_LEVELS[RESET_LEVEL]})"
        return Action("firmware-reset", tgt, what, "pending", "active",
                      [mellanox.mlxfwreset_argv(pci, RESET_LEVEL)], needs=["reset"], timeout_s=timeout,
                      progress=f"mlxfwreset level {RESET_LEVEL} on {nic.name} (driver restart: its netdevs are "
                               f"recreated; up to {timeout:g} s)", expect={"reset_level": RESET_LEVEL})
    higher = sorted(lv for lv, r in levels.items() if r.supported and lv > RESET_LEVEL)
    names = [f"{lv} ({mellanox.RESET_LEVELS.get(lv, levels[lv].description)})" for lv in higher]
    offer = f"mlxfwreset supports only level {', '.join(names)}" if names else "mlxfwreset supports no level that loads it"
    return Action("firmware-reset", tgt, "firmware reset", "pending",
                  f"{OUTCOME_REBOOT}: {offer} on this card; reboot the host (`sudo systemctl reboot`) to make the pending "
                  f"firmware/settings active", [], outcome=OUTCOME_REBOOT)


def _plan_firmware(nic, fwd: mellanox.FirmwareDevice, manifest: FirmwareManifest | None, reset: set[str]) -> list[Action]:
    """Burn the pinned image (checksummed on the host first) when the NIC's burnt version differs;
    a burnt image that is not running yet needs only the reset."""
    if manifest is None:
        return []
    tgt = f"{nic.name} ({nic.pci})"
    im = manifest.for_nic(fwd.part_number or "", fwd.psid)
    if im is None:
        return [Action("firmware", tgt, "firmware", fwd.fw_current or "?", no_pin_reason(manifest, fwd), [],
                       outcome=OUTCOME_NO_PIN)]
    if fwd.fw_current != im.version:
        newer = mellanox.version_key(im.version) > mellanox.version_key(fwd.fw_current or "0")
        if not newer and not im.allow_downgrade:
            return [Action("firmware", tgt, "firmware", fwd.fw_current or "?", im.version, [],
                           manual=f"the burnt firmware {fwd.fw_current} is newer than the pinned {im.version}: "
                                  f"a downgrade needs allow_downgrade: true on the manifest's image for {im.psid} "
                                  "(then mlxfwmanager --force)")]
        reset.add(nic.pci)
        timeout = settings.get_float("firmware_burn_timeout")
        return [Action("firmware", tgt, "firmware" if newer else "firmware (downgrade, --force)",
                       fwd.fw_current or "?", im.version,
                       [["sha256sum", im.image], mellanox.mlxfwmanager_burn_argv(nic.pci, im.image, force=not newer)],
                       needs=["reset"], expect={"sha256": im.sha256}, timeout_s=timeout,
                       progress=f"burning firmware {im.version} on {nic.name} (mlxfwmanager; up to {timeout:g} s)")]
    if fwd.running != im.version:  # burnt, not yet active
        reset.add(nic.pci)
    return []


def no_pin_reason(manifest: FirmwareManifest, fwd: mellanox.FirmwareDevice) -> str:
    """Why ``fwd`` has no pinned image: an OEM PSID offered NVIDIA's image for its board, or none at all."""
    near = manifest.near_miss(fwd.part_number or "", fwd.psid)
    if mellanox.is_oem_psid(fwd.psid):
        nvidia = sorted({im.psid for im in manifest.images if not mellanox.is_oem_psid(im.psid)})
        return (f"{OUTCOME_NO_PIN}: PSID {fwd.psid} ({fwd.part_number}) is an OEM PSID; the card refuses NVIDIA's "
                f"images{' (' + ', '.join(nvidia) + ')' if nvidia else ''}: pin the OEM's image for {fwd.psid}")
    if near:
        return f"{OUTCOME_NO_PIN} for PSID {fwd.psid} (the image for {near.part_number} is for PSID {near.psid})"
    return f"{OUTCOME_NO_PIN} for PSID {fwd.psid} ({fwd.part_number})"


def _plan_mlxconfig(nic, dev: mellanox.MlxconfigDevice | None, spec: ProvisionSpec, reset: set[str]) -> list[Action]:
    """The recipe's firmware settings against the NIC's next-boot values (pending ones need the reset);
    a parameter the card does not expose is reported per NIC as not supported on this card."""
    want = {k: str(v) for k, v in spec.mlxconfig.items()}
    if dev is None or not want:
        return []
    tgt, acts = f"{nic.name} ({nic.pci})", []
    for k in (k for k in want if k not in dev.params):
        fixed = " (the card fixes the port type)" if mellanox.FIXED_WHEN_ABSENT.match(k) else ""
        acts.append(Action("firmware-settings", tgt, f"mlxconfig {k}", "absent", f"{OUTCOME_UNSUPPORTED}{fixed}", [],
                           outcome=OUTCOME_UNSUPPORTED))
    change = {k: v for k, v in want.items() if k in dev.params and mellanox.value_code(dev.params[k].get("next_boot")) != v}
    if change:
        before = ", ".join(f"{k}={dev.params[k].get('next_boot')}" for k in change)
        acts.append(Action("firmware-settings", tgt, "mlxconfig", before, ", ".join(f"{k}={v}" for k, v in change.items()),
                           [mellanox.mlxconfig_set_argv(nic.pci, change)], needs=["reset"]))
        reset.add(nic.pci)
    if any(mellanox.value_code(dev.params[k].get("current")) != v for k, v in want.items() if k in dev.params):
        reset.add(nic.pci)
    return acts
