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
CLOCK_EVENTS = ["hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown"]
HEALTH_FIELDS = ["index", "pci.bus_id", "name", "temperature.gpu", "power.draw", "utilization.gpu",
                 "ecc.errors.uncorrected.volatile.total", "persistence_mode", "mig.mode.current", "remapped_rows.pending",
                 "remapped_rows.failure", "clocks.sm", "clocks.max.sm", "clocks_event_reasons.gpu_idle",
                 *[f"clocks_event_reasons.{r}" for r in CLOCK_EVENTS]]
#: Drivers before R535 name the clock event reasons ``clocks_throttle_reasons.*``; nvidia-smi
#: rejects a whole query with one unknown field ("Field ... is not a valid field to query").
LEGACY_HEALTH_FIELDS = [f.replace("clocks_event_reasons.", "clocks_throttle_reasons.") for f in HEALTH_FIELDS]
#: Fields every driver since R450 knows (no row remapping before Ampere drivers, no clock reasons,
#: no MIG mode before R450).
BASIC_HEALTH_FIELDS = ["index", "pci.bus_id", "name", "temperature.gpu", "power.draw", "utilization.gpu",
                       "ecc.errors.uncorrected.volatile.total", "persistence_mode", "clocks.sm", "clocks.max.sm"]
QUERY_FALLBACKS = [HEALTH_FIELDS, LEGACY_HEALTH_FIELDS, BASIC_HEALTH_FIELDS]


def unknown_field(text: str) -> bool:
    """True when nvidia-smi refused a query for a field this driver does not know."""
    return "is not a valid field to query" in text
_MISSING = re.compile(r"^\[?(N/A|Not Supported|Unknown Error|Requested functionality has been deprecated|GPU is lost"
                      r"|Insufficient Permissions)\]?$|^ERR!$", re.I)
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


#: What nvidia-smi prints for a GPU NVML cannot reach, in place of its data (a GPU that fell off the
#: bus — XID 79 — says "GPU is lost.  Reboot the system to recover this GPU"; others "Unknown Error"),
#: with return code 15 when the GPU is lost (nvidia-smi(1)). Wording from public reports
#: (NVIDIA/open-gpu-kernel-modules#387, JosephKJ/OWOD#81, AlexeyAB/darknet#86).
_UNREACHABLE = re.compile(r"^Unable to determine the device handle for GPU"
                          r"\s*([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*:\s*(.*?)\s*$")


def unreachable_gpus(text: str) -> list[tuple[str, str]]:
    """The GPUs nvidia-smi could not reach, from its output (either stream): ``(PCI bus id as printed,
    the reason, e.g. "GPU is lost.  Reboot the system to recover this GPU")``, in output order."""
    return [(m[1], m[2]) for ln in text.splitlines() if (m := _UNREACHABLE.match(ln.strip()))]


