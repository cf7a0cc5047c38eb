"""Mock RDMA tools of a host (RoCE on the ConnectX netdevs), in the real tools' layouts
(modelled on the captures in tests/data/mellanox; ``ibv_devinfo`` on rdma-core's documented
layout, as there is no capture):

``ibstat``, ``ibstatus``, ``ibv_devinfo [-d DEV]``, ``ibdev2netdev``, ``show_gids [DEV]``,
``mlxlink -d DEV|PCI``.

One RDMA device ``mlx5_<k>`` per network device, in the order of ``ip link``; a port is
Active exactly when its lane is up (``MockHost.lane_up``: both halves of the duplex
circuit patched on the OCS and the link-up time passed; EPS lanes are always up).
GIDs and GUIDs derive from the netdev's MAC, the RoCE MTU from its MTU, IPv4 GIDs from its
addresses.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Port:
    dev: str  # mlx5_0
    nic: object  # NICState
    netdev: str
    up: bool
    mac: str
    mtu: int
    addresses: list[str]

    @property
    def rate_gbps(self) -> int:
        return int(self.nic.speed_gbps / len(self.nic.netdevs))

    def eui64(self, sep: str = ":") -> str:
        """The MAC's modified EUI-64 as four 16-bit groups (``bace:f6ff:fe00:0000``)."""
        b = [int(x, 16) for x in self.mac.split(":")]
        e = [b[0] ^ 2, b[1], b[2], 0xFF, 0xFE, b[3], b[4], b[5]]
        return sep.join(f"{e[k]:02x}{e[k + 1]:02x}" for k in range(0, 8, 2))

    @property
    def node_guid(self) -> str:
        return f"b8cef60300{int(self.dev[5:]):06x}"

    @property
    def link_local_gid(self) -> str:
        return "fe80:0000:0000:0000:" + self.eui64()


def ports(h) -> list[Port]:
    """The RDMA ports of mock host ``h`` now."""
    lanes = {lane.netdev: lane for lane in h.lanes}
    out = []
    for k, nd in enumerate(h.config.current_netdevs()):
        nic = next(n for n in h.config.nics.values() if nd in n.netdevs)
        lane = lanes.get(nd)
        st = h.config.netdevs[nd]
        out.append(Port(f"mlx5_{k}", nic, nd, lane is not None and h.lane_up(lane),
                        lane.mac if lane else f"b8:ce:f6:ff:{k:02x}:00", st.mtu, list(st.addresses)))
    return out


def _select(h, args, flag="-d"):
    ps = ports(h)
    if flag in args:
        name = args[args.index(flag) + 1] if args.index(flag) + 1 < len(args) else ""
        ps = [p for p in ps if name in (p.dev, p.nic.pci, p.nic.pci.removeprefix("0000:"))]
        if not ps:
            return None, name
    return ps, None


def ibstat(h, args, out, err) -> int:
    txt = ""
    for p in ports(h):
        txt += (f"CA '{p.dev}'\n\tCA type: MT4125\n\tNumber of ports: 1\n\tFirmware version: {p.nic.fw}\n"
                f"\tHardware version: 0\n\tNode GUID: 0x{p.node_guid}\n\tSystem image GUID: 0x{p.node_guid}\n"
                f"\tPort 1:\n\t\tState: {'Active' if p.up else 'Down'}\n\t\tPhysical state: {'LinkUp' if p.up else 'Disabled'}\n"
                f"\t\tRate: {p.rate_gbps if p.up else 40}\n\t\tBase lid: 0\n\t\tLMC: 0\n"
                f"\t\tSM lid: 0\n\t\tCapability mask: 0x00010000\n\t\tPort GUID: 0x{p.eui64('')}\n"
                f"\t\tLink layer: Ethernet\n")
    out(txt)
    return 0


def _rate(p: Port) -> str:
    if not p.up:
        return "40 Gb/sec (4X QDR)"
    r = p.rate_gbps
    return f"{r} Gb/sec ({max(1, r // 25)}X EDR)"


def ibstatus(h, args, out, err) -> int:
    names = [a for a in args if not a.startswith("-")]
    ps = [p for p in ports(h) if not names or p.dev in names]
    if names and not ps:
        err(f"ls: cannot access '/sys/class/infiniband/{names[0]}/ports': No such file or directory\n")
        return 2
    out("".join(f"Infiniband device '{p.dev}' port 1 status:\n"
                f"        default gid:     {p.link_local_gid}\n        base lid:        0x0\n        sm lid:          0x0\n"
                f"        state:           {'4: ACTIVE' if p.up else '1: DOWN'}\n"
                f"        phys state:      {'5: LinkUp' if p.up else '3: Disabled'}\n"
                f"        rate:            {_rate(p)}\n        link_layer:      Ethernet\n\n" for p in ps))
    return 0


