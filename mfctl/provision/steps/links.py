"""Plan steps for links: the breakout of each NIC's module (:func:`plan_breakout`) and each lane's
netdev, MTU and address (:func:`plan_lanes`)."""

from __future__ import annotations

from mfctl.hosts import iproute, mellanox
from mfctl.provision.actions import Action, HostActual, PlanContext
from mfctl.provision.models import ProvisionSpec


def plan_breakout(ctx: PlanContext) -> list[Action]:
    """Every NIC mlxfwmanager lists, split into as many ports as the inventory has lanes."""
    return [a for nic in ctx.host.nics if nic.pci in ctx.act.fw for a in _plan_breakout(nic, ctx.act, ctx.reset, ctx.resplit)]


def plan_lanes(ctx: PlanContext) -> list[Action]:
    """Each lane's netdev, MTU and address."""
    return _plan_lanes(ctx.hi, ctx.host, ctx.act, ctx.spec, ctx.resplit)


def _plan_breakout(nic, act: HostActual, reset: set[str], resplit: set[str]) -> list[Action]:
    """How many ports the module is split into: devlink where the port is splittable, else the
    firmware's MODULE_SPLIT_M0 + reset (mlx5), else MANUAL."""
    ports = [p for p in act.ports.values() if p.name.startswith(f"pci/{nic.pci}/")]
    if len(ports) == len(nic.lanes):
        return []
    tgt, dev = f"{nic.name} ({nic.pci})", act.mlx.get(nic.pci)
    resplit.add(nic.pci)
    if ports and all(p.splittable for p in ports):
        argv = (["devlink", "port", "split", ports[0].name, "count", str(len(nic.lanes))] if len(nic.lanes) > 1
                else ["devlink", "port", "unsplit", ports[0].name])
        return [Action("links", tgt, "breakout", f"{len(ports)} port(s)", nic.breakout, [argv])]
    if dev is not None and "MODULE_SPLIT_M0" in dev.params:
        reset.add(nic.pci)
        return [Action("firmware-settings", tgt, "breakout (MODULE_SPLIT_M0)", f"{len(ports)} port(s)",
                       f"{nic.breakout}: {len(nic.lanes)} ports",
                       [mellanox.mlxconfig_set_argv(nic.pci, {"MODULE_SPLIT_M0": str(len(nic.lanes))})], needs=["reset"])]
    return [Action("links", tgt, "breakout", f"{len(ports)} port(s)", nic.breakout, [],
                   manual="the port is not splittable with devlink and the firmware has no MODULE_SPLIT")]


def _plan_lanes(hi: int, inv_host, act: HostActual, spec: ProvisionSpec, resplit: set[str]) -> list[Action]:
    """Each lane's netdev: MTU and its address (``spec.address_for``); a lane of a NIC being
    re-split is planned as the fresh netdev that appears after the reset (MTU 1500, no address)."""
    acts = []
    for ni, nic in enumerate(inv_host.nics):
        for lane in nic.lanes:
            ifc = act.ifaces.get(lane.netdev)
            if ifc is None and nic.pci in resplit:
                ifc = iproute.Iface(lane.netdev, 1500, False, [])
            if ifc is None:
                acts.append(Action("links", lane.netdev, "netdev", "missing", "present", [],
                                   manual="the lane's network device does not exist"))
                continue
            if ifc.mtu != spec.mtu:
                acts.append(Action("links", lane.netdev, "MTU", str(ifc.mtu), str(spec.mtu),
                                   [["ip", "link", "set", "dev", lane.netdev, "mtu", str(spec.mtu)]]))
            addr = spec.address_for(hi + 1, ni, lane.index)
            if addr and addr not in ifc.addresses:
                acts.append(Action("addresses", lane.netdev, "address", ",".join(ifc.addresses) or "none", addr,
                                   [["ip", "addr", "replace", addr, "dev", lane.netdev]]))
    return acts