def parse_query_csv(text: str) -> list[dict[str, object]]:
    """Parse query CSV (with header) into one dict per GPU, keys without units. Lines for GPUs the
    tool could not reach (:func:`unreachable_gpus`) are not rows: they are left out.

    Raises ParseError when there is no header, or a row has the wrong number of values.
    """
    lines = [ln for ln in text.splitlines() if ln.strip() and not _UNREACHABLE.match(ln.strip())]
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
        # keys as current drivers name them (clocks_throttle_reasons.* before R535)
        rows.append({h.replace("clocks_throttle_reasons.", "clocks_event_reasons."): _value(v) for h, v in zip(header, vals)})
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
    remap_pending: bool | None = None  # None: not reported ([N/A], e.g. MIG mode or pre-Ampere)
    remap_failure: bool | None = None
    sm_clock_mhz: float | None = None
    sm_clock_max_mhz: float | None = None
    idle: bool | None = None  # the "GPU idle" clock event reason (idle clocks are low by design)
    clock_events: list[str] | None = None  # active slowdown reasons (CLOCK_EVENTS); None: none reported
    mig: bool | None = None  # MIG mode currently enabled (None: not reported, [N/A] on GPUs without MIG)

    @classmethod
    def from_row(cls, row: dict) -> "GPUStatus":
        def flag(key, yes):
            v = row.get(key)
            return None if v is None else str(v).lower() == yes

        events = {r: flag(f"clocks_event_reasons.{r}", "active") for r in CLOCK_EVENTS}
        return cls(index=int(row["index"]), name=row.get("name"), temperature_c=row.get("temperature.gpu"),
                   power_w=row.get("power.draw"), utilization_pct=row.get("utilization.gpu"),
                   ecc_uncorrected=row.get("ecc.errors.uncorrected.volatile.total"),
                   persistence=flag("persistence_mode", "enabled"), mig=flag("mig.mode.current", "enabled"),
                   remap_pending=flag("remapped_rows.pending", "yes"),
                   remap_failure=flag("remapped_rows.failure", "yes"), sm_clock_mhz=row.get("clocks.current.sm"),
                   sm_clock_max_mhz=row.get("clocks.max.sm"), idle=flag("clocks_event_reasons.gpu_idle", "active"),
                   clock_events=None if all(v is None for v in events.values()) else [r for r, v in events.items() if v])


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


# --- nvidia-smi -q (text) and -q -x (XML) ---------------------------------------------

@dataclass
class GPUDetail:
    """The fields mfctl judges, from ``-q`` or ``-q -x`` (units stripped; missing data None)."""

    bus_id: str
    name: str | None
    temperature_c: float | None
    power_w: float | None
    persistence: bool | None
    mig_current: str | None
    ecc_uncorrected_volatile: int | None
    remapped_rows_pending: bool | None
    remapped_rows_failure: bool | None


def _tree_from_text(text: str) -> dict:
    """Indentation-nested ``Key : Value`` lines → nested dicts ("GPU <bus>" sections kept)."""
    root: dict = {}
    stack: list[tuple[int, dict]] = [(-1, root)]
    for raw in text.splitlines():
        if not raw.strip() or raw.strip().startswith("=") :
            continue
        indent = len(raw) - len(raw.lstrip(" "))
        s = raw.strip()
        while stack and indent <= stack[-1][0]:
            stack.pop()
        parent = stack[-1][1] if stack else root
        if " : " in s or s.endswith(" :"):
            k, _, v = s.partition(":")
            parent[k.strip()] = v.strip()
        else:
            node: dict = {}
            parent[s] = node
            stack.append((indent, node))
    return root


def _f(v) -> float | None:
    v = _value(str(v)) if v is not None else None
    return float(v) if isinstance(v, (int, float)) else None


def parse_query_text(text: str) -> list[GPUDetail]:
    """``nvidia-smi -q``. Raises ParseError when no ``GPU <bus id>`` section is found."""
    tree = _tree_from_text(text)
    out = []
    for key, sec in tree.items():
        if not (key.startswith("GPU ") and isinstance(sec, dict)):
            continue
        temp = (sec.get("Temperature") or {}).get("GPU Current Temp")
        power = (sec.get("GPU Power Readings") or sec.get("Power Readings") or {}).get("Power Draw") \
            or (sec.get("GPU Power Readings") or sec.get("Power Readings") or {}).get("Average Power Draw")
        ecc = ((sec.get("ECC Errors") or {}).get("Volatile") or {})
        unc = ecc.get("DRAM Uncorrectable") or ecc.get("Double Bit", {}).get("Total") if isinstance(ecc, dict) else None
        rr = sec.get("Remapped Rows")
        if not isinstance(rr, dict):  # "Remapped Rows : N/A"
            rr = {}
        unc_n = _f(unc)
        pm = sec.get("Persistence Mode")
        out.append(GPUDetail(key[4:], sec.get("Product Name"), _f(temp), _f(power),
                             None if pm in (None, "N/A") else pm == "Enabled",
                             (sec.get("MIG Mode") or {}).get("Current"),
                             int(unc_n) if unc_n is not None else None,
                             None if rr.get("Pending") in (None, "N/A") else rr.get("Pending") == "Yes",
                             None if rr.get("Remapping Failure Occurred") in (None, "N/A")
                             else rr.get("Remapping Failure Occurred") == "Yes"))
    if not out:
        raise ParseError(TOOL + " -q", None, "a 'GPU <bus id>' section", text.strip()[:80])
    return out