def _ib_mtu(mtu: int) -> str:
    """RoCE active MTU: the largest IB MTU that fits the netdev's MTU (with the RoCE headers)."""
    best = max([m for m in (256, 512, 1024, 2048, 4096) if m + 78 <= mtu] or [256])
    return f"{best} ({(256, 512, 1024, 2048, 4096).index(best) + 1})"


def ibv_devinfo(h, args, out, err) -> int:
    ps, missing = _select(h, args, "-d" if "-d" in args else "--ib-dev")
    if ps is None:
        err(f"IB device '{missing}' wasn't found\n")
        return 255
    txt = ""
    for p in ps:
        ng = ":".join(p.node_guid[k:k + 4] for k in range(0, 16, 4))
        txt += (f"hca_id:\t{p.dev}\n\ttransport:\t\t\tInfiniBand (0)\n\tfw_ver:\t\t\t\t{p.nic.fw}\n"
                f"\tnode_guid:\t\t\t{ng}\n\tsys_image_guid:\t\t\t{ng}\n\tvendor_id:\t\t\t0x02c9\n"
                f"\tvendor_part_id:\t\t\t4125\n\thw_ver:\t\t\t\t0x0\n\tboard_id:\t\t\t{p.nic.psid}\n"
                f"\tphys_port_cnt:\t\t\t1\n\t\tport:\t1\n"
                f"\t\t\tstate:\t\t\t{'PORT_ACTIVE (4)' if p.up else 'PORT_DOWN (1)'}\n"
                f"\t\t\tmax_mtu:\t\t4096 (5)\n\t\t\tactive_mtu:\t\t{_ib_mtu(p.mtu)}\n\t\t\tsm_lid:\t\t\t0\n"
                f"\t\t\tport_lid:\t\t0\n\t\t\tport_lmc:\t\t0x00\n\t\t\tlink_layer:\t\tEthernet\n\n")
    out(txt)
    return 0


def ibdev2netdev(h, args, out, err) -> int:
    out("".join(f"{p.dev} port 1 ==> {p.netdev} ({'Up' if p.up else 'Down'})\n"
                for p in sorted(ports(h), key=lambda p: p.dev)))  # the script globs /sys/class/infiniband/*
    return 0


def show_gids(h, args, out, err) -> int:
    names = [a for a in args if not a.startswith("-")]
    rows = []
    for p in ports(h):
        if names and p.dev != names[0]:
            continue
        gids = [(p.link_local_gid, "")]
        for a in p.addresses:
            ip = a.split("/")[0]
            if ":" not in ip:
                o = [int(x) for x in ip.split(".")]
                gids.append((f"0000:0000:0000:0000:0000:ffff:{o[0]:02x}{o[1]:02x}:{o[2]:02x}{o[3]:02x}", ip))
        for k, (gid, ip) in enumerate(gids):
            for v in (1, 2):
                rows.append(f"{p.dev:<8}1       {2 * k + v - 1:<8}{gid:<40}{ip:<16}v{v}      {p.netdev}")
    out("DEV     PORT    INDEX   GID                                     IPv4            VER     DEV\n"
        "---     ----    -----   ---                                     ------------    ---     ---\n"
        + "".join(r + "\n" for r in rows) + f"n_gids_found={len(rows)}\n")
    return 0


def mlxlink(h, args, out, err) -> int:
    if "-d" not in args:
        err("-E- Please provide a device name using -d option\n")
        return 1
    ps, missing = _select(h, args)
    if ps is None:
        err(f"-E- Failed to open device: \"{missing}\", No such file or directory\n")
        return 1
    p = ps[0]
    rate = p.rate_gbps
    op = (("State", "Active"), ("Physical state", "LinkUp"), ("Speed", f"{rate}GbE"), ("Width", f"{max(1, rate // 25)}x"),
          ("FEC", "Standard RS-FEC - RS(528,514)")) if p.up else \
         (("State", "Polling"), ("Physical state", "ETH_AN_FSM_ENABLE"), ("Speed", "N/A"), ("Width", "N/A"), ("FEC", "N/A"))
    op += (("Loopback Mode", "No Loopback"), ("Auto Negotiation", "ON"))
    out("\nOperational Info\n----------------\n" + "".join(f"{k:<32}: {v}\n" for k, v in op)
        + "\nSupported Info\n--------------\n"
        + f"{'Enabled Link Speed':<32}: 0x000003f2 (100G,50G,40G,25G,10G,1G)\n"
        + f"{'Supported Cable Speed':<32}: 0x000000f2 (100G,50G,40G,25G,10G)\n")
    return 0


COMMANDS = {"ibstat": ibstat, "ibstatus": ibstatus, "ibv_devinfo": ibv_devinfo, "ibdev2netdev": ibdev2netdev,
            "show_gids": show_gids, "mlxlink": mlxlink}
