"""Provisioning recipes (``playbooks/provision.yaml``) and firmware manifests
(``firmware/manifest.yaml``), validated with file:line errors (exit 3).

Every value that reaches a remote command is constrained here (numbers, enumerations,
``[A-Z0-9_]`` parameter names, CIDR addresses), and commands are argv lists quoted with
``shlex.quote`` on top of that.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from mfctl.inventory.loader import load_checked


class _S(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RoCE(_S):
    """RoCE QoS end to end, per port (NVIDIA "RoCE configuration for ConnectX" / DCQCN guides; the
    values of a 32-GPU RoCE testbed in ``playbooks/provision.yaml``). The traffic class the
    applications put in the IP header (``NCCL_IB_TC``) is DSCP × 4 + ECN bits; under DSCP trust the
    port maps that DSCP to a priority (``dscp2prio``: default DSCP d → priority d // 8), and PFC, ETS
    and ECN must be on that priority — :meth:`_consistent` checks the chain."""

    trust: Literal["dscp", "pcp"] = "dscp"
    dscp: int = Field(26, ge=0, le=63, description="the RoCE data DSCP (26: AF31, the common RoCE choice)")
    pfc_priority: int | None = Field(3, ge=0, le=7, description="the lossless RoCE priority (PFC on it only)")
    dscp2prio: dict[int, int] = Field(default_factory=dict, description="DSCP → priority entries set on top of "
                                      "the default map (mlnx_qos --dscp2prio set,DSCP,PRIO)")
    tc_bw: list[int] | None = Field(None, description="ETS bandwidth % per traffic class 0..7 (sum 100; mlnx_qos "
                                    "--tc_bw); with mlx5's default prio→tc map priority 3 is TC 3")
    ecn: bool = Field(True, description="ECN (DCQCN) enabled on the RoCE priority: ecn/roce_np and roce_rp enable/<prio>")
    cnp_dscp: int | None = Field(48, ge=0, le=63, description="DSCP of congestion notification packets (ecn/roce_np/cnp_dscp)")
    cnp_priority: int | None = Field(6, ge=0, le=7, description="802.1p priority of CNPs (ecn/roce_np/cnp_802p_prio)")
    ib_tc: int | None = Field(None, ge=0, le=255, description="the traffic class RDMA applications use "
                              "(NCCL_IB_TC): must be dscp × 4 + ECN bits (0..3)")
    playbook: str | None = Field(None, description="a training playbook whose nccl.ib_tc must match dscp "
                                 "(relative to this recipe)")
    fec: Literal["rs", "baser", "off", "auto"] | None = Field(None, description="FEC forced on every lane "
                                                              "(ethtool --set-fec IF encoding E); None: left alone")
    cma_tos: int | None = Field(None, ge=0, le=255, description="the RDMA-CM default ToS of each lane's RDMA port "
                                "(configfs rdma_cm/IBDEV/ports/1/default_roce_tos, what cma_roce_tos -t writes): "
                                "DSCP x 4 + ECN bits, for RDMA-CM applications that set none; None: left alone")
    traffic_class: int | None = Field(None, ge=0, le=255, description="MLNX_OFED's global traffic class of each "
                                      "lane's RDMA port (/sys/class/infiniband/IBDEV/tc/1/traffic_class): it overrides "
                                      "every QP's own, NCCL_IB_TC included; DSCP x 4 + ECN bits; None: left alone")

    @field_validator("cma_tos", "traffic_class")
    @classmethod
    def _tos(cls, v: int | None, info) -> int | None:
        """A ToS / traffic class byte is DSCP (6 high bits) + ECN (2 low bits): its DSCP must be the
        recipe's, or that traffic lands on another priority than PFC's; ECN bits 3 (CE) are the
        switches' mark, never a sender's."""
        dscp = info.data.get("dscp")
        if v is None or dscp is None:
            return v
        if v >> 2 != dscp:
            raise ValueError(f"{info.field_name} {v} is DSCP {v >> 2} (ToS = DSCP x 4 + ECN bits), not the recipe's "
                             f"DSCP {dscp}: use {dscp * 4 + 2} (DSCP {dscp}, ECT(0))")
        if v & 3 == 3:
            raise ValueError(f"{info.field_name} {v} sets ECN bits 11 (CE, congestion experienced): a sender never "
                             f"marks CE; use {v - 1} (ECT(0)) or {v - 2} (ECT(1))")
        return v

    @field_validator("dscp2prio")
    @classmethod
    def _d2p(cls, v: dict[int, int]) -> dict[int, int]:
        for d, p in v.items():
            if not (0 <= d <= 63 and 0 <= p <= 7):
                raise ValueError(f"dscp2prio {d}: {p}: DSCP must be 0..63 and priority 0..7")
        return v

    @field_validator("tc_bw")
    @classmethod
    def _bw(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and (len(v) != 8 or any(not 0 <= x <= 100 for x in v) or sum(v) != 100):
            raise ValueError(f"tc_bw {v}: 8 percentages (one per traffic class) that sum to 100")
        return v

    def priority_of(self, dscp: int) -> int:
        """The priority a port with this recipe gives DSCP ``dscp`` (default map: dscp // 8)."""
        return self.dscp2prio.get(dscp, dscp >> 3)

    @model_validator(mode="after")
    def _consistent(self) -> RoCE:
        if self.trust == "dscp" and self.pfc_priority is not None and self.priority_of(self.dscp) != self.pfc_priority:
            raise ValueError(f"DSCP {self.dscp} maps to priority {self.priority_of(self.dscp)} (dscp2prio), but PFC is on "
                             f"priority {self.pfc_priority}: RoCE traffic would be lossy (set dscp2prio {{{self.dscp}: "
                             f"{self.pfc_priority}}} or pfc_priority: {self.priority_of(self.dscp)})")
        if self.ib_tc is not None and self.ib_tc >> 2 != self.dscp:
            raise ValueError(f"ib_tc {self.ib_tc} is DSCP {self.ib_tc >> 2} (traffic class = DSCP x 4 + ECN bits), "
                             f"not the recipe's DSCP {self.dscp}: use ib_tc {self.dscp * 4 + 2}")
        if self.tc_bw is not None and self.pfc_priority is not None and self.tc_bw[_PRIO_TC[self.pfc_priority]] == 0:
            raise ValueError(f"tc_bw gives 0 % to TC {_PRIO_TC[self.pfc_priority]}, where the RoCE priority "
                             f"{self.pfc_priority} is sent")
        if self.tc_bw is not None and self.cnp_priority is not None and self.tc_bw[_PRIO_TC[self.cnp_priority]] == 0:
            raise ValueError(f"tc_bw gives 0 % to TC {_PRIO_TC[self.cnp_priority]}, where the CNPs (priority "
                             f"{self.cnp_priority}) are sent: congestion notifications could starve")
        if self.cnp_priority is not None and self.pfc_priority is not None and self.cnp_priority == self.pfc_priority:
            raise ValueError(f"cnp_priority {self.cnp_priority} is the PFC priority: CNPs must not wait behind the "
                             "data they throttle")
        return self


#: mlx5's default priority → traffic class map (priority 0 on TC 1, 1 on TC 0, the rest on their own: mlnx_qos)
_PRIO_TC = [1, 0, 2, 3, 4, 5, 6, 7]


class Rails(_S):
    """Several RoCE ports of one host in one subnet (the sub-ports of a breakout): per-interface ARP and
    reverse-path settings and source routing per rail, or replies and traffic leave the wrong port
    (kernel ip-sysctl.rst; operators' multi-rail RoCE guides)."""

    arp_ignore: int = Field(1, ge=0, le=8, description="reply only for addresses of the receiving interface")
    arp_announce: int = Field(2, ge=0, le=2, description="use the outgoing interface's own address in ARP requests")
    rp_filter: int = Field(2, ge=0, le=2, description="loose reverse-path filter (strict 1 drops asymmetric replies)")
    table_base: int = Field(100, ge=1, le=250, description="lane k of a shared subnet gets routing table base + k + 1")
    rule_priority: int = Field(100, ge=1, le=32000, description="priority of the first 'from ADDR' rule (one per rail)")


class GPU(_S):
    """``persistence``: the persistence daemon (``nvidia-persistenced``) running and enabled — legacy
    ``nvidia-smi -pm 1`` is "near end-of-life … in favor of the Persistence Daemon" (NVIDIA Driver
    Persistence docs) —; false: the daemon stopped and persistence mode off. ``mig``: MIG mode, which
    on A100 is pending until a GPU reset. ``peermem``/``acs_off``/``max_read_req``: GPUDirect RDMA
    prerequisites (the nvidia-peermem module, ACS off on the PCIe switch ports above the NICs, the NICs'
    PCIe MaxReadReq)."""

    persistence: bool = True
    mig: bool = False
    peermem: bool = Field(True, description="nvidia-peermem loaded (GPUDirect RDMA through the mlx5 verbs)")
    acs_off: bool = Field(True, description="ACS off on the PCIe switch downstream ports above each NIC")
    max_read_req: Literal[512, 1024, 2048, 4096] | None = Field(4096, description="the NICs' PCIe MaxReadReq (bytes)")


class Irq(_S):
    """The interrupts of each lane's PCI function (``/sys/class/net/IF/device/msi_irqs/``) on the CPUs of the
    NIC's own NUMA node (``device/local_cpulist``), as NVIDIA's ``set_irq_affinity_bynode.sh`` /
    ``mlnx_affinity`` do; irqbalance moves IRQs again every 10 s, so it is stopped or reported."""

    affinity: Literal["node", "off"] = Field("node", description="node: every IRQ of the port may run on any CPU "
                                             "of the NIC's NUMA node (smp_affinity_list = local_cpulist); off: left alone")
    irqbalance: Literal["stop", "report"] = Field("stop", description="stop: systemctl disable --now irqbalance "
                                                  "before pinning; report: leave it running and say it undoes the pinning")
    irqbalance_interval_s: float = Field(10.0, gt=0, le=3600, allow_inf_nan=False, description=(
        "irqbalance's rebalancing interval (its --interval; 10 s by default, irqbalance(1)): under report, the "
        "verify reads pinned IRQs back one such pass after the write, so a pinning that irqbalance undoes is not "
        "called verified (and one it leaves alone, its IRQs banned in its config, is)"))


class Link(_S):
    """Each lane's Ethernet link mode forced to what the breakout gives its sub-port (``ethtool -s IF
    speed MBPS lanes L autoneg off``, ethtool >= 5.10 for ``lanes``): through an OCS there is no
    auto-negotiation partner that stays, so the mode is set, not negotiated. Speed and lanes come
    from the inventory (the breakout's per-sub-port speed; the card's lanes / sub-ports), checked
    against the port's own supported link modes at plan time."""

    force: bool = Field(True, description="force speed and lanes with auto-negotiation off; false: left alone")


class Optics(_S):
    rx_margin_db: float = Field(3.0, ge=0, description="required margin above the module's Rx low-warning threshold")
    ocs_agreement_db: float = Field(2.0, gt=0, description="module Rx total vs. OCS output-port reading")


class ProvisionSpec(_S):
    #: strict: ``"yes"`` is no bool and ``"9000"`` no int (pydantic would coerce them silently); the
    #: nested sections are validated strictly too (:meth:`model_validate`: strictness at run time
    #: reaches nested models, a model's own config does not)
    model_config = ConfigDict(extra="forbid", strict=True)

    @classmethod
    def model_validate(cls, obj, *, strict: bool | None = None, **kw):  # type: ignore[override]
        return super().model_validate(obj, strict=True if strict is None else strict, **kw)

    name: str
    inventory: str
    firmware_manifest: str | None = None
    mtu: int = Field(9000, ge=1280, le=9978)
    address_pattern: str | None = Field(None, description="per lane CIDR, e.g. 198.18.{nic}.{slot}/24 ({host}: "
                                        "1-based host index, {nic}: NIC index, {lane}: lane index, {slot}: "
                                        "8 x (host - 1) + lane + 1); every lane must get its own address")
    roce: RoCE = RoCE()
    rails: Rails = Rails()
    gpu: GPU = GPU()
    mlxconfig: dict[str, int] = Field(default_factory=dict, description="firmware settings (numeric values): a known "
                                      "parameter within its range (mfctl.hosts.mellanox.MLXCONFIG_PARAMS), any other "
                                      "name only as a raw non-negative number")
    optics: Optics = Optics()
    irq: Irq = Irq()
    link: Link = Link()

    source: str | None = Field(None, exclude=True)

    @field_validator("mlxconfig")
    @classmethod
    def _names(cls, v: dict[str, int]) -> dict[str, int]:
        import re

        from mfctl.hosts.mellanox import check_mlxconfig_value

        for k, val in v.items():
            if not re.fullmatch(r"[A-Z][A-Z0-9_]{1,63}", k):
                raise ValueError(f"{k!r} is not an mlxconfig parameter name")
            why = check_mlxconfig_value(k, val)
            if why:
                raise ValueError(why)
        return v

    @field_validator("address_pattern")
    @classmethod
    def _pattern(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if "/" not in v:
            raise ValueError(f"{v!r} needs an explicit /prefix")
        try:
            ipaddress.ip_interface(v.format(host=1, nic=0, lane=0, slot=1))
        except (ValueError, KeyError, IndexError) as e:
            raise ValueError(f"{v!r} does not give an address/prefix: {e}") from None
        return v

    def path(self, p: str) -> Path:
        q = Path(p).expanduser()
        return q if q.is_absolute() or not self.source else Path(self.source).parent / q

    def address_for(self, host_index: int, nic_index: int, lane_index: int) -> str | None:
        if not self.address_pattern:
            return None
        return str(ipaddress.ip_interface(self.address_pattern.format(
            host=host_index, nic=nic_index, lane=lane_index, slot=8 * (host_index - 1) + lane_index + 1)))

    def check_addresses(self, inv) -> None:
        """Every lane of every host must get a distinct address. Raises ConfigError."""
        from mfctl.errors import ConfigError

        seen: dict[str, str] = {}
        for hi, h in enumerate(inv.hosts):
            for ni, nic in enumerate(h.nics):
                for lane in nic.lanes:
                    try:
                        a = self.address_for(hi + 1, ni, lane.index)
                    except ValueError as e:
                        raise ConfigError(f"address_pattern gives no valid address for {h.name}/{nic.name}.{lane.index}: {e}",
                                          path=self.source) from None
                    ip = a.split("/")[0] if a else None
                    if ip and ip in seen:
                        raise ConfigError(f"address_pattern gives {ip} to both {seen[ip]} and {h.name}/{nic.name}.{lane.index}"
                                          " (use {host}, {nic}, {lane} or {slot})", path=self.source)
                    if ip:
                        seen[ip] = f"{h.name}/{nic.name}.{lane.index}"


class FirmwareImage(_S):
    """One pinned image. It is matched to a NIC by ``psid`` exactly (an image is built for one PSID:
    flint and mlxfwmanager refuse another's); ``part_number`` says which board it is for and is
    only used to explain a NIC left without an image."""

    part_number: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", description="the board's part number (prefix), for messages")
    psid: str = Field(pattern=r"^[A-Z0-9_]{1,16}$", description="the PSID the image is built for, matched exactly")
    version: str = Field(pattern=r"^\d+\.\d+\.\d+$")
    image: str = Field(pattern=r"^/[A-Za-z0-9_./-]+$", description="absolute path of the image on the hosts")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    allow_downgrade: bool = Field(False, description="burn this image even over a newer one (mlxfwmanager --force); "
                                  "without it a NIC with newer firmware is refused")


class FirmwareManifest(_S):
    images: list[FirmwareImage] = Field(min_length=1)

    @field_validator("images")
    @classmethod
    def _one_per_psid(cls, v: list[FirmwareImage]) -> list[FirmwareImage]:
        seen: set[str] = set()
        for im in v:
            if im.psid in seen:
                raise ValueError(f"two images pinned for PSID {im.psid}: pin one version per PSID")
            seen.add(im.psid)
        return v

    def for_nic(self, part_number: str, psid: str | None) -> FirmwareImage | None:
        """The image pinned for ``psid`` (exactly; never through the part number), or None."""
        return next((im for im in self.images if psid and im.psid == psid), None)

    def near_miss(self, part_number: str, psid: str | None) -> FirmwareImage | None:
        """An image for the same board (part-number prefix) but another PSID: what an OEM card
        (``DEL…``/``HPE…``/``LNV…`` PSID) would be offered and refuses."""
        return next((im for im in self.images if part_number and part_number.startswith(im.part_number)
                     and im.psid != psid), None)


def load_spec(path: str | Path) -> ProvisionSpec:
    spec = load_checked(path, ProvisionSpec)
    spec.source = str(Path(path).resolve())
    check_roce_playbook(spec)
    return spec


def check_roce_playbook(spec: ProvisionSpec, playbook: str | Path | None = None) -> None:
    """The RoCE DSCP of ``spec`` against the NCCL traffic class of a training playbook (``playbook``,
    else the recipe's ``roce.playbook``): ``NCCL_IB_TC`` = DSCP × 4 + ECN bits, so ``ib_tc >> 2`` must
    be the recipe's DSCP, or NCCL's traffic lands on a lossy priority. Raises ConfigError (exit 3)
    naming both files."""
    from mfctl.errors import ConfigError
    from mfctl.runtime.playbook import load_playbook

    p = playbook or spec.roce.playbook
    if p is None:
        return
    path = Path(p) if playbook else spec.path(str(p))
    tc = load_playbook(path).runtime.nccl.ib_tc
    if tc >> 2 != spec.roce.dscp:
        prio = spec.roce.priority_of(tc >> 2)
        raise ConfigError(f"playbook {path} sets NCCL_IB_TC {tc} (DSCP {tc >> 2}, priority {prio} here), but this "
                          f"recipe's RoCE DSCP is {spec.roce.dscp} (priority {spec.roce.priority_of(spec.roce.dscp)}, "
                          f"PFC {spec.roce.pfc_priority}): set the playbook's runtime.nccl.ib_tc to "
                          f"{spec.roce.dscp * 4 + 2} or the recipe's roce.dscp to {tc >> 2}", path=spec.source)


def load_manifest(path: str | Path) -> FirmwareManifest:
    return load_checked(path, FirmwareManifest)
