"""GPUDirect RDMA prerequisites: ``lsmod`` (nvidia_peermem), ``lspci -D -vvv`` (ACS control of
PCIe bridges, an endpoint's ``DevCtl … MaxReadReq``; pciutils' layout), ``systemctl show -p
ActiveState,UnitFileState nvidia-persistenced``. Builders take validated names; parsers take text."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from mfctl.errors import ParseError
from mfctl.hosts.textin import normalized

#: ACS control bits that redirect or validate peer-to-peer requests (PCIe base spec §7.7.8):
#: on, a GPU↔NIC transfer under one switch goes up to the root complex (NVIDIA GPUDirect RDMA docs:
#: disable ACS on the switch ports)
ACS_P2P_BITS = ("SrcValid", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl")


@dataclass
class PciDev:
    bdf: str
    desc: str
    acs_on: list[str] = field(default_factory=list)  #: ACSCtl bits that are '+' (among ACS_P2P_BITS)
    has_acs: bool = False
    max_read_req: int | None = None


def lsmod_argv() -> list[str]:
    return ["lsmod"]


@normalized
def parse_lsmod(text: str) -> set[str]:
    lines = text.splitlines()
    if not lines or not lines[0].startswith("Module"):
        raise ParseError("lsmod", 1, "a 'Module Size Used by' header", lines[0] if lines else "")
    return {ln.split()[0] for ln in lines[1:] if ln.strip()}


def lspci_argv() -> list[str]:
    return ["lspci", "-D", "-vvv"]


@normalized
def parse_lspci(text: str) -> dict[str, PciDev]:
    """Devices by BDF (``0000:0b:00.0``): ACS control and MaxReadReq where present."""
    devs: dict[str, PciDev] = {}
    cur = None
    for k, raw in enumerate(text.splitlines(), 1):
        if raw and not raw[0].isspace():
            m = re.match(r"^([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])\s+(.*)$", raw)
            if m is None:
                raise ParseError("lspci -D -vvv", k, "a device line 'DDDD:BB:DD.F class: name'", raw)
            cur = devs[m[1]] = PciDev(m[1], m[2])
        elif cur is not None:
            s = raw.strip()
            if s.startswith("ACSCtl:"):
                cur.has_acs = True
                cur.acs_on = [b for b in ACS_P2P_BITS if re.search(rf"\b{b}\+", s)]
            elif m := re.search(r"MaxReadReq (\d+) bytes", s):
                cur.max_read_req = int(m[1])
    return devs


def acs_off_argv(bdf: str) -> list[str]:
    """Clear the ACS control register (NVIDIA GPUDirect RDMA / NCCL troubleshooting: ``setpci -s BDF ECAP_ACS+0x6.w=0000``)."""
    return ["setpci", "-s", bdf, "ECAP_ACS+0x6.w=0000"]


MRR_CODE = {128: 0, 256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5}


def mrr_argv(bdf: str, size: int) -> list[str]:
    """Set Device Control bits 14:12 (Max_Read_Request_Size) to ``size`` bytes: ``setpci -s BDF CAP_EXP+0x8.w=V000:7000``."""
    return ["setpci", "-s", bdf, f"CAP_EXP+0x8.w={MRR_CODE[size]:x}000:7000"]


def unit_argv(unit: str) -> list[str]:
    return ["systemctl", "show", "-p", "ActiveState,UnitFileState", unit]


@normalized
def parse_unit(text: str) -> tuple[str, str]:
    """(ActiveState, UnitFileState), e.g. ("active", "enabled")."""
    kv = dict(ln.split("=", 1) for ln in text.splitlines() if "=" in ln)
    if "ActiveState" not in kv:
        raise ParseError("systemctl show", None, "an ActiveState= line", text.strip()[:80])
    return kv["ActiveState"], kv.get("UnitFileState", "")
