"""Plan step for GPUDirect RDMA prerequisites (:func:`plan_gpudirect`): the ``nvidia-peermem``
module loaded (NVIDIA GPUDirect RDMA docs: the module that lets the mlx5 verbs register GPU memory),
PCIe ACS off on every device whose ACS control redirects peer-to-peer requests (NCCL
troubleshooting guide, "PCI Access Control Services (ACS)": with ACS on, GPU↔NIC traffic under one
PCIe switch goes up to the root complex — ``setpci … ECAP_ACS+0x6.w=0000``), and the NICs' PCIe
MaxReadReq (NVIDIA ConnectX performance tuning: 4096 bytes). Read by :func:`read_gpudirect` into
``HostActual.more["gpudirect"]``; the persistence daemon is read here for :mod:`.gpu`."""

from __future__ import annotations

from mfctl.hosts import gpudirect as gd
from mfctl.provision.actions import Action, PlanContext

MORE_KEY = "gpudirect"
UNIT = "nvidia-persistenced"


def read_gpudirect(pool, inv_host, act) -> dict:
    """``modules`` (lsmod), ``pci`` (lspci -D -vvv by BDF), ``unit`` (ActiveState, UnitFileState) of the daemon."""
    h = inv_host.name
    return {"modules": gd.parse_lsmod(pool.run_checked(h, gd.lsmod_argv())),
            "pci": gd.parse_lspci(pool.run_checked(h, gd.lspci_argv())),
            "unit": gd.parse_unit(pool.run_checked(h, gd.unit_argv(UNIT)))}


def plan_gpudirect(ctx: PlanContext) -> list[Action]:
    want, more = ctx.spec.gpu, ctx.act.more.get(MORE_KEY)
    if more is None:
        return []
    acts = []
    if want.peermem and "nvidia_peermem" not in more["modules"]:
        acts.append(Action("gpudirect", "nvidia-peermem", "kernel module", "not loaded", "loaded",
                           [["modprobe", "nvidia-peermem"]]))
    if want.acs_off:
        for bdf, dev in sorted(more["pci"].items()):
            if dev.acs_on:
                acts.append(Action("gpudirect", bdf, "PCIe ACS", "ACSCtl " + " ".join(f"{b}+" for b in dev.acs_on),
                                   "ACSCtl all off (peer-to-peer stays under the switch)", [gd.acs_off_argv(bdf)]))
    if want.max_read_req:
        for nic in ctx.host.nics:
            dev = more["pci"].get(nic.pci)
            if dev is None:
                acts.append(Action("gpudirect", f"{nic.name} ({nic.pci})", "MaxReadReq", "not in lspci",
                                   f"{want.max_read_req} bytes", [], manual="lspci does not list the NIC"))
            elif dev.max_read_req != want.max_read_req:
                acts.append(Action("gpudirect", f"{nic.name} ({nic.pci})", "MaxReadReq", f"{dev.max_read_req} bytes",
                                   f"{want.max_read_req} bytes", [gd.mrr_argv(nic.pci, want.max_read_req)]))
    return acts