def parse_query_xml(text: str) -> list[GPUDetail]:
    """``nvidia-smi -q -x`` in both DTD layouts (``power_readings`` up to driver 5xx,
    ``gpu_power_readings`` after; ``remapped_rows`` with ``remapped_row_pending``)."""
    import xml.etree.ElementTree as ET

    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        line = getattr(e, "position", (None,))[0]
        raise ParseError(TOOL + " -q -x", line, "well-formed XML", str(e)) from None
    if root.tag != "nvidia_smi_log":
        raise ParseError(TOOL + " -q -x", 1, "<nvidia_smi_log>", root.tag)
    out = []
    for g in root.findall("gpu"):
        def t(path, g=g):
            el = g.find(path)
            return el.text.strip() if el is not None and el.text else None

        power = t("gpu_power_readings/power_draw") or t("gpu_power_readings/average_power_draw") or t("power_readings/power_draw")
        unc = t("ecc_errors/volatile/dram_uncorrectable") or t("ecc_errors/volatile/double_bit/total")
        pend, fail = t("remapped_rows/remapped_row_pending"), t("remapped_rows/remapped_row_failure")
        pm = t("persistence_mode")
        unc_n = _f(unc)
        out.append(GPUDetail(g.get("id", "?"), t("product_name"), _f(t("temperature/gpu_temp")), _f(power),
                             None if pm in (None, "N/A") else pm == "Enabled", t("mig_mode/current_mig"),
                             int(unc_n) if unc_n is not None else None,
                             None if pend in (None, "N/A") else pend == "Yes",
                             None if fail in (None, "N/A") else fail == "Yes"))
    if not out:
        raise ParseError(TOOL + " -q -x", None, "at least one <gpu>", root.tag)
    return out


@dataclass
class Topology:
    """``nvidia-smi topo -m``: the connection matrix (``X``, ``NV12``, ``PIX``, ``SYS``, …) and
    each row's CPU/NUMA affinity."""

    devices: list[str]
    links: dict[str, dict[str, str]]
    cpu_affinity: dict[str, str | None]
    numa_affinity: dict[str, str | None]


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def parse_topo(text: str) -> Topology:
    lines = [_ANSI.sub("", ln).rstrip() for ln in text.splitlines()]
    hdr_i = next((i for i, ln in enumerate(lines) if re.match(r"^\s*GPU0\b", ln.strip()) and "Affinity" in ln), None)
    if hdr_i is None:
        raise ParseError(TOOL + " topo -m", 1, "a header 'GPU0 … CPU Affinity …'", lines[0] if lines else "")
    cols = [c.strip() for c in lines[hdr_i].strip("\t ").split("\t")]
    devs = [c for c in cols if not c.endswith("Affinity") and c != "GPU NUMA ID"]
    topo = Topology(devs, {}, {}, {})
    for no in range(hdr_i + 1, len(lines)):
        ln = lines[no]
        if not ln.strip():
            break
        cells = [c.strip() for c in ln.split("\t")]
        name, vals = cells[0], cells[1:]
        if len(vals) < len(devs):
            raise ParseError(TOOL + " topo -m", no + 1, f"{len(devs)} link columns", ln)
        topo.links[name] = dict(zip(devs, vals[: len(devs)]))
        rest = vals[len(devs):] + [""] * 2
        topo.cpu_affinity[name] = rest[0] or None if rest[0] != "N/A" else None
        topo.numa_affinity[name] = rest[1] or None if rest[1] != "N/A" else None
    return topo
