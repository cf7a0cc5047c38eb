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
from dataclasses import dataclass, field

from mfctl.errors import ParseError
from mfctl.hosts.textin import normalized

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


def query_argv(fields: list[str] = HEALTH_FIELDS, *, header: bool = True, units: bool = True) -> list[str]:
    """``nvidia-smi --query-gpu=F1,F2,… --format=csv[,noheader][,nounits]``."""
    fmt = ",".join(["csv", *([] if header else ["noheader"]), *([] if units else ["nounits"])])
    return ["nvidia-smi", f"--query-gpu={','.join(fields)}", f"--format={fmt}"]


#: short names nvidia-smi accepts for a field, and the name it prints in its header
#: (``nvidia-smi --help-query-gpu``: '"clocks.current.sm" or "clocks.sm"', …)
FIELD_ALIASES = {"clocks.sm": "clocks.current.sm", "clocks.gr": "clocks.current.graphics",
                 "clocks.mem": "clocks.current.memory", "clocks.video": "clocks.current.video",
                 "clocks.max.gr": "clocks.max.graphics", "clocks.max.mem": "clocks.max.memory",
                 "gpu_name": "name", "gpu_bus_id": "pci.bus_id", "gpu_serial": "serial", "gpu_uuid": "uuid",
                 "persistence-mode": "persistence_mode", "pstate": "pstate"}


def query_fields(argv: list[str] | str) -> tuple[list[str], bool]:
    """The fields a ``--query-gpu`` command asks for, as nvidia-smi names them in its header, and
    whether its output has a header (``--format=csv`` without ``noheader``): what
    :func:`parse_query_csv` needs to read the output of a command mfctl (or anyone) sent.
    ``argv``: the words, or the command line as one string. ValueError without ``--query-gpu``."""
    words = argv.split() if isinstance(argv, str) else list(argv)
    fields: list[str] | None = None
    header = True
    for i, w in enumerate(words):
        for opt in ("--query-gpu", "--format"):
            if w == opt and i + 1 < len(words):
                w = f"{opt}={words[i + 1]}"
            if w.startswith(opt + "="):
                val = w.split("=", 1)[1].strip("'\"")
                if opt == "--format":
                    header = "noheader" not in val.split(",")
                else:
                    fields = [FIELD_ALIASES.get(f.strip(), f.strip()) for f in val.split(",") if f.strip()]
    if not fields:
        raise ValueError(f"not a --query-gpu command: {' '.join(words)!r}")
    return fields, header


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


@normalized
def unreachable_gpus(text: str) -> list[tuple[str, str]]:
    """The GPUs nvidia-smi could not reach, from its output (either stream): ``(PCI bus id as printed,
    the reason, e.g. "GPU is lost.  Reboot the system to recover this GPU")``, in output order."""
    return [(m[1], m[2]) for ln in text.splitlines() if (m := _UNREACHABLE.match(ln.strip()))]


