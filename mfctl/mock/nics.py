"""Mock NIC, transceiver, firmware and GPU-settings state of a host, answered in the real
tools' formats: devlink -j, ethtool (link and -m SFF-8636), ip -j addr / ip link set /
ip addr replace, mlxconfig -e q / set, mlxfwreset, mlxfwmanager --query / -u, mlnx_qos,
sha256sum, nvidia-smi -pm / -mig; the GPU (dcgmi, dcgm-exporter via curl, dmesg) and RDMA
(ibstat, ibstatus, ibv_devinfo, ibdev2netdev, show_gids, mlxlink) tools are in
:mod:`mfctl.mock.gputools` and :mod:`mfctl.mock.rdmatools`.

Semantics modelled: mlxconfig values are pending until mlxfwreset; firmware burnt with
mlxfwmanager becomes active after mlxfwreset; a lane's received power follows the OCS
cross-connects (transmit power of the far lane minus the OCS insertion loss, split over
the module's four CWDM4 channels); ConnectX ports are not splittable with devlink (the
mlx5 driver does not support it), so a breakout change needs firmware (MODULE_SPLIT).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from dataclasses import dataclass, field

from mfctl.mock import gputools, rdmatools

FACTORY_FW = "22.31.1014"
PROVISIONED_FW = "22.39.1002"  # the version firmware/manifest.yaml pins
MODULE_CHANNELS = 4


def mock_image_sha256(image: str) -> str:
    """The mock firmware store's checksum of an image path (virtual images)."""
    return hashlib.sha256(f"mfctl mock firmware image {image.rsplit('/', 1)[-1]}".encode()).hexdigest()


@dataclass
class NICState:
    """One NIC port/module. ``split`` network devices exist: ``base`` when 1, else
    ``base`` + ``s0``…``s{N-1}`` (the kernel's naming of split ports)."""

    name: str
    pci: str
    part_number: str
    psid: str
    speed_gbps: float
    base: str
    split: int = 1
    fw: str = FACTORY_FW
    fw_pending: str | None = None
    mlx_current: dict[str, str] = field(default_factory=lambda: {"LINK_TYPE_P1": "ETH(2)", "SRIOV_EN": "False(0)",
                                                                  "NUM_OF_VFS": "0", "ROCE_CC_PRIO_MASK_P1": "255"})
    mlx_next: dict[str, str] = field(default_factory=dict)
    trust: str = "pcp"
    pfc: list[int] = field(default_factory=lambda: [0] * 8)
    errors: dict[str, int] = field(default_factory=dict)  # fault injection: ethtool -S error counters

    def __post_init__(self):
        self.mlx_current.setdefault("MODULE_SPLIT_M0", str(self.split))
        if not self.mlx_next:
            self.mlx_next = dict(self.mlx_current)

    @property
    def netdevs(self) -> list[str]:
        return [self.base] if self.split == 1 else [f"{self.base}s{k}" for k in range(self.split)]


@dataclass
class NetdevState:
    mtu: int = 1500
    addresses: list[str] = field(default_factory=list)


