"""RoCE QoS of the mock host's ports, kept per netdev (a split sub-port is its own port to
``mlnx_qos`` and to the kernel's DCB interface): ``mlnx_qos -i IF [--trust T] [--pfc …]
[--dscp2prio set,DSCP,PRIO] [--tc_bw …]``, printed as MLNX_OFED's mlnx_qos prints it
(NVIDIA community DOC-2792 "mlnx_qos"; the PFC/buffer/tc layout of the MLNX_OFED 5.x tool).

:class:`PortState` also holds the other per-netdev runtime state a driver restart or a reboot
loses: ECN per priority, CNP DSCP/802.1p priority (sysfs ``ecn/``, :mod:`.sysfs`), the
interface's ``net.ipv4.conf.IF.*`` sysctls and the FEC mode (:mod:`.fec`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: mlx5's default priority → traffic class map (prio 0 on tc 1, prio 1 on tc 0: DOC-2792's output)
DEFAULT_PRIO_TC = [1, 0, 2, 3, 4, 5, 6, 7]


@dataclass
class PortState:
    """One netdev's QoS/ECN/sysctl/FEC runtime state; the defaults are a fresh mlx5 netdev's."""

    trust: str = "pcp"
    pfc: list[int] = field(default_factory=lambda: [0] * 8)
    dscp2prio: list[int] = field(default_factory=lambda: [d >> 3 for d in range(64)])  # DSCP d → priority d/8
    tc_bw: list[int] | None = None  # ETS bandwidth % per TC (None: the driver's default, tsa vendor)
    ecn_np: list[int] = field(default_factory=lambda: [1] * 8)  # ecn/roce_np/enable/<prio>
    ecn_rp: list[int] = field(default_factory=lambda: [1] * 8)  # ecn/roce_rp/enable/<prio>
    cnp_dscp: int = 48
    cnp_802p_prio: int = 6
    sysctl: dict[str, int] = field(default_factory=lambda: {"arp_ignore": 0, "arp_announce": 0, "rp_filter": 0})
    fec: str = "Auto"  # configured FEC (ethtool --set-fec): Auto, RS, BaseR, Off
    tclass: int = -1  # MLNX_OFED's global traffic class of the port's RDMA device (-1: unset; mfctl.mock.nics.tuning)
    cma_tos: int = 0  # the RDMA-CM default ToS (configfs default_roce_tos)
    autoneg: bool = True  # ethtool -s … autoneg on|off
    forced: tuple[int, int] | None = None  # (Mb/s, lanes) forced with ethtool -s (None: the sub-port's own mode)
    irq_aff: dict[int, tuple[str, float]] = field(default_factory=dict)  # IRQ → (smp_affinity_list, when written)
    irq_pinned: bool = False  # every IRQ on the NIC's NUMA node (a provisioned host's)

    @classmethod
    def provisioned(cls) -> PortState:
        """The state ``playbooks/provision.yaml`` leaves (DSCP 26 → priority 3, PFC 3, ETS 45/50/5, RS-FEC,
        traffic class and RDMA-CM ToS 106, the link mode forced, IRQs on the NIC's node)."""
        return cls(trust="dscp", pfc=[0, 0, 0, 1, 0, 0, 0, 0], tc_bw=[0, 45, 0, 50, 0, 0, 5, 0], fec="RS",
                   tclass=106, cma_tos=106, autoneg=False, irq_pinned=True)


def port(cfg, nd: str) -> PortState | None:
    """The runtime state of netdev ``nd`` (None when it does not exist)."""
    nds = cfg.netdevs.get(nd)
    if nds is None:
        return None
    if getattr(nds, "roce", None) is None:
        nds.roce = PortState()
    return nds.roce


def _csv_ints(v: str, n: int, lo: int, hi: int) -> list[int] | None:
    parts = v.split(",")
    if len(parts) != n or not all(p.strip().isdigit() and lo <= int(p) <= hi for p in parts):
        return None
    return [int(p) for p in parts]


def mlnx_qos(cfg, args, out, err):
    nd = args[args.index("-i") + 1] if "-i" in args and args.index("-i") + 1 < len(args) else None
    st = port(cfg, nd) if nd else None
    if st is None:
        err(f"Netlink error: device {nd} not found\n")
        return 1
    if "--trust" in args:
        t = args[args.index("--trust") + 1]
        if t not in ("pcp", "dscp"):
            err(f"Invalid trust state: {t}\n")
            return 1
        st.trust = t
    for flag in ("--pfc", "-f"):
        if flag in args:
            vals = _csv_ints(args[args.index(flag) + 1], 8, 0, 1)
            if vals is None:
                err("--pfc takes 8 comma-separated 0/1 values\n")
                return 1
            st.pfc = vals
    if "--tc_bw" in args:
        bw = _csv_ints(args[args.index("--tc_bw") + 1], 8, 0, 100)
        if bw is None or sum(bw) != 100:
            err("Bandwidth sum of ETS TCs must be 100\n")
            return 1
        st.tc_bw = bw
    k = 0
    while "--dscp2prio" in args[k:]:
        k = args.index("--dscp2prio", k) + 1
        op = args[k].split(",") if k < len(args) else []
        if len(op) != 3 or op[0] not in ("set", "del") or not (op[1].isdigit() and op[2].isdigit()) \
                or int(op[1]) > 63 or int(op[2]) > 7:
            err("--dscp2prio takes set,DSCP,PRIO or del,DSCP,PRIO (DSCP 0..63, PRIO 0..7)\n")
            return 1
        d, p = int(op[1]), int(op[2])
        st.dscp2prio[d] = p if op[0] == "set" else d >> 3
    out(render(st))
    return 0


def render(st: PortState) -> str:
    """mlnx_qos's report of one port (the dscp2prio table only under DSCP trust, as the tool prints it)."""
    txt = f"DCBX mode: OS controlled\nPriority trust state: {st.trust}\n"
    if st.trust == "dscp":
        txt += "dscp2prio mapping:\n"
        for p in range(8):
            ds = [d for d in range(63, -1, -1) if st.dscp2prio[d] == p]
            txt += f"\tprio:{p} dscp:{''.join(f'{d:02d},' for d in ds)}\n"
    txt += ("Receive buffer size (bytes): 130944,130944,0,0,0,0,0,0,\nCable len: 7\nPFC configuration:\n"
            "\tpriority    0   1   2   3   4   5   6   7\n"
            f"\tenabled     {'   '.join(map(str, st.pfc))}   \n"
            f"\tbuffer      {'   '.join('1' if x else '0' for x in st.pfc)}   \n")
    for tc in range(8):
        tsa = "vendor" if st.tc_bw is None else (f"ets, bw: {st.tc_bw[tc]}%")
        prios = [p for p in range(8) if DEFAULT_PRIO_TC[p] == tc]
        txt += f"tc: {tc} ratelimit: unlimited, tsa: {tsa}\n" + "".join(f"\t priority:  {p}\n" for p in prios)
    return txt
