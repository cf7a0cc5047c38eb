"""The kernel log's NVIDIA XID lines (``dmesg``) and the clock they are stamped with (``/proc/uptime``).

``[ 1234.567890] NVRM: Xid (PCI:0000:4e:00): 48, pid=…, …``: the XID, the GPU's PCI address,
and the time stamp in seconds since boot (absent with ``printk.time=0``)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from mfctl.hosts.textin import normalized

_XID = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F:.]+)\): (\d+)")
_STAMP = re.compile(r"\s*\[\s*(\d+(?:\.\d+)?)\]")


def xid_argv() -> list[str]:
    return ["dmesg", "--level=err,warn"]


def uptime_argv() -> list[str]:
    return ["cat", "/proc/uptime"]


@dataclass
class XidEvent:
    xid: int
    pci: str  # lower case, as the line names it: 0000:4e:00
    stamp_s: float | None  # seconds since boot; None: the line has no time stamp

    @property
    def bus_device(self) -> tuple[str, str] | None:
        """``("4e", "00")``: how nvidia-smi's ``pci.bus_id`` rows are matched (:class:`GPUStatus`)."""
        parts = self.pci.split(":")
        return (parts[-2], parts[-1].split(".")[0]) if len(parts) >= 3 else None


@normalized
def parse_xids(text: str) -> list[XidEvent]:
    """Every XID line of a kernel log, in order (other lines are not XIDs: no ParseError)."""
    out = []
    for ln in text.splitlines():
        m = _XID.search(ln)
        if m:
            stamp = _STAMP.match(ln)
            out.append(XidEvent(int(m.group(2)), m.group(1).lower(), float(stamp[1]) if stamp else None))
    return out


@normalized
def parse_uptime(text: str) -> float | None:
    """Seconds since boot from ``/proc/uptime`` (``"350735.47 234388.90"``); None when it is not
    a finite, non-negative number (then no XID has an age, and each is judged as new)."""
    try:
        v = float(text.split()[0])
    except (IndexError, ValueError):
        return None
    return v if math.isfinite(v) and v >= 0 else None