class HostConfig:
    """All provisioning state of one mock host."""

    def __init__(self, host, factory: bool):
        self.host = host  # MockHost
        self.nics: dict[str, NICState] = {}
        self.netdevs: dict[str, NetdevState] = {}
        self.gpu_persistence = not factory
        self.gpu_mig = False

    def add_nic(self, nic: NICState, factory: bool, mtu: int = 9000) -> None:
        self.nics[nic.pci] = nic
        for nd in nic.netdevs:
            self.netdevs[nd] = NetdevState(mtu=1500 if factory else mtu)

    def current_netdevs(self) -> list[str]:
        return [nd for nic in self.nics.values() for nd in nic.netdevs]

    def nic_by_pci(self, pci: str) -> NICState | None:
        return self.nics.get(pci) or next((n for n in self.nics.values() if n.pci.endswith(pci)), None)

    # --- command dispatch -------------------------------------------------------------
    def handle(self, argv: list[str], out, err) -> int | None:
        prog = argv[0]
        fn = {"devlink": self._devlink, "ethtool": self._ethtool, "mlxconfig": self._mlxconfig,
              "mlxfwreset": self._mlxfwreset, "mlxfwmanager": self._mlxfwmanager, "mlnx_qos": self._mlnx_qos,
              "sha256sum": self._sha256sum, "all_reduce_perf": self._nccl, "alltoall_perf": self._nccl,
              "mfctl-gemm-bench": self._gemm}.get(prog)
        if fn in (self._nccl,):
            return fn(argv, out, err)
        tool = gputools.COMMANDS.get(prog) or rdmatools.COMMANDS.get(prog)
        if tool is not None:
            return tool(self.host, argv[1:], out, err)
        return None if fn is None else fn(argv[1:], out, err)

    def _devlink(self, args, out, err):
        if args[:3] != ["-j", "port", "show"]:
            err("devlink: only '-j port show' is modelled; port split is not supported by mlx5\n")
            return 95  # EOPNOTSUPP like the kernel
        ports = {}
        for nic in self.nics.values():
            for k, nd in enumerate(nic.netdevs):
                ports[f"pci/{nic.pci}/{k + 1}"] = {"type": "eth", "netdev": nd, "flavour": "physical", "port": k,
                                                   "splittable": False, "lanes": 4}
        out(json.dumps({"port": ports}) + "\n")
        return 0

    def _lane_for(self, netdev):
        return next((lane for lane in self.host.lanes if lane.netdev == netdev), None)

    def _ethtool(self, args, out, err):
        if not args:
            err("ethtool: bad command line argument(s)\n")
            return 1
        module = args[0] == "-m"
        if args[0] == "-S" and len(args) > 1:
            nic = next((n for n in self.nics.values() if args[1] in n.netdevs), None)
            if nic is None:
                err(f"netlink error: no device matches name ({args[1]})\n")
                return 1
            # RoCE traffic lands on priority 3 once DSCP trust + PFC 3 are set, else on priority 0
            prio = 3 if nic.trust == "dscp" and nic.pfc[3] else 0
            lines = ["NIC statistics:", "     rx_packets: 912345678", "     tx_packets: 923456789",
                     "     rx_bytes: 2202570777997", "     tx_bytes: 2662454044895"]
            for p in range(8):
                for d, v in (("rx", 2202570777997), ("tx", 2662454044895)):
                    lines.append(f"     {d}_prio{p}_bytes: {v if p == prio else 0}")
                    lines.append(f"     {d}_prio{p}_packets: {v // 4096 if p == prio else 0}")
            for c in ("rx_out_of_buffer", "rx_crc_errors_phy", "rx_in_range_len_errors_phy", "rx_symbol_err_phy",
                      "rx_discards_phy", "tx_discards_phy", "tx_errors_phy", "rx_pcs_symbol_err_phy"):
                lines.append(f"     {c}: {nic.errors.get(c, 0)}")  # mlx5 names, as in the ConnectX captures
            out("\n".join(lines) + "\n")
            return 0
        nd = args[1] if module and len(args) > 1 else args[0]
        lane = self._lane_for(nd)
        nic = next((n for n in self.nics.values() if nd in n.netdevs), None)
        if lane is None or nic is None:
            err(f"netlink error: no device matches name ({nd})\n")
            return 1
        if module:
            out(self._module_text(lane))
            return 0
        up = self.host.lane_up(lane)
        speed = int(nic.speed_gbps * 1000 / len(nic.netdevs))
        out(f"Settings for {nd}:\n\tSupported ports: [ FIBRE ]\n\tSupported link modes:   100000baseSR4/Full\n"
            f"\t                        100000baseLR4_ER4/Full\n\tSupports auto-negotiation: Yes\n"
            f"\tSpeed: {str(speed) + 'Mb/s' if up else 'Unknown!'}\n\tDuplex: {'Full' if up else 'Unknown! (255)'}\n"
            f"\tLanes: 4\n\tAuto-negotiation: off\n\tPort: FIBRE\n\tPHYAD: 0\n\tTransceiver: internal\n"
            f"\tLink detected: {'yes' if up else 'no'}\n")
        return 0

    def _module_text(self, lane) -> str:
        tb = self.host.testbed
        rx_total = None
        if lane.ocs_rx is not None:
            p = tb.ocs.port_power(lane.ocs_rx)
            rx_total = p if p > -50 else None
        rnd = random.Random(lane.netdev)
        lines = ["Identifier                                : 0x11 (QSFP28)",
                 "Connector                                 : 0x07 (LC)",
                 "Transceiver type                          : 100G Ethernet: 100G CWDM4 MSA with FEC",
                 "Vendor name                               : FINISAR CORP.",
                 "Vendor PN                                 : FTLC1152RGPL",
                 "Revision Compliance                       : SFF-8636 Rev 2.5/2.6/2.7",
                 f"Module temperature                        : {33 + rnd.random() * 3:.2f} degrees C / 93.00 degrees F",
                 "Module voltage                            : 3.2505 V"]
        offs = [rnd.uniform(-0.4, 0.4) for _ in range(MODULE_CHANNELS)]
        offs = [o - sum(offs) / MODULE_CHANNELS for o in offs]
        for c in range(1, MODULE_CHANNELS + 1):
            lines.append(f"Laser tx bias current (Channel {c})         : {38 + rnd.random() * 4:.3f} mA")
        for c in range(1, MODULE_CHANNELS + 1):
            lines.append(f"Transmit avg optical power (Channel {c})    : {_mw(-5.0 + offs[c - 1])}")
        for c in range(1, MODULE_CHANNELS + 1):
            dbm = -40.0 if rx_total is None else rx_total - 10 * math.log10(MODULE_CHANNELS) + offs[c - 1]
            lines.append(f"Rcvr signal avg optical power(Channel {c})  : {_mw(dbm)}")
        lines += ["Laser output power low warning threshold  : 0.1862 mW / -7.30 dBm",  # 100GBASE-SR4 lane: -8.4 dBm min
                  "Laser output power low alarm threshold    : 0.0933 mW / -10.30 dBm",
                  "Laser rx power high alarm threshold       : 2.2387 mW / 3.50 dBm",
                  "Laser rx power low alarm threshold        : 0.0251 mW / -16.00 dBm",
                  "Laser rx power high warning threshold     : 1.7783 mW / 2.50 dBm",
                  "Laser rx power low warning threshold      : 0.0631 mW / -12.00 dBm"]
        return "\n".join(lines) + "\n"

    def ip_set(self, args, out, err) -> int:
        """ip link set dev IF mtu N | ip addr replace A/P dev IF | ip addr flush dev IF"""
        if args[:2] == ["link", "set"] and "mtu" in args and "dev" in args:
            nd = args[args.index("dev") + 1]
            if nd not in self.netdevs:
                err(f'Cannot find device "{nd}"\n')
                return 1
            mtu = args[args.index("mtu") + 1]
            if not mtu.isdigit() or not 68 <= int(mtu) <= 9978:
                err(f'Error: argument "{mtu}" is wrong: Invalid "mtu" value\n')
                return 1
            self.netdevs[nd].mtu = int(mtu)
            return 0
        if args[:2] == ["addr", "replace"] and len(args) >= 5 and args[3] == "dev":
            nd, addr = args[4], args[2]
            if nd not in self.netdevs:
                err(f'Cannot find device "{nd}"\n')
                return 1
            if addr not in self.netdevs[nd].addresses:
                self.netdevs[nd].addresses.append(addr)
            return 0
        if args[:2] == ["addr", "del"] and len(args) >= 5 and args[3] == "dev":
            nd, addr = args[4], args[2]
            if nd in self.netdevs and addr in self.netdevs[nd].addresses:
                self.netdevs[nd].addresses.remove(addr)
                return 0
            err("RTNETLINK answers: Cannot assign requested address\n")
            return 2
        return -1

    def _mlxconfig(self, args, out, err):
        if "-d" not in args:
            err("-E- Device not specified\n")
            return 1
        nic = self.nic_by_pci(args[args.index("-d") + 1])
        if nic is None:
            err(f"-E- Failed to open the device: {args[args.index('-d') + 1]}\n")
            return 1
        hdr = (f"\nDevice #1:\n----------\n\nDevice type:        ConnectX6DX         \nName:               {nic.part_number}\n"
               f"Description:        ConnectX-6 Dx EN adapter card; 100GbE; Dual-port QSFP56\nDevice:             {nic.pci}\n\n")
        if "q" in args:
            rows = "".join(f"{'*' if nic.mlx_current[k] != nic.mlx_next[k] else ' '}       {k:<44}{nic.mlx_current[k]:<20}"
                           f"{nic.mlx_current[k]:<20}{nic.mlx_next[k]}\n" for k in sorted(nic.mlx_current))
            out(hdr + f"Configurations:{'':<41}Default             Current             Next Boot\n" + rows)
            return 0
        if "set" in args:
            changes = [a.split("=", 1) for a in args[args.index("set") + 1:]]
            for k, _v in changes:
                if k not in nic.mlx_current:
                    err(f"-E- The Device doesn't support {k} parameter\n")
                    return 3
            rows = ""
            for k, v in changes:
                old = nic.mlx_next[k]
                label = old.split("(")[0] if "(" in old else None
                new = f"{label}({v})" if label and not v.startswith(label) else v
                if label and v in ("ETH", "IB", "VPI"):
                    new = {"IB": "IB(1)", "ETH": "ETH(2)", "VPI": "VPI(3)"}[v]
                elif label == "True" or label == "False":
                    new = "True(1)" if v in ("1", "True") else "False(0)"
                elif label in ("IB", "ETH", "VPI"):
                    new = {"1": "IB(1)", "2": "ETH(2)", "3": "VPI(3)"}.get(v, new)
                rows += f"        {k:<44}{old:<21}{new}\n"
                nic.mlx_next[k] = new
            out(hdr + f"Configurations:{'':<42}Next Boot       New\n" + rows +
                "\n Apply new Configuration? (y/n) [n] : y\nApplying... Done!\n"
                "-I- Please reboot machine to load new configurations.\n")
            return 0
        err("-E- unknown mlxconfig command\n")
        return 1

    def _mlxfwreset(self, args, out, err):
        nic = self.nic_by_pci(args[args.index("-d") + 1]) if "-d" in args else None
        if nic is None:
            err("-E- Device not found\n")
            return 1
        nic.mlx_current = dict(nic.mlx_next)
        split = int(nic.mlx_current.get("MODULE_SPLIT_M0", "1"))
        if split != nic.split:  # the module is re-split: its old netdevs go, new ones appear (MTU 1500, no address)
            for nd in nic.netdevs:
                self.netdevs.pop(nd, None)
            nic.split = split
            for nd in nic.netdevs:
                self.netdevs[nd] = NetdevState()
        if nic.fw_pending:
            nic.fw, nic.fw_pending = nic.fw_pending, None
        out("The reset level for device, " + nic.pci + " is:\n\n3: Driver restart and PCI reset\n"
            "-I- Sending Reset Command To Fw             -Done\n-I- Restarting MST                          -Done\n")
        return 0

    def _mlxfwmanager(self, args, out, err):
        if "--query" in args:
            txt = "Querying Mellanox devices firmware ...\n"
            for k, nic in enumerate(self.nics.values(), 1):
                txt += (f"\nDevice #{k}:\n----------\n\n  Device Type:      ConnectX6DX\n  Part Number:      {nic.part_number}\n"
                        f"  Description:      ConnectX-6 Dx EN adapter card; 100GbE\n  PSID:             {nic.psid}\n"
                        f"  PCI Device Name:  {nic.pci}\n  Base MAC:         b8cef6{k:06x}\n"
                        f"  Versions:         Current        Available     \n"
                        + (f"     FW             {nic.fw_pending:<15}N/A           \n     FW (Running)   {nic.fw:<15}N/A\n\n"
                           if nic.fw_pending else f"     FW             {nic.fw:<15}N/A           \n\n")
                        + f"  Status:           {'Up to date, reset needed' if nic.fw_pending else 'No matching image found'}\n")
            out(txt)
            return 0
        if "-u" in args and "-i" in args and "-d" in args:
            nic = self.nic_by_pci(args[args.index("-d") + 1])
            image = args[args.index("-i") + 1]
            if nic is None:
                err("-E- Device not found\n")
                return 1
            ver = image.rsplit("-", 1)[-1].removesuffix(".bin").replace("_", ".")
            if nic.psid not in image:
                err(f"-E- No matching image found for PSID {nic.psid} in {image}\n")
                return 1
            nic.fw_pending = ver
            out(f"Device #1:\n  PSID: {nic.psid}\n  Versions: Current {nic.fw} Available {ver}\n\n"
                "Perform FW update? [y/N]: y\nDevice #1: Updating FW ...     Done\n\n"
                "Restart needed for updates to take effect.\n")
            return 0
        err("-E- unsupported mlxfwmanager arguments\n")
        return 1

    def _mlnx_qos(self, args, out, err):
        nd = args[args.index("-i") + 1] if "-i" in args else None
        nic = next((n for n in self.nics.values() if nd in n.netdevs), None)
        if nic is None:
            err(f"Netlink error: device {nd} not found\n")
            return 1
        if "--trust" in args:
            t = args[args.index("--trust") + 1]
            if t not in ("pcp", "dscp"):
                err(f"Invalid trust state: {t}\n")
                return 1
            nic.trust = t
        if "--pfc" in args:
            vals = args[args.index("--pfc") + 1].split(",")
            if len(vals) != 8 or any(v not in ("0", "1") for v in vals):
                err("--pfc takes 8 comma-separated 0/1 values\n")
                return 1
            nic.pfc = [int(v) for v in vals]
        out(f"DCBX mode: OS controlled\nPriority trust state: {nic.trust}\n"
            "Receive buffer size (bytes): 130944,130944,0,0,0,0,0,0,\n"
            "Cable len: 7\nPFC configuration:\n\tpriority    0   1   2   3   4   5   6   7\n"
            f"\tenabled     {'   '.join(map(str, nic.pfc))}   \n\tbuffer      0   0   0   1   0   0   0   0   \n"
            "tc: 0 ratelimit: unlimited, tsa: vendor\n\t priority:  1\n")
        return 0

    # modelled collective and GEMM costs of an 8 x A100 node (α + β·n, ±2 % noise)
    NCCL_MODEL = {"all_reduce_perf": (22e-6, 1 / 110e9, 2.0), "alltoall_perf": (35e-6, 1 / 95e9, 1.0)}

    def _nccl(self, argv, out, err):
        test, args = argv[0], argv[1:]
        def size(x):
            mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
            return int(float(x[:-1]) * mult[x[-1]]) if x[-1] in mult else int(x)
        try:
            b = size(args[args.index("-b") + 1]) if "-b" in args else 8
            e = size(args[args.index("-e") + 1]) if "-e" in args else 1 << 28
            f = int(args[args.index("-f") + 1]) if "-f" in args else 2
        except (ValueError, IndexError):
            err(f"{test}: invalid size arguments\n")
            return 1
        alpha, beta, busfactor = self.NCCL_MODEL[test]
        if test == "alltoall_perf" and "-n" in args:  # the inter-node variant: the host's live NIC lanes
            rate = 0.0
            for nic in self.nics.values():
                for nd in nic.netdevs:
                    lane = self._lane_for(nd)
                    if lane is not None and (lane.ocs_tx is None or self.host.lane_up(lane)):
                        rate += nic.speed_gbps / len(nic.netdevs) * 1e9 / 8 * 0.92
            beta, busfactor = 1 / max(rate, 1.0), 1.0
        rnd = random.Random(f"{self.host.name}{test}")
        redop = "sum" if test == "all_reduce_perf" else "none"
        lines = [f"# nThread 1 nGpus 8 minBytes {b} maxBytes {e} step: {f}(factor) "
                 "warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0",
                 "#", f"#{'':>59}out-of-place                       in-place          ",
                 "#       size         count      type   redop    root     time   algbw   busbw #wrong"
                 "     time   algbw   busbw #wrong",
                 "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"
                 "            (us)  (GB/s)  (GB/s)       "]
        n = b
        while n <= e:
            t = (alpha + beta * n) * rnd.uniform(0.98, 1.02)
            algbw = n / t / 1e9
            lines.append(f"{n:>12} {n // 4:>13}     float {redop:>7}      -1 {t * 1e6:>8.2f} "
                         f"{algbw:>7.2f} {algbw * busfactor:>7.2f}"
                         f"      0 {t * 1e6 * rnd.uniform(0.99, 1.01):>8.2f} {algbw:>7.2f} {algbw * busfactor:>7.2f}      0")
            n *= f
        lines += ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 42.0", "#"]
        out("\n".join(lines) + "\n")
        return 0

    def _gemm(self, args, out, err):
        hidden = int(args[args.index("--hidden") + 1]) if "--hidden" in args else 4096
        ffn = int(args[args.index("--ffn") + 1]) if "--ffn" in args else 14336
        rnd = random.Random(self.host.name)
        for m in (256, 512, 1024, 2048, 4096, 8192, 16384):
            flops = 2 * m * ffn * hidden
            t = (12e-6 + flops / (0.65 * 312e12)) * rnd.uniform(0.98, 1.02)
            out(f"{m} {ffn} {hidden} {t * 1e6:.2f} {flops / t / 1e12:.1f}\n")
        return 0

    def _sha256sum(self, args, out, err):
        if not args:
            err("sha256sum: missing operand\n")
            return 1
        image = args[-1]
        if not image.startswith("/opt/firmware/"):
            err(f"sha256sum: {image}: No such file or directory\n")
            return 1
        out(f"{mock_image_sha256(image)}  {image}\n")
        return 0


def _mw(dbm: float) -> str:
    if dbm <= -40:
        return "0.0001 mW / -40.00 dBm"
    return f"{10 ** (dbm / 10):.4f} mW / {dbm:.2f} dBm"
