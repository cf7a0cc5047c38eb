"""Which netdev carries each inventory lane now (the plan steps that work per port share it):
the NIC's devlink ports in port order when there are as many as the inventory has lanes (a split
sub-port is its own port), else the inventory's name; a lane of a NIC being re-split is its
netdev-to-be (``fresh``: it will appear after the reset with the driver's defaults). When
:mod:`mfctl.provision.steps.links` offers ``lane_netdevs(ctx)`` (lanes discovered from the host),
that answer is used instead."""

from __future__ import annotations

from dataclasses import dataclass

from mfctl.provision.actions import PlanContext


@dataclass
class LanePort:
    ni: int  #: NIC index in the inventory host
    nic: object  #: the inventory NIC
    lane: object  #: the inventory lane
    netdev: str
    fresh: bool  #: not there yet (re-split pending): planned from the driver's defaults


def lane_ports(ctx: PlanContext) -> list[LanePort]:
    from mfctl.provision.steps import links

    found = getattr(links, "lane_netdevs", None)
    out = []
    for ni, nic in enumerate(ctx.host.nics):
        ports = sorted((p for p in ctx.act.ports.values() if p.name.startswith(f"pci/{nic.pci}/") and p.netdev),
                       key=lambda p: int(p.name.rsplit("/", 1)[-1]) if p.name.rsplit("/", 1)[-1].isdigit() else 0)
        for k, lane in enumerate(nic.lanes):
            fresh = nic.pci in ctx.resplit
            nd = found(ctx, nic, lane) if found else None
            if nd is None:
                nd = ports[k].netdev if len(ports) == len(nic.lanes) and not fresh else lane.netdev
            out.append(LanePort(ni, nic, lane, nd, fresh))
    return out
