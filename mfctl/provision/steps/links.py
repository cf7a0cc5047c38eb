"""Plan steps for links: the breakout of each NIC's port (:func:`plan_breakout`) and each lane's
netdev, MTU and address (:func:`plan_lanes`).

A lane is a sub-port: lane k of a NIC is PCI function k of the card's slot once the firmware has
split the port (:mod:`mfctl.provision.breakout`). Its netdev is *discovered* from the host's
devlink ports (:func:`lane_netdev`), never predicted: the inventory's ``netdev`` is what the
operator expects, and a host that calls it otherwise is the finding :data:`OUTCOME_NAME` with both
names (the host's device is configured all the same). Before the reset that makes a split active
the lanes of that NIC are planned as "after reset" placeholders (a fresh netdev: MTU 1500, no
address) under the inventory's name; apply re-reads and re-plans the host after its last reset
(:mod:`mfctl.provision.apply`), so the real post-reset actions target the netdevs that appeared.
"""

from __future__ import annotations

from mfctl.hosts import iproute, mellanox
from mfctl.provision import breakout
from mfctl.provision.actions import Action, HostActual, PlanContext
from mfctl.provision.models import ProvisionSpec

#: ``HostActual.more`` key of :func:`read_links`'s result
MORE_KEY = "links"
#: :attr:`Action.outcome` of a lane whose netdev the host names otherwise than the inventory (a finding)
OUTCOME_NAME = "netdev differs from the inventory"
#: ``Action.what`` suffix of a lane action planned before the reset that creates its netdev
AFTER_RESET = " (after reset)"


def plan_breakout(ctx: PlanContext) -> list[Action]:
    """Every NIC mlxfwmanager lists, split into as many ports as the inventory has lanes."""
    return [a for nic in ctx.host.nics if nic.pci in ctx.act.fw for a in _plan_breakout(nic, ctx.act, ctx.reset, ctx.resplit)]


def plan_lanes(ctx: PlanContext) -> list[Action]:
    """Each lane's netdev (discovered), MTU and address."""
    return _plan_lanes(ctx.hi, ctx.host, ctx.act, ctx.spec, ctx.resplit)


def split_query_argv(pci: str) -> list[str]:
    """mlxconfig's query of the split array's elements and the PF count (``mlxconfig -e q`` shows the
    array only as ``MODULE_SPLIT_M0  Array[0..15]``)."""
    return ["mlxconfig", "-d", pci, "-e", "q", f"MODULE_SPLIT_M0[0..{breakout.SPLIT_ARRAY - 1}]", "NUM_OF_PF"]


def read_links(pool, inv_host, act: HostActual) -> dict[str, str]:
    """What the breakout and the lanes need beyond the common reads. The split array's elements,
    merged into ``act.mlx`` (queried by name for a card whose ``mlxconfig -e q`` shows only
    ``MODULE_SPLIT_M0 Array[0..15]``); and the result, ``{ifname: parent PCI address}`` from ``ip -d
    -j link show`` — read only when devlink names no port by its PCI address (mlx5 on Linux ≥ 6.5:
    ``auxiliary/mlx5_core.eth.N/…``), else ``{}``. No extra command where neither is needed."""
    for nic in inv_host.nics:
        dev = act.mlx.get(nic.pci)
        if dev is not None and "MODULE_SPLIT_M0" in dev.params and not any(k.startswith("MODULE_SPLIT_M0[") for k in dev.params):
            more = mellanox.parse_mlxconfig(pool.run_checked(inv_host.name, split_query_argv(nic.pci)))[0]
            dev.params.update({k: v for k, v in more.params.items() if k.startswith("MODULE_SPLIT_M0[") or k == "NUM_OF_PF"})
    if any(p.name.startswith("pci/") for p in act.ports.values()):
        return {}
    return breakout.parse_link_parents(pool.run_checked(inv_host.name, ["ip", "-d", "-j", "link", "show"]))


def lane_netdev(act: HostActual, nic, lane) -> str | None:
    """The netdev the host has for ``lane`` of ``nic`` (devlink port of PCI function
    ``lane.index`` of the card's slot, else the link whose parent device is that function), or
    None when the host has none. Other steps (QoS, RoCE) plan a lane's per-port settings on this name."""
    found = breakout.discover(act.ports, nic.pci, len(nic.lanes), act.more.get(MORE_KEY)) if nic.pci else {}
    hit = found.get(lane.index)
    if hit is None and not nic.pci:  # no PCI address in the inventory: only its name can say
        return lane.netdev if lane.netdev in act.ifaces else None
    return hit[1] if hit else None


def _firmware_split(nic, dev: mellanox.MlxconfigDevice | None, column: str) -> int | None:
    """The port count the card's firmware ``column`` ("current" or "next_boot") sets (NUM_OF_PF),
    or None when the card has no split parameters."""
    if dev is None or "NUM_OF_PF" not in dev.params or not any(k.startswith("MODULE_SPLIT_M0[") for k in dev.params):
        return None
    v = mellanox.value_code(dev.params["NUM_OF_PF"].get(column))
    return int(v) if v and v.isdigit() else None


