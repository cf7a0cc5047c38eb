"""Which netdev carries each inventory lane now (the plan steps that work per port share it):
the one :func:`mfctl.provision.steps.links.lane_netdev` discovers from the host's devlink ports (a
split sub-port is a PCI function and a port of its own); a lane of a NIC being re-split is its
netdev-to-be under the inventory's name (``fresh``: it appears after the reset with the driver's
defaults, and apply re-plans the host after the reset). A lane the host has no netdev for is left
out (the links step reports it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mfctl.provision.actions import PlanContext


@dataclass
class LanePort:
    ni: int  #: NIC index in the inventory host
    nic: Any  #: the inventory NIC (mfctl.inventory.models)
    lane: Any  #: the inventory lane
    netdev: str
    fresh: bool  #: not there yet (re-split pending): planned from the driver's defaults


def lane_ports(ctx: PlanContext) -> list[LanePort]:
    from mfctl.provision.steps.links import lane_netdev

    out = []
    for ni, nic in enumerate(ctx.host.nics):
        for lane in nic.lanes:
            if nic.pci in ctx.resplit:
                out.append(LanePort(ni, nic, lane, lane.netdev, True))
            elif (nd := lane_netdev(ctx.act, nic, lane)) is not None:
                out.append(LanePort(ni, nic, lane, nd, False))
    return out


def host_netdevs(inv_host, act) -> list[str]:
    """Every lane's netdev the host has now (what the per-port reads ask about)."""
    from mfctl.provision.steps.links import lane_netdev

    nds = [lane_netdev(act, nic, lane) for nic in inv_host.nics for lane in nic.lanes]
    return list(dict.fromkeys(nd for nd in nds if nd))


def read_files(pool, host: str, paths: list[str], what: str) -> dict[str, str]:
    """Path → content of the sysfs/procfs ``paths`` on ``host``, in one ``grep -Hs .``
    (:func:`mfctl.hosts.roce.grep_argv`; a file that does not exist is absent, grep's exit 1/2).
    MfctlError naming ``what`` was read when the command itself failed."""
    from mfctl.errors import MfctlError
    from mfctl.hosts import roce

    r = pool.run(host, roce.grep_argv(paths))
    if r.error or r.rc not in (0, 1, 2):
        raise MfctlError(f"{host}: grep -Hs . ({what}): {r.error or f'exit {r.rc}'}")
    return roce.parse_grep(r.stdout)