@normalized
def parse_query_csv(text: str, fields: list[str] | None = None) -> list[dict[str, object]]:
    """Parse query CSV into one dict per GPU, keys without units. ``fields``: the queried field
    names, for output printed with ``--format=csv,noheader`` (take them from the command with
    :func:`query_fields`); a header line equal to them is then skipped. Values with or without
    units (``nounits``) read the same. Lines for GPUs the tool could not reach
    (:func:`unreachable_gpus`) are not rows: they are left out.

    Raises ParseError when there is no header (and no ``fields``), or a row has the wrong number
    of values (an output cut inside its last line, too).
    """
    lines = [(n, ln) for n, ln in enumerate(text.split("\n"), 1) if ln.strip() and not _UNREACHABLE.match(ln.strip())]
    if not lines and fields is None:
        raise ParseError(TOOL, 1, "a CSV header line", "")
    if lines and lines[0][1].startswith("Field ") and "not a valid field" in lines[0][1]:
        raise ParseError(TOOL, lines[0][0], "CSV output", lines[0][1])
    if fields is not None:
        header = [FIELD_ALIASES.get(f.strip(), f.strip()) for f in fields]
        if not header or any(not re.fullmatch(r"[a-z_][\w.-]*", h, re.I) for h in header):
            raise ParseError(TOOL, None, "field names (e.g. 'index,name,...')", ",".join(fields)[:80])
        if lines and [h.strip().split(" [")[0] for h in next(csv.reader([lines[0][1]], skipinitialspace=True))] == header:
            lines = lines[1:]
        body = lines
    else:
        first_no, first = lines[0]
        header = [h.strip().split(" [")[0] for h in next(csv.reader([first], skipinitialspace=True))]
        if not header or any(not re.fullmatch(r"[a-z_][\w.]*", h, re.I) for h in header):
            raise ParseError(TOOL, first_no, "a header of field names (e.g. 'index, name, ...')", first)
        body = lines[1:]
    rows = []
    for n, ln in body:
        vals = next(csv.reader([ln], skipinitialspace=True))
        if len(vals) != len(header):
            raise ParseError(TOOL, n, f"{len(header)} comma-separated values", ln)
        # keys as current drivers name them (clocks_throttle_reasons.* before R535)
        rows.append({h.replace("clocks_throttle_reasons.", "clocks_event_reasons."): _value(v) for h, v in zip(header, vals)})
    return rows


def read_query(text: str, argv: list[str] | str) -> list[dict[str, object]]:
    """The output of the ``--query-gpu`` command ``argv`` (what mfctl sent, or the command line an
    operator ran): with a header as :func:`parse_query_csv` reads it, with ``noheader`` by the
    fields :func:`query_fields` takes from ``argv``."""
    fields, header = query_fields(argv)
    return parse_query_csv(text) if header else parse_query_csv(text, fields)


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
    def from_row(cls, row: dict, position: int | None = None) -> "GPUStatus":
        """One :func:`parse_query_csv` row. The GPU's number is its ``index`` value, or, when the
        query has no ``index`` column or it reads ``[N/A]``, ``position`` (the row's place in the
        output: nvidia-smi prints GPUs in index order); ParseError when neither is known."""
        idx = row.get("index")
        if not isinstance(idx, int) or isinstance(idx, bool):
            idx = int(idx) if isinstance(idx, str) and idx.strip().isdigit() else position
        if idx is None:
            raise ParseError(TOOL, None, "an 'index' value in every row (query the 'index' field)", str(row)[:80])

        def flag(key, yes):
            v = row.get(key)
            return None if v is None else str(v).lower() == yes

        events = {r: flag(f"clocks_event_reasons.{r}", "active") for r in CLOCK_EVENTS}
        return cls(index=idx, name=row.get("name"), temperature_c=row.get("temperature.gpu"),
                   power_w=row.get("power.draw"), utilization_pct=row.get("utilization.gpu"),
                   ecc_uncorrected=row.get("ecc.errors.uncorrected.volatile.total"),
                   persistence=flag("persistence_mode", "enabled"), mig=flag("mig.mode.current", "enabled"),
                   remap_pending=flag("remapped_rows.pending", "yes"),
                   remap_failure=flag("remapped_rows.failure", "yes"),
                   sm_clock_mhz=row.get("clocks.current.sm", row.get("clocks.sm")),
                   sm_clock_max_mhz=row.get("clocks.max.sm"), idle=flag("clocks_event_reasons.gpu_idle", "active"),
                   clock_events=None if all(v is None for v in events.values()) else [r for r, v in events.items() if v])


def gpu_statuses(rows: list[dict]) -> list[GPUStatus]:
    """:meth:`GPUStatus.from_row` for every row, each knowing its place (for a query without
    ``index``, or an ``[N/A]`` one)."""
    return [GPUStatus.from_row(r, i) for i, r in enumerate(rows)]


@dataclass
class NVLinkStatus:
    """``nvidia-smi nvlink -s``: per GPU, per link speed in GB/s (None: link inactive)."""

    gpus: dict[int, dict[int, float | None]]
    unsupported: str | None = None  # e.g. "not supported for Devices in MIG mode"
    names: dict[int, str] | None = None