def _split_value(v: str | None) -> str:
    """A split element or PF count as one spelling: ``FF``, ``0xFF`` and ``255`` (unused lane) are ``FF``."""
    code = (mellanox.value_code(v) or "").strip().upper()
    return "FF" if code in ("FF", "0XFF", "255") else code


def _plan_breakout(nic, act: HostActual, reset: set[str], resplit: set[str]) -> list[Action]:
    """How many ports the card's port is split into: on ConnectX the firmware's MODULE_SPLIT_M0 +
    NUM_OF_PF layout (:func:`mfctl.provision.breakout.split_layout`) and a reset; devlink where the
    port is splittable (switch ASICs, never mlx5); else MANUAL."""
    want = len(nic.lanes)
    tgt, dev = f"{nic.name} ({nic.pci})", act.mlx.get(nic.pci)
    have = len(breakout.discover(act.ports, nic.pci, 8, act.more.get(MORE_KEY)))
    current, pending = _firmware_split(nic, dev, "current"), _firmware_split(nic, dev, "next_boot")
    card = breakout.CARDS.get(nic.model)
    if current is not None and dev is not None and card is not None and card.split_param:
        layout = breakout.split_layout(card, want)
        change = {k: v for k, v in layout.items()
                  if k in dev.params and _split_value(dev.params[k].get("next_boot")) != _split_value(v)}
        missing = [k for k in layout if k not in dev.params]
        if missing:
            return [Action("firmware-settings", tgt, "breakout (MODULE_SPLIT_M0)", f"{current} port(s)", nic.breakout, [],
                           manual=f"the firmware lacks {', '.join(missing[:3])}: not the split layout this card offers")]
        if change:
            reset.add(nic.pci)
            resplit.add(nic.pci)
            return [Action("firmware-settings", tgt, "breakout (MODULE_SPLIT_M0)", f"{current} port(s)",
                           f"{nic.breakout}: {want} ports", [mellanox.mlxconfig_set_argv(nic.pci, change)], needs=["reset"])]
        if current != want or have != want:  # set, not active yet (or the driver has not shown the ports)
            reset.add(nic.pci)
            resplit.add(nic.pci)
        return []
    if have == want or (want == 1 and have >= 1):  # an unsplit port: function 0 is the lane (a dual-port card has more)
        return []
    ports = [p for k, (name, _nd) in breakout.discover(act.ports, nic.pci, 8, act.more.get(MORE_KEY)).items()
             for p in act.ports.values() if p.name == name]
    resplit.add(nic.pci)
    if ports and all(p.splittable for p in ports):
        argv = (["devlink", "port", "split", ports[0].name, "count", str(want)] if want > 1
                else ["devlink", "port", "unsplit", ports[0].name])
        return [Action("links", tgt, "breakout", f"{have} port(s)", nic.breakout, [argv])]
    why = ("the card's firmware has no MODULE_SPLIT_M0/NUM_OF_PF (not a port-split-capable card) and mlx5 ports "
           "are not splittable with devlink" if pending is None else "the firmware split does not match the card model")
    return [Action("links", tgt, "breakout", f"{have} port(s)", nic.breakout, [], manual=why)]


def _plan_lanes(hi: int, inv_host, act: HostActual, spec: ProvisionSpec, resplit: set[str]) -> list[Action]:
    """Each lane's netdev as the host names it (:func:`lane_netdev`): MTU and its address
    (``spec.address_for``). A lane of a NIC being re-split is planned as the fresh netdev that
    appears after the reset (MTU 1500, no address), under the inventory's name."""
    acts = []
    for ni, nic in enumerate(inv_host.nics):
        for lane in nic.lanes:
            where = f"{nic.name} lane {lane.index}"
            ifc: iproute.Iface | None
            if nic.pci in resplit:
                nd, ifc, later = lane.netdev, iproute.Iface(lane.netdev, 1500, False, []), AFTER_RESET
            else:
                found = lane_netdev(act, nic, lane)
                ifc = act.ifaces.get(found) if found else None
                if found is None or ifc is None:
                    pci = breakout.subport_pci(nic.pci, lane.index) if nic.pci else "?"
                    acts.append(Action("links", lane.netdev, "netdev", "missing", f"{where} present", [],
                                       manual=f"the host has no network device for {where} (no devlink port at PCI "
                                              f"{pci}; the inventory expects {lane.netdev})"))
                    continue
                nd, later = found, ""
                if found != lane.netdev:
                    pci = breakout.subport_pci(nic.pci, lane.index)
                    acts.append(Action("links", found, "netdev name", found,
                                       f"the inventory names {where} {lane.netdev!r} but the host calls PCI {pci} "
                                       f"{found!r}: correct the inventory's netdev", [], outcome=OUTCOME_NAME))
            if ifc.mtu != spec.mtu:
                acts.append(Action("links", nd, "MTU" + later, str(ifc.mtu), str(spec.mtu),
                                   [["ip", "link", "set", "dev", nd, "mtu", str(spec.mtu)]]))
            addr = spec.address_for(hi + 1, ni, lane.index)
            if addr and addr not in ifc.addresses:
                acts.append(Action("addresses", nd, "address" + later, ",".join(ifc.addresses) or "none", addr,
                                   [["ip", "addr", "replace", addr, "dev", nd]]))
    return acts
