"""The mock host's NIC, transceiver and firmware state (:class:`HostConfig`), and the table that
routes each tool to the module answering it (links, firmware, QoS, benchmarks; GPU and RDMA
tools in :mod:`mfctl.mock.gputools` and :mod:`mfctl.mock.rdmatools`)."""

from __future__ import annotations

from dataclasses import dataclass, field

FACTORY_FW = "22.31.1014"
PROVISIONED_FW = "22.39.1002"  # the version firmware/manifest.yaml pins
MODULE_CHANNELS = 4


#: the mock's cards by inventory model: part number, PSID, factory and provisioned firmware, whether the
#: firmware can split the port (MODULE_SPLIT_M0 + NUM_OF_PF, mfctl.provision.breakout.CARDS) and how many ways.
#: ConnectX-7 MCX715105AS-WEAT_Ax / MT_0000001244 as an operator's mlxconfig/mlxup shows it (docs/provisioning.md).
CARD_MODELS: dict[str, dict] = {
    "ConnectX-6 Dx": {"part_number": "MCX623106AN-CDA_Ax", "psid": "MT_0000000359", "factory_fw": FACTORY_FW,
                      "fw": PROVISIONED_FW, "max_split": 1},
    "ConnectX-7": {"part_number": "MCX715105AS-WEAT_Ax", "psid": "MT_0000001244", "factory_fw": "28.36.1010",
                   "fw": "28.39.1002", "max_split": 2},
}


@dataclass
class NICState:
    """One NIC port/module. After a split the card has ``split`` PCI functions (``pci`` is
    function 0): sub-port k is PCI function k of the slot with netdev ``{base}f{k}np{k}``
    (systemd's slot name ``base`` such as ``ens1``, the PCI function, then ``np`` + the port's
    ``phys_port_name`` p{k}) — ``ens1f0np0``, ``ens1f1np1``; unsplit, only ``{base}f0np0``."""

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
    model: str = "ConnectX-6 Dx"
    optics: str = "100G-CWDM4"  #: the module's class (mfctl.provision.breakout.MODULES)
    wired: int = 1  #: sub-ports the module's fibres are cabled as (the inventory's lanes), whatever the split

    def __post_init__(self):
        if self.max_split > 1:  # only a split-capable card's firmware has the split parameters
            from mfctl.provision.breakout import CARDS, split_layout

            for k, v in split_layout(CARDS[self.model], self.split).items():
                self.mlx_current.setdefault(k, v)
        if not self.mlx_next:
            self.mlx_next = dict(self.mlx_current)

    @property
    def max_split(self) -> int:
        return CARD_MODELS.get(self.model, {}).get("max_split", 1)

    def firmware_split(self) -> int:
        """The port count the *current* firmware settings make (1 on a card that cannot split)."""
        if self.max_split == 1:
            return 1
        return int(self.mlx_current.get("NUM_OF_PF", "1"))

    def refuse_setting(self, key: str, value: str) -> str | None:
        """Why this card's firmware refuses ``key=value`` (mlxconfig's ``-E-`` line), or None:
        a split parameter's value must be one of the card's tested layouts' (a port 1..max_split or
        FF; NUM_OF_PF 1..max_split)."""
        if key.startswith("MODULE_SPLIT_M0[") and key in self.mlx_current:
            ok = {str(p) for p in range(1, self.max_split + 1)} | {"FF", "0xFF", "0xff", "255"}
            if value not in ok:
                return (f"-E- The Device doesn't support value {value} for {key} (ports 1..{self.max_split} or FF "
                        f"on {self.model})")
        if key == "NUM_OF_PF" and key in self.mlx_current and value not in {str(p) for p in range(1, self.max_split + 1)}:
            return f"-E- The Device doesn't support value {value} for NUM_OF_PF (1..{self.max_split} on {self.model})"
        return None

    def pci_of(self, k: int) -> str:
        """PCI address of sub-port ``k``: function k of the card's slot."""
        head, fn = self.pci.rsplit(".", 1)
        return f"{head}.{int(fn) + k}"

    def netdev_of(self, k: int) -> str:
        fn = int(self.pci.rsplit(".", 1)[1]) + k
        return f"{self.base}f{fn}np{k}"

    @property
    def netdevs(self) -> list[str]:
        return [self.netdev_of(k) for k in range(self.split)]

    def subport_channels(self, k: int) -> list[int]:
        """The module channels (1-based) sub-port k uses: ``MODULE_CHANNELS / split`` each, in order."""
        per = MODULE_CHANNELS // self.split
        return list(range(k * per + 1, k * per + per + 1))


