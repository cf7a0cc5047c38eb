"""``nvidia-smi --query-gpu=... --format=csv`` — command builder and parser.

Format (nvidia-smi ``--help-query-gpu``): a header line of the queried fields with their
units in brackets (``power.draw [W]``), then one line per GPU, values separated by
``", "``. Missing data is printed as ``[N/A]``, ``N/A``, ``[Not Supported]``,
``[Unknown Error]``, ``ERR!`` or ``[Requested functionality has been deprecated]``: those
become ``None``, never a number.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass

from mfctl.errors import ParseError

TOOL = "nvidia-smi"
HEALTH_FIELDS = ["index", "name", "temperature.gpu", "power.draw", "utilization.gpu",
                 "ecc.errors.uncorrected.volatile.total", "persistence_mode"]
_MISSING = re.compile(r"^\[?(N/A|Not Supported|Unknown Error|Requested functionality has been deprecated|GPU is lost|Insufficient Permissions)\]?$|^ERR!$", re.I)
_NUM = re.compile(r"^(-?\d+(?:\.\d+)?)(?:\s*(W|%|MiB|MHz|C|us|ms))?$")


def query_argv(fields: list[str] = HEALTH_FIELDS) -> list[str]:
    return ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv"]


def _value(v: str):
    v = v.strip()
    if v == "" or _MISSING.match(v):
        return None
    m = _NUM.match(v)
    if m:
        x = float(m.group(1))
        return int(x) if "." not in m.group(1) else x
    return v


def parse_query_csv(text: str) -> list[dict[str, object]]:
    """Parse query CSV (with header) into one dict per GPU, keys without units.

    Raises ParseError when there is no header, or a row has the wrong number of values.
    """
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise ParseError(TOOL, 1, "a CSV header line", "")
    if lines[0].startswith("Field ") and "not a valid field" in lines[0]:
        raise ParseError(TOOL, 1, "CSV output", lines[0])
    header = [h.strip().split(" [")[0] for h in next(csv.reader([lines[0]], skipinitialspace=True))]
    if not header or any(not re.fullmatch(r"[a-z_][\w.]*", h, re.I) for h in header):
        raise ParseError(TOOL, 1, "a header of field names (e.g. 'index, name, ...')", lines[0])
    rows = []
    for n, ln in enumerate(lines[1:], start=2):
        vals = next(csv.reader([ln], skipinitialspace=True))
        if len(vals) != len(header):
            raise ParseError(TOOL, n, f"{len(header)} comma-separated values", ln)
        rows.append({h: _value(v) for h, v in zip(header, vals)})
    return rows


@dataclass
class GPUStatus:
    index: int
    name: str | None
    temperature_c: float | None
    power_w: float | None
    utilization_pct: float | None
    ecc_uncorrected: int | None
    persistence: bool | None

    @classmethod
    def from_row(cls, row: dict) -> "GPUStatus":
        pm = row.get("persistence_mode")
        return cls(index=int(row["index"]), name=row.get("name"), temperature_c=row.get("temperature.gpu"),
                   power_w=row.get("power.draw"), utilization_pct=row.get("utilization.gpu"),
                   ecc_uncorrected=row.get("ecc.errors.uncorrected.volatile.total"),
                   persistence=None if pm is None else str(pm).lower() == "enabled")


@dataclass
class NVLinkStatus:
    """``nvidia-smi nvlink -s``: per GPU, per link speed in GB/s (None: link inactive)."""

    gpus: dict[int, dict[int, float | None]]
    unsupported: str | None = None  # e.g. "not supported for Devices in MIG mode"
    names: dict[int, str] | None = None


def nvlink_argv() -> list[str]:
    return ["nvidia-smi", "nvlink", "-s"]


def parse_nvlink_status(text: str) -> NVLinkStatus:
    """Empty output (a GPU without NVLink, e.g. A10) is an empty status, not an error."""
    gpus: dict[int, dict[int, float | None]] = {}
    names: dict[int, str] = {}
    unsupported = None
    cur = None
    for no, raw in enumerate(text.splitlines(), 1):
        s = raw.strip()
        if not s:
            continue
        m = re.match(r"^GPU (\d+): (.+?) \(UUID: [^)]+\)$", s)
        if m:
            cur = int(m.group(1))
            gpus[cur] = {}
            names[cur] = m.group(2)
            continue
        m = re.match(r"^Link (\d+): (?:([\d.]+) GB/s|<inactive>|Inactive)$", s)
        if m and cur is not None:
            gpus[cur][int(m.group(1))] = float(m.group(2)) if m.group(2) else None
            continue
        if "not supported" in s.lower():
            unsupported = s
            continue
        raise ParseError(TOOL + " nvlink -s", no, "'GPU n: NAME (UUID: …)' or 'Link n: X GB/s'", s)
    return NVLinkStatus(gpus, unsupported, names)