def nvlink_argv() -> list[str]:
    return ["nvidia-smi", "nvlink", "-s"]


@normalized
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


def _d(v) -> dict:
    """A section as a dict: a section nvidia-smi prints as a scalar ("Temperature : N/A",
    "ECC Errors : N/A", "MIG Mode : N/A") has no fields."""
    return v if isinstance(v, dict) else {}


def _s(v) -> str | None:
    """A field's text (None for missing data or for a section where a value was expected)."""
    return v if isinstance(v, str) and not _MISSING.match(v.strip()) and v.strip() else None


@normalized
def parse_query_text(text: str) -> list[GPUDetail]:
    """``nvidia-smi -q``. Raises ParseError when no ``GPU <bus id>`` section is found."""
    tree = _tree_from_text(text)
    out = []
    for key, sec in tree.items():
        if not (key.startswith("GPU ") and isinstance(sec, dict)):
            continue
        temp = _d(sec.get("Temperature")).get("GPU Current Temp")
        pw = _d(sec.get("GPU Power Readings")) or _d(sec.get("Power Readings"))
        power = _s(pw.get("Power Draw")) or _s(pw.get("Average Power Draw")) or _s(pw.get("Instantaneous Power Draw"))
        vol = _d(_d(sec.get("ECC Errors")).get("Volatile"))
        unc = _s(vol.get("DRAM Uncorrectable")) or _s(_d(vol.get("Double Bit")).get("Total"))
        rr = _d(sec.get("Remapped Rows"))  # "Remapped Rows : N/A" too
        unc_n = _f(unc)
        pm = _s(sec.get("Persistence Mode"))
        pend, fail = _s(rr.get("Pending")), _s(rr.get("Remapping Failure Occurred"))
        mig = _d(sec.get("MIG Mode")).get("Current")  # as printed ("N/A" kept, as -q -x gives it)
        out.append(GPUDetail(key[4:], _s(sec.get("Product Name")), _f(_s(temp)), _f(power),
                             None if pm is None else pm == "Enabled", mig if isinstance(mig, str) else None,
                             int(unc_n) if unc_n is not None else None,
                             None if pend is None else pend == "Yes", None if fail is None else fail == "Yes"))
    if not out:
        raise ParseError(TOOL + " -q", None, "a 'GPU <bus id>' section", text.strip()[:80])
    return out


@normalized
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


_ROW_NAME = re.compile(r"^(?:GPU\d+|NIC\d+|mlx\d+_\d+|CPU\d*|[a-z][\w.-]*\d)$")


def _cells(line: str, tabbed: bool) -> list[str]:
    return [c.strip() for c in line.split("\t")] if tabbed else line.split()