@dataclass
class NetdevState:
    mtu: int = 1500
    addresses: list[str] = field(default_factory=list)
    roce: object = None  # mfctl.mock.nics.qos.PortState: QoS/ECN/sysctl/FEC of this netdev (None: a fresh netdev's)


class HostConfig:
    """All provisioning state of one mock host."""

    def __init__(self, host, factory: bool):
        self.host = host  # MockHost
        self.nics: dict[str, NICState] = {}
        self.netdevs: dict[str, NetdevState] = {}
        self.gpu_persistence = not factory
        self.factory = factory  # hosts start unprovisioned (the host-wide state of mfctl.mock.nics.host starts from it)
        self.gpu_mig = False
        #: how devlink names mlx5's ports: "pci" (``pci/0000:0c:00.1/131071``, kernels before 6.5) or
        #: "auxiliary" (``auxiliary/mlx5_core.eth.1/131071``, Linux 6.5 on: ironcore-dev/dpservice#499)
        self.devlink_bus = "pci"

    def add_nic(self, nic: NICState, factory: bool, mtu: int = 9000) -> None:
        from mfctl.mock.nics.qos import PortState

        self.nics[nic.pci] = nic
        for nd in nic.netdevs:
            self.netdevs[nd] = NetdevState(mtu=1500 if factory else mtu, roce=None if factory else PortState.provisioned())

    def link_details(self, netdev: str) -> dict:
        """What ``ip -d -j link show`` adds for a card's netdev: its parent device (the sub-port's PCI
        function) and ``phys_port_name`` (``p{k}``); {} for a netdev of no card."""
        for nic in self.nics.values():
            if netdev in nic.netdevs:
                k = nic.netdevs.index(netdev)
                return {"phys_port_name": f"p{k}", "parentbus": "pci", "parentdev": nic.pci_of(k)}
        return {}

    def current_netdevs(self) -> list[str]:
        return [nd for nic in self.nics.values() for nd in nic.netdevs]

    def nic_by_pci(self, pci: str) -> NICState | None:
        """The card at ``pci`` (a full or short address) or at any PCI function of it after a split
        (the MFT tools open the same device through any of its PFs)."""
        found = self.nics.get(pci) or next((n for n in self.nics.values() if n.pci.endswith(pci)), None)
        return found or next((n for n in self.nics.values()
                              if any(n.pci_of(k).endswith(pci) for k in range(1, n.split))), None)

    # --- command dispatch -------------------------------------------------------------
    def lane_for(self, netdev):
        """The inventory lane whose netdev is ``netdev`` (None when the inventory has none)."""
        return next((lane for lane in self.host.lanes if lane.netdev == netdev), None)

    def ip_set(self, args, out, err) -> int:
        """``ip link set`` / ``ip addr replace|del``: see :func:`mfctl.mock.nics.links.ip_set`."""
        from mfctl.mock.nics import links

        return links.ip_set(self, args, out, err)

    # --- command dispatch -------------------------------------------------------------
    def handle(self, argv: list[str], out, err) -> int | None:
        """Answer ``argv`` if one of the NIC, firmware, QoS, benchmark, GPU or RDMA tools is
        ``argv[0]`` (its exit status), else None."""
        from mfctl.mock import gputools, rdmatools
        from mfctl.mock.nics import TOOLS

        tool = TOOLS.get(argv[0])
        if tool is not None:
            return tool(self, argv, out, err)
        gtool = gputools.COMMANDS.get(argv[0]) or rdmatools.COMMANDS.get(argv[0])
        return None if gtool is None else gtool(self.host, argv[1:], out, err)
