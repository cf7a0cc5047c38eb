"""RDMA checks: EPS RDMA ports (``rdma``: ``ibdev2netdev`` + ``ibstat``, or ``ibv_devinfo`` where
infiniband-diags is not installed) and RoCE v2 GIDs (``gids``: ``show_gids`` + ``ip -j addr show``).

Which RDMA device serves which netdev is what the host says (``ibdev2netdev``): device numbers
follow the kernel's probe order, so a NIC split into several netdevs (a breakout) shifts every
device after it (issue 17). Without ``ibdev2netdev`` (rdma-core without MLNX_OFED's script), the
inventory's ``rdma_device`` is used, and for NICs that name none the old guess ``mlx5_<NIC
position>`` — right only when every NIC is one netdev.
"""

from __future__ import annotations

from mfctl.health.checks.base import Check, Probe
from mfctl.hosts import iproute, rdma


def eps_devices(p: Probe, mapping: dict | None) -> set[str]:
    """The RDMA devices of the host's EPS NICs: by ``ibdev2netdev`` (``{device: (port, netdev, up)}``),
    else by the inventory (``rdma_device``, or the position guess)."""
    eps = [n for n in p.host.nics if n.role == "eps"]
    if mapping:
        netdevs = {lane.netdev for n in eps for lane in n.lanes}
        return {dev for dev, (_, nd, _) in mapping.items() if nd in netdevs}
    return {n.rdma_device or f"mlx5_{p.host.nics.index(n)}" for n in eps}


def judge_rdma(p: Probe, data: dict) -> None:
    rep = data.get("ibstat")
    if rep is None:
        return
    eps = eps_devices(p, data.get("ibdev2netdev"))
    for port in rep.ports:
        if not port.active and port.device in eps:
            p.add("critical", f"{port.device} port {port.port} is {port.state} ({port.physical_state}): the EPS RDMA path "
                              "is down", "rdma.port_down", component=f"{port.device}/{port.port}", value=port.state)
    for e in rep.errors:
        p.add("warning", e, "rdma.unparsable", component="ibstat")


def run_ports(p: Probe, argv: list[str]):
    """``ibstat``; on a host without it (exit 127: infiniband-diags not installed), ``ibv_devinfo``
    (rdma-core, wherever RDMA works at all)."""
    r = p.run(argv)
    if argv == ["ibstat"] and r.rc == 127:
        r = p.run(["ibv_devinfo"])
    return r


def parse_ports(text: str) -> rdma.RdmaReport:
    """``ibstat``'s or ``ibv_devinfo``'s port states (``hca_id:`` blocks are ibv_devinfo's)."""
    return rdma.parse_ibv_devinfo(text) if text.lstrip().startswith("hca_id:") else rdma.parse_ibstat(text)


RDMA = Check("rdma", "rdma", "ibdev2netdev; ibstat (without it: ibv_devinfo)", "the EPS NICs' RDMA ports active (devices "
             "mapped to netdevs by ibdev2netdev)", lambda p: {"ibdev2netdev": ["ibdev2netdev"], "ibstat": ["ibstat"]},
             {"ibdev2netdev": rdma.parse_ibdev2netdev, "ibstat": parse_ports}, judge_rdma, run=run_ports)


def judge_gids(p: Probe, data: dict) -> None:
    """Every lane netdev with an IPv4 address needs a RoCE v2 GID for it: NCCL picks its GID index
    (NCCL_IB_GID_INDEX) among those; without one NCCL falls back to RoCE v1 or fails to connect."""
    gids, addrs = data.get("gids"), data.get("addrs")
    if gids is None or addrs is None:
        return
    for nic in p.host.nics:
        for lane in nic.lanes:
            iface = addrs.get(lane.netdev)
            for a in iface.addresses if iface else []:
                ip = a.split("/")[0]
                if ":" in ip or any(g.netdev == lane.netdev and g.version == "v2" and g.ipv4 == ip for g in gids):
                    continue
                p.add("warning", f"{lane.netdev} ({nic.name}) has {ip} but no RoCE v2 GID for it (show_gids): NCCL "
                                 "cannot use RoCE v2 there", "rdma.no_roce_v2_gid", component=lane.netdev, value=ip)


GIDS = Check("gids", "rdma", "show_gids; ip -j addr show", "a RoCE v2 GID for every IPv4 address of a lane (NCCL_IB_GID_INDEX)",
             lambda p: {"gids": ["show_gids"], "addrs": iproute.addr_argv()},
             {"gids": rdma.parse_show_gids, "addrs": iproute.parse_addrs}, judge_gids)