@normalized
def parse_topo(text: str) -> Topology:
    """``nvidia-smi topo -m``, tab separated as printed, or with the tabs turned into spaces (a
    paste). Blank lines inside the matrix are skipped; it ends at ``Legend:`` (or the first line
    that is not a device row). Raises ParseError without the header, for a row with too few
    cells, or when a GPU of the header has no row (the output was cut)."""
    lines = [_ANSI.sub("", ln).rstrip() for ln in text.split("\n")]
    hdr_i = next((i for i, ln in enumerate(lines) if re.match(r"^\s*GPU0\b", ln.strip()) and "Affinity" in ln), None)
    if hdr_i is None:
        first = next((ln.strip() for ln in lines if ln.strip()), "")
        raise ParseError(TOOL + " topo -m", 1, "a header 'GPU0 … CPU Affinity …'", first)
    tabbed = "\t" in lines[hdr_i]
    cols = ([c.strip() for c in lines[hdr_i].strip("\t ").split("\t")] if tabbed
            else re.split(r"\s{2,}|\t", lines[hdr_i].strip()))
    if not tabbed and len(cols) > 1 and not any(c.endswith("Affinity") for c in cols):  # single-spaced header
        cols = re.sub(r"(CPU|NUMA) Affinity", r"\1_Affinity", lines[hdr_i]).replace("GPU NUMA ID", "GPU_NUMA_ID").split()
        cols = [c.replace("_", " ") for c in cols]
    devs = [c for c in cols if c and not c.endswith("Affinity") and c != "GPU NUMA ID"]
    topo = Topology(devs, {}, {}, {})
    last = hdr_i
    for no in range(hdr_i + 1, len(lines)):
        ln = lines[no]
        if not ln.strip():
            continue
        if ln.strip().startswith("Legend"):
            break
        cells = _cells(ln, tabbed)
        name, vals = cells[0], cells[1:]
        if name not in devs and not _ROW_NAME.match(name):
            break
        if len(vals) < len(devs):
            raise ParseError(TOOL + " topo -m", no + 1, f"{len(devs)} link columns", ln)
        topo.links[name] = dict(zip(devs, vals[: len(devs)]))
        rest = [v for v in vals[len(devs):] if v] if not tabbed else vals[len(devs):]
        rest += [""] * 2
        topo.cpu_affinity[name] = rest[0] or None if rest[0] != "N/A" else None
        topo.numa_affinity[name] = rest[1] or None if rest[1] != "N/A" else None
        last = no
    rows_needed = [d for d in devs if d.startswith("GPU") or (d.startswith("NIC") and any(r.startswith("NIC")
                                                                                            for r in topo.links))]
    missing = [d for d in rows_needed if d not in topo.links]
    if missing:
        raise ParseError(TOOL + " topo -m", last + 2, f"a row for {missing[0]} (every device of the header; "
                         "the output may be cut)", lines[last + 1] if last + 1 < len(lines) else "")
    return topo


# --- nvidia-smi without options: the default table ---------------------------------------------------

@dataclass
class SmiGPU:
    """One GPU of the default table (values as the table shows them; missing data None).
    ``errors``: the fields that read ``ERR!`` (NVML could not read them)."""

    index: int
    name: str | None  # as printed: long names are cut to "NVIDIA GeForce ..."
    persistence: bool | None
    bus_id: str | None
    display_active: bool | None
    ecc_uncorrected: int | None  # "Volatile Uncorr. ECC": None for N/A, Off, On (MIG), ERR!
    fan_pct: float | None
    temperature_c: float | None
    perf: str | None  # P0..P12
    power_w: float | None
    power_cap_w: float | None
    memory_used_mib: int | None  # None: "Not Supported" (unified memory, e.g. GB10), N/A
    memory_total_mib: int | None
    utilization_pct: float | None
    compute_mode: str | None  # Default, E. Process, Prohibited
    mig_mode: str | None  # "MIG M." row: Disabled, Enabled (a trailing * is a pending change); None: no row / N/A
    errors: list[str] = field(default_factory=list)


@dataclass
class SmiMigDevice:
    """A row of the ``MIG devices:`` table (memory and BAR1 in MiB; missing data None)."""

    gpu: int
    gpu_instance: int
    compute_instance: int
    device: int
    memory_used_mib: int | None
    memory_total_mib: int | None
    bar1_used_mib: int | None
    bar1_total_mib: int | None
    sm: int | None
    ecc_uncorrected: int | None


@dataclass
class SmiProcess:
    gpu: int
    gpu_instance: int | None  # GI/CI: None on drivers without the columns, or N/A (no MIG)
    compute_instance: int | None
    pid: int
    type: str  # C, G, C+G, M
    name: str  # as printed (long names start with "...")
    memory_mib: int | None


