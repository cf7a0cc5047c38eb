"""The mock host's NIC, transceiver and firmware state (:class:`HostConfig`), and the table that
routes each tool to the module answering it (links, firmware, QoS, benchmarks; GPU and RDMA
tools in :mod:`mfctl.mock.gputools` and :mod:`mfctl.mock.rdmatools`)."""

from __future__ import annotations

from dataclasses import dataclass, field

FACTORY_FW = "22.31.1014"
PROVISIONED_FW = "22.39.1002"  # the version firmware/manifest.yaml pins
MODULE_CHANNELS = 4


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
