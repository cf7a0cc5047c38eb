"""``dcgmi diag`` result tables (old layout: one row per test; DCGM 4 layout: per-GPU
continuation rows) and ``dcgmi discovery -l`` (``<<<NULL>>>`` names are missing data)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from mfctl.errors import ParseError


@dataclass
class DiagResult:
    metadata: dict[str, str] = field(default_factory=dict)
    tests: dict[str, str] = field(default_factory=dict)  # test → overall result ("Pass", "Fail - …", "Skip")
    per_gpu: dict[str, dict[int, str]] = field(default_factory=dict)  # test → {gpu: result}

    @property
    def failed(self) -> list[str]:
        bad = ("fail", "error")
        return [t for t, r in self.tests.items() if r.lower().startswith(bad)] + \
               [f"{t} (GPU {g})" for t, gs in self.per_gpu.items() for g, r in gs.items() if r.lower().startswith(bad)]


def parse_diag(text: str) -> DiagResult:
    res = DiagResult()
    section = None
    last = None
    for no, raw in enumerate(text.splitlines(), 1):
        s = raw.strip()
        if not s or s.startswith(("Successfully", "+---", "+===")) or set(s) <= set("+-="):
            continue
        m = re.match(r"^[|+]-+\s*(\w[\w ]*?)\s*-+\+", s)
        if m:
            section = m.group(1)
            continue
        m = re.match(r"^\|\s*(.*?)\s*\|\s*(.*?)\s*\|?$", s)  # a truncated capture may lose the last pipe
        if not m:
            raise ParseError("dcgmi diag", no, "'| test | result |'", s)
        name, result = m.group(1), m.group(2)
        if name == "Diagnostic":
            continue
        if section == "Metadata":
            res.metadata[name] = result
            continue
        if name:
            res.tests[name] = result
            last = name
            continue
        g = re.match(r"^GPU\s*(\d+):\s*(.*)$", result)
        if g and last:
            res.per_gpu.setdefault(last, {})[int(g.group(1))] = g.group(2)
        elif last:
            res.tests[last] += " " + result
    if not res.tests and not res.metadata:
        raise ParseError("dcgmi diag", None, "a result table", text.strip()[:80])
    return res


@dataclass
class DiscoveredGPU:
    gpu_id: int
    name: str | None
    pci_bus_id: str | None
    uuid: str | None


def parse_discovery(text: str) -> list[DiscoveredGPU]:
    out: list[DiscoveredGPU] = []
    cur: DiscoveredGPU | None = None
    for no, raw in enumerate(text.splitlines(), 1):
        s = raw.strip()
        if not s.startswith("|"):
            continue
        cells = [c.strip() for c in s.strip("|").split("|")]
        if len(cells) != 2 or cells[0] == "GPU ID":
            continue
        if cells[0].isdigit():
            cur = DiscoveredGPU(int(cells[0]), None, None, None)
            out.append(cur)
        if cur is None:
            raise ParseError("dcgmi discovery", no, "a row starting with a GPU id", s)
        k, _, v = cells[1].partition(":")
        v = v.strip()
        v = None if v in ("<<<NULL>>>", "N/A", "") else v
        if k == "Name":
            cur.name = v
        elif k == "PCI Bus ID":
            cur.pci_bus_id = v
        elif k == "Device UUID":
            cur.uuid = v
    if not out:
        raise ParseError("dcgmi discovery", None, "'| <id> | Name: … |' rows", text.strip()[:80])
    return out