@dataclass
class SmiTable:
    """``nvidia-smi`` without options. ``truncated`` says where the output was cut (a GPU whose
    rows were cut is left out of ``gpus``; a process table cut is ``processes_complete`` False);
    ``unreachable``: the GPUs NVML could not reach (:func:`unreachable_gpus`); ``failure``: the
    line with which nvidia-smi failed as a whole ("No devices were found", "Failed to initialize
    NVML: …"); ``messages``: every other line that is not the table (kernel messages, GSP
    timeouts, a container's banner), in order."""

    smi_version: str | None
    driver_version: str | None
    cuda_version: str | None
    timestamp: str | None
    gpus: list[SmiGPU] = field(default_factory=list)
    mig_devices: list[SmiMigDevice] = field(default_factory=list)
    processes: list[SmiProcess] | None = None  # None: no process table in the output
    processes_complete: bool = False
    unreachable: list[tuple[str, str]] = field(default_factory=list)
    failure: str | None = None
    truncated: str | None = None
    messages: list[str] = field(default_factory=list)


_HDR = re.compile(r"NVIDIA-SMI\s+(\S+)\s+Driver Version:\s*(\S+)(?:\s+CUDA Version:\s*(\S+))?")
_BORDER = re.compile(r"^[+|][-=+|\s]*[-=][-=+|\s]*$")
_STAMP = re.compile(r"^(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}$")
_GPU1 = re.compile(r"^(\d+)\s+(.*?)\s+(On|Off|N/A|ERR!)$")
_BUS = re.compile(r"^([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*(On|Off|N/A|ERR!)?$")
_GPU2 = re.compile(r"^(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s*/\s*(\S+)$")
_MEM = re.compile(r"^(\d+)MiB\s*/\s*(\d+)MiB$")
_PROC = re.compile(r"^(\d+)\s+(?:(N/A|\d+)\s+(N/A|\d+)\s+)?(\d+)\s+([CGM](?:\+[CGM])?)\s+(.+?)\s+(\d+MiB|N/A)$")
_MIG1 = re.compile(r"^(\d+)\s+(\d+)\s+(\d+)\s+(\d+)$")
_FAILURE = re.compile(r"^(No devices were found|Failed to initialize NVML.*|NVIDIA-SMI has failed.*|"
                      r"Unable to determine the device handle for GPU.*)$")
_HEAD_FIRST = re.compile(r"^(?:GPU\s+Name|Fan\s+Temp|GPU\s+GI|GPU\s+PID|ID\s+ID)\b")
_HEAD_CELL = re.compile(r"^(?:|MIG M\.|ECC|Usage|Vol|SM\s+Unc|CE\s+ENC.*|(?:Shared\s+)?(?:Memory|BAR1)-Usage|Shared)$")


def _num_unit(v: str, unit: str) -> float | None:
    m = re.fullmatch(r"(-?\d+(?:\.\d+)?)\s*" + re.escape(unit), v.strip())
    return float(m.group(1)) if m else None


def _mib(v: str) -> tuple[int | None, int | None]:
    m = _MEM.match(v.strip())
    return (int(m.group(1)), int(m.group(2))) if m else (None, None)


def _int_or_none(v: str | None) -> int | None:
    return int(v) if v is not None and v.strip().isdigit() else None


@normalized
def parse_table(text: str) -> SmiTable:
    """``nvidia-smi`` (no options), the table operators paste: R384-R470 (79 columns, no ``MIG M.``
    row before R450), R525-R535 (87), R545+ (89; R580 draws ``+`` under the banner). Reads the GPU
    rows (``ERR!`` fields are None, named in ``errors``), the ``MIG devices:`` and ``Processes:``
    tables, ``Unable to determine the device handle…`` lines, and keeps every other line (GSP
    timeouts, kernel messages interleaved with the rows) as ``messages``. An output cut inside a
    GPU's rows or the process table is flagged in ``truncated``. Raises ParseError naming the line
    for a table row that is not what its place in the table needs, and when there is neither a GPU
    row nor a failure line."""
    t = SmiTable(None, None, None, None)
    section = "gpus"
    block: dict | None = None  # the GPU being read: {"line", "cells1", "cells2", "cells3"}
    proc_open = False
    mig: dict | None = None
    lines = text.split("\n")
    last_no = max((n for n, ln in enumerate(lines, 1) if ln.strip()), default=0)

    def close_gpu() -> None:
        nonlocal block
        if block is None:
            return
        b, block = block, None
        if b.get("cells2") is None:
            t.truncated = t.truncated or f"inside GPU {b['index']}'s rows (line {b['line']})"
            return
        c1, c2 = b["cells1"], b["cells2"]
        m1 = _GPU1.match(c1[0].strip())
        assert m1 is not None  # checked when the block was opened
        errs: list[str] = []
        bus = _BUS.match(c1[1].strip()) if len(c1) > 1 else None
        ecc_raw = c1[2].strip() if len(c1) > 2 else ""
        m2 = _GPU2.match(c2[0].strip())
        if not m2:
            raise ParseError(TOOL, b["line"] + 1, "'FAN TEMP PERF POWER / CAP' (e.g. 'N/A 27C P0 72W / 700W')", c2[0].strip())
        fan, temp, perf, pw, cap = m2.groups()
        mem = c2[1].strip() if len(c2) > 1 else ""
        util_mode = (c2[2].strip() if len(c2) > 2 else "").split(None, 1)
        util = util_mode[0] if util_mode else ""
        for name, raw in (("persistence", m1.group(3)), ("display_active", bus.group(2) if bus else None),
                          ("ecc_uncorrected", ecc_raw), ("fan", fan), ("temperature", temp), ("perf", perf),
                          ("power", pw), ("power_cap", cap), ("memory", mem), ("utilization", util)):
            if raw is not None and raw.startswith("ERR!"):
                errs.append(name)
        used, total = _mib(mem)
        mig_raw = b["cells3"][2].strip() if b.get("cells3") and len(b["cells3"]) > 2 else ""
        t.gpus.append(SmiGPU(
            int(m1.group(1)), m1.group(2) or None, {"On": True, "Off": False}.get(m1.group(3)),
            bus.group(1) if bus else None, {"On": True, "Off": False}.get(bus.group(2) or "") if bus else None,
            int(ecc_raw) if ecc_raw.isdigit() else None, _num_unit(fan, "%"), _num_unit(temp, "C"),
            perf if re.fullmatch(r"P\d+", perf) else None, _num_unit(pw, "W"), _num_unit(cap, "W"), used, total,
            _num_unit(util, "%"), util_mode[1].strip() if len(util_mode) > 1 and util_mode[1].strip() != "N/A" else None,
            mig_raw if mig_raw and mig_raw != "N/A" else None, errs))

    def close_mig() -> None:
        nonlocal mig
        if mig is None:
            return
        m, mig = mig, None
        g, gi, ci, dev = (int(x) for x in m["ids"])
        used, total = _mib(m["cells"][1]) if len(m["cells"]) > 1 else (None, None)
        b_used, b_total = _mib(m["bar1"]) if m.get("bar1") else (None, None)
        sm_ecc = (m["cells"][2].split() if len(m["cells"]) > 2 else []) + [None, None]
        t.mig_devices.append(SmiMigDevice(g, gi, ci, dev, used, total, b_used, b_total,
                                          _int_or_none(sm_ecc[0]), _int_or_none(sm_ecc[1])))

    for no, raw in enumerate(lines, 1):
        s = raw.strip()
        if not s:
            continue
        if t.timestamp is None and _STAMP.match(s):
            t.timestamp = s
            continue
        if (m := _HDR.search(s)) and s.startswith("|"):
            t.smi_version, t.driver_version, t.cuda_version = m.group(1), m.group(2), m.group(3)
            continue
        if _UNREACHABLE.match(s):
            um = _UNREACHABLE.match(s)
            assert um is not None
            t.unreachable.append((um.group(1), um.group(2)))
            continue
        if _BORDER.match(s):
            close_gpu()
            close_mig()
            if section == "processes" and proc_open and set(s) <= set("+-"):
                t.processes_complete = True
                proc_open = False
            continue
        if not s.startswith("|"):
            if _FAILURE.match(s) and not t.gpus:
                t.failure = t.failure or s
            t.messages.append(s)
            continue
        cut = not s.endswith("|") or len(s) == 1
        if cut and no != last_no:
            raise ParseError(TOOL, no, "a table row ending in '|'", s)
        cells = s[1:-1].split("|") if not cut else s[1:].split("|")
        first = cells[0].strip()
        if first.startswith("Processes:"):
            close_gpu()
            section, t.processes, proc_open = "processes", [], True
            continue
        if first.startswith("MIG devices:"):
            close_gpu()
            section = "mig"
            continue
        if _HEAD_FIRST.match(first) or (block is None and mig is None and not first
                                          and all(_HEAD_CELL.match(c.strip()) for c in cells)):
            continue
        if section == "gpus" and block is None and _MIG1.match(first) and len(cells) >= 4:
            section = "mig"  # an excerpt that starts inside the MIG devices table
        if section == "gpus":
            m1 = _GPU1.match(first)
            if m1 and block is None:
                if cut or len(cells) < 3:
                    t.truncated = f"inside GPU {m1.group(1)}'s rows (line {no})"
                    continue
                block = {"index": int(m1.group(1)), "line": no, "cells1": cells}
                continue
            if block is not None and block.get("cells2") is None:
                if cut or len(cells) < 3:
                    t.truncated = f"inside GPU {block['index']}'s rows (line {no})"
                    block = None
                    continue
                block["cells2"] = cells
                continue
            if block is not None and not first:
                if not cut:
                    block["cells3"] = cells
                continue
            raise ParseError(TOOL, no, "a GPU row '| N  NAME  On/Off | BUS-ID  On/Off | ECC |' or its continuation", s)
        if section == "mig":
            ids = first.split()
            if _MIG1.match(first):
                close_mig()
                if cut:
                    t.truncated = f"inside the MIG devices table (line {no})"
                    continue
                mig = {"ids": ids, "cells": [c.strip() for c in cells]}
                continue
            if mig is not None and not first:
                if len(cells) > 1 and not cut:
                    mig["bar1"] = cells[1].strip()
                continue
            raise ParseError(TOOL, no, "a MIG device row '| GPU GI CI MIG | MEMORY | SM ECC | CE ENC DEC OFA JPG |'", s)
        # processes
        if first.startswith("No running processes found"):
            continue
        if cut:
            t.truncated = f"inside the process table (line {no})"
            continue
        pm = _PROC.match(first)
        if not pm:
            raise ParseError(TOOL, no, "a process row '| GPU [GI CI] PID TYPE NAME MEMORY |'", s)
        assert t.processes is not None
        t.processes.append(SmiProcess(int(pm.group(1)), _int_or_none(pm.group(2)), _int_or_none(pm.group(3)),
                                      int(pm.group(4)), pm.group(5), pm.group(6), _int_or_none(pm.group(7)[:-3])
                                      if pm.group(7) != "N/A" else None))
    if block is not None:  # no border after the last GPU's rows: the output ends there
        if block.get("cells2") is not None:
            t.truncated = t.truncated or f"after GPU {block['index']}'s rows (line {block['line']}; no closing border)"
        close_gpu()
    close_mig()
    if t.processes is not None and not t.processes_complete:
        t.truncated = t.truncated or "inside the process table (no closing border)"
    if t.gpus and t.processes is None and not t.mig_devices:  # nvidia-smi always ends with its Processes box
        t.truncated = t.truncated or (f"after GPU {t.gpus[-1].index}'s rows: no Processes section "
                                      "(nvidia-smi always prints one, 'No running processes found' too)")
    if not t.gpus and not t.unreachable and t.failure is None and t.truncated is None and not t.mig_devices \
            and t.processes is None:
        first = next((ln.strip() for ln in lines if ln.strip()), "")
        raise ParseError(TOOL, 1 if first else None, "the nvidia-smi table (a GPU row '| N  NAME  On/Off | BUS-ID …')",
                         first)
    return t
