"""Mock GPU tools of a host, from its simulated GPU state, in the real tools' layouts
(modelled on the captures in tests/data: nvidia-smi 535 on Ampere, DCGM 3.3.3, dcgm-exporter):

- ``nvidia-smi`` (the default table), ``-L``, ``-i ID`` on any of them,
  ``nvidia-smi -q`` (text) and ``nvidia-smi -q -x`` (XML, DTD v12), ``nvidia-smi topo -m``,
  ``nvidia-smi nvlink -s`` (A100: 12 links at 25 GB/s per GPU; not supported in MIG mode);
- ``dcgmi discovery -l``, ``dcgmi diag -r 1|2|3`` (old result-table layout);
- ``curl -s http://localhost:9400/metrics`` — dcgm-exporter's Prometheus text on its default port;
- ``dmesg [--level=err,warn]`` — the kernel log (empty when healthy; NVRM XID lines after faults).

One reading per GPU (:func:`gpu`) feeds every format and the ``--query-gpu`` CSV, so they agree.
Faults are knobs on :class:`GPUFaults` (``MockHost.faults``), set by tests on an in-process mock.
"""

from __future__ import annotations

import hashlib
import textwrap
import time
from dataclasses import dataclass, field

DRIVER, CUDA, DCGM = "535.161.08", "12.2", "3.3.3"
SM_MAX_MHZ, MEM_MHZ, VIDEO_MAX_MHZ = 1410, 1593, 1290  # A100-SXM4-80GB (max_clocks of the A100 capture)
SLOWDOWN_SM_MHZ = 705  # SM clock while a HW/SW slowdown reason is active
MEM_TOTAL_MIB, MEM_RESERVED_MIB, MEM_USED_MIB = 81920, 869, 4
POWER_LIMIT_W = 400.0
NVLINKS, NVLINK_GBS = 12, 25
_BUS = (0x07, 0x0F, 0x47, 0x4E, 0x87, 0x93, 0xB7, 0xBD)  # DGX-A100-like, clear of the NICs' buses
_BOOT = time.monotonic() - 9 * 86400.0  # the mock's "uptime" origin (dmesg timestamps): up 9 days
SLOWDOWNS = ("hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown")
XID_TEXT = {13: "Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address",
            31: "Ch 00000008, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f4c_00000000.",
            48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer "
                "at partition 0, subpartition 0.",
            63: "Row Remapper: New row (0x000000000015a0c0) marked for remapping, reset gpu to activate.",
            64: "Row Remapper: Failed to remap row (0x000000000015a0c0), RMA required.",
            74: "NVLink: fatal error detected on link 3(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
            79: "GPU has fallen off the bus.", 94: "Contained: SM (0x1). RST: No, D-RST: No",
            95: "Uncontained: FBHUB. RST: Yes, D-RST: No"}


def bus_id(i: int) -> str:
    """GPU ``i``'s PCI bus id as nvidia-smi prints it (``00000000:07:00.0``)."""
    return f"00000000:{_BUS[i] if i < len(_BUS) else 0xC0 + i:02X}:00.0"


def uptime() -> float:
    return time.monotonic() - _BOOT


@dataclass
class GPUFaults:
    """Fault knobs of one mock host's GPUs (GPU index → state); empty means healthy."""

    ecc_uncorrected: dict[int, int] = field(default_factory=dict)  # volatile DRAM uncorrectable ECC errors
    remap_pending: set[int] = field(default_factory=set)  # a row remap waits for a GPU reset
    remap_failure: set[int] = field(default_factory=set)  # row remapping failed (RMA criterion)
    slowdown: dict[int, str] = field(default_factory=dict)  # active clock event reason, one of SLOWDOWNS
    sm_clock_mhz: dict[int, int] = field(default_factory=dict)  # SM clock held low without a reason
    nvlink_down: set[tuple[int, int]] = field(default_factory=set)  # (GPU, link) inactive
    kmsg: list[tuple[float, str, str]] = field(default_factory=list)  # kernel log: (uptime s, level, text)
    last_xid: dict[int, int] = field(default_factory=dict)
    lost: set[int] = field(default_factory=set)  # fallen off the bus (XID 79): NVML cannot reach them

    def xid(self, gpu: int, code: int, text: str | None = None, ago_s: float = 0.0) -> str:
        """Log an NVRM XID event for ``gpu`` (the driver's kmsg line, level err), ``ago_s`` seconds ago
        (an old event still in the kernel log); returns the line. XID 79 also makes the GPU lost, as on
        a real node: the tools cannot reach it until a reboot."""
        pci = bus_id(gpu)[4:-2].lower()  # 0000:07:00
        line = f"NVRM: Xid (PCI:{pci}): {code}, pid='<unknown>', name=<unknown>, {text or XID_TEXT.get(code, 'Unknown Error')}"
        self.kmsg.append((max(0.0, uptime() - ago_s), "err", line))
        self.kmsg.sort(key=lambda e: e[0])
        self.last_xid[gpu] = code
        if code == 79:
            self.lost.add(gpu)
        return line


#: nvidia-smi's return code when a GPU "has fallen off the bus or has otherwise become inaccessible"
#: (nvidia-smi(1), RETURN VALUE: 15), and the line it prints for such a GPU in place of its data (the
#: wording of public reports, e.g. NVIDIA/open-gpu-kernel-modules#387, JosephKJ/OWOD#81).
RC_GPU_LOST = 15


def lost_line(i: int) -> str:
    return f"Unable to determine the device handle for GPU {bus_id(i)[4:]}: GPU is lost.  Reboot the system to recover this GPU\n"


@dataclass
class GPU:
    """One GPU's readings (°C, W, MiB, MHz; None where the tool prints N/A)."""

    index: int
    bus: str
    uuid: str
    name: str
    temp: int
    power: float
    util: int | None
    persistence: bool
    mig: bool
    ecc_uncorrected: int
    remap_uncorrectable: int | None
    remap_pending: bool | None
    remap_failure: bool | None
    sm: int
    reasons: set[str]
    last_xid: int
    mig_pending: bool = False  # the MIG mode after the next GPU reset (nvidia-smi -mig on A100)


def gpu(h, i: int) -> GPU:
    """GPU ``i`` of mock host ``h`` (a MockHost) now."""
    f, cfg = h.faults, h.config
    mig = cfg is not None and cfg.gpu_mig
    slow = f.slowdown.get(i)
    reasons = {slow, "hw_slowdown"} - {None} if slow and slow.startswith("hw") else {slow} - {None}
    pend, fail = i in f.remap_pending, i in f.remap_failure
    return GPU(i, bus_id(i), uuid(h.name, i),
               h.gpu_model, h.gpu_temps[i], 62.5 + 3 * i, None if mig else 0, cfg is None or cfg.gpu_persistence, mig,
               f.ecc_uncorrected.get(i, 0), None if mig else (pend or fail) * 4, None if mig else pend, None if mig else fail,
               SLOWDOWN_SM_MHZ if reasons else f.sm_clock_mhz.get(i, SM_MAX_MHZ), reasons, f.last_xid.get(i, 0),
               cfg is not None and getattr(cfg, "gpu_mig_pending", cfg.gpu_mig))


def _na(v, unit: str = "") -> str:
    return "N/A" if v is None else f"{v}{unit}"


def _yn(v) -> str:
    return "N/A" if v is None else ("Yes" if v else "No")


def _act(g: GPU, r: str) -> str:
    return "Active" if r in g.reasons else "Not Active"


def _ed(v: bool) -> str:
    return "Enabled" if v else "Disabled"


# --- nvidia-smi -q ----------------------------------------------------------------------

def _q_text(h, ids: list[int]) -> str:
    out = ["", "==============NVSMI LOG==============", "", f"Timestamp                                 : {time.ctime()}",
           f"Driver Version                            : {DRIVER}", f"CUDA Version                              : {CUDA}", "",
           f"Attached GPUs                             : {h.gpus}"]
    for i in ids:
        g = gpu(h, i)

        def kv(ind, k, v=""):
            out.append(" " * ind + (f"{k:<{38 - ind + 4}}: {v}" if v != "" else k))

        out.append(f"GPU {g.bus}")
        for k, v in (("Product Name", g.name), ("Product Brand", "NVIDIA"), ("Product Architecture", "Ampere"),
                     ("Display Mode", "Enabled"), ("Display Active", "Disabled"), ("Persistence Mode", _ed(g.persistence)),
                     ("Addressing Mode", "None")):
            kv(4, k, v)
        kv(4, "MIG Mode")
        kv(8, "Current", _ed(g.mig))
        kv(8, "Pending", _ed(g.mig_pending))
        for k, v in (("Accounting Mode", "Disabled"), ("Accounting Mode Buffer Size", "4000")):
            kv(4, k, v)
        kv(4, "Serial Number", f"{1562120000000 + i}")
        kv(4, "GPU UUID", g.uuid)
        kv(4, "Minor Number", i)
        kv(4, "VBIOS Version", "92.00.36.00.02")
        kv(4, "Module ID", i + 1)
        kv(4, "GSP Firmware Version", DRIVER)
        kv(4, "GPU Reset Status")
        kv(8, "Reset Required", _yn(g.remap_pending))
        kv(8, "Drain and Reset Recommended", "No")
        kv(4, "PCI")
        kv(8, "Bus", f"0x{g.bus[9:11]}")
        kv(8, "Device", "0x00")
        kv(8, "Domain", "0x0000")
        kv(8, "Device Id", "0x20B210DE")
        kv(8, "Bus Id", g.bus)
        kv(8, "Sub System Id", "0x147F10DE")
        kv(4, "Fan Speed", "N/A")
        kv(4, "Performance State", "P0")
        kv(4, "Clocks Event Reasons")
        kv(8, "Idle", "Not Active")
        kv(8, "Applications Clocks Setting", "Not Active")
        kv(8, "SW Power Cap", "Not Active")
        kv(8, "HW Slowdown", _act(g, "hw_slowdown"))
        kv(12, "HW Thermal Slowdown", _act(g, "hw_thermal_slowdown"))
        kv(12, "HW Power Brake Slowdown", _act(g, "hw_power_brake_slowdown"))
        kv(8, "Sync Boost", "Not Active")
        kv(8, "SW Thermal Slowdown", _act(g, "sw_thermal_slowdown"))
        kv(8, "Display Clock Setting", "Not Active")
        kv(4, "FB Memory Usage")
        for k, v in (("Total", MEM_TOTAL_MIB), ("Reserved", MEM_RESERVED_MIB), ("Used", MEM_USED_MIB),
                     ("Free", MEM_TOTAL_MIB - MEM_RESERVED_MIB - MEM_USED_MIB)):
            kv(8, k, f"{v} MiB")
        kv(4, "Compute Mode", "Default")
        kv(4, "Utilization")
        for k in ("Gpu", "Memory", "Encoder", "Decoder", "JPEG", "OFA"):
            kv(8, k, _na(g.util, " %"))
        kv(4, "ECC Mode")
        kv(8, "Current", "Enabled")
        kv(8, "Pending", "Enabled")
        kv(4, "ECC Errors")
        for scope in ("Volatile", "Aggregate"):
            kv(8, scope)
            for k in ("SRAM Correctable", "SRAM Uncorrectable", "DRAM Correctable", "DRAM Uncorrectable"):
                kv(12, k, g.ecc_uncorrected if k == "DRAM Uncorrectable" else 0)
        kv(4, "Retired Pages")
        for k in ("Single Bit ECC", "Double Bit ECC", "Pending Page Blacklist"):
            kv(8, k, "N/A")
        if g.remap_pending is None:
            kv(4, "Remapped Rows", "N/A")
        else:
            kv(4, "Remapped Rows")
            kv(8, "Correctable Error", 0)
            kv(8, "Uncorrectable Error", g.remap_uncorrectable)
            kv(8, "Pending", _yn(g.remap_pending))
            kv(8, "Remapping Failure Occurred", _yn(g.remap_failure))
            kv(8, "Bank Remap Availability Histogram")
            for k, v in (("Max", 640 - g.remap_uncorrectable), ("High", 0), ("Partial", g.remap_uncorrectable),
                         ("Low", 0), ("None", 0)):
                kv(12, k, f"{v} bank(s)")
        kv(4, "Temperature")
        for k, v in (("GPU Current Temp", f"{g.temp} C"), ("GPU T.Limit Temp", "N/A"), ("GPU Shutdown Temp", "92 C"),
                     ("GPU Slowdown Temp", "89 C"), ("GPU Max Operating Temp", "85 C"), ("GPU Target Temperature", "N/A"),
                     ("Memory Current Temp", f"{g.temp + 8} C"), ("Memory Max Operating Temp", "95 C")):
            kv(8, k, v)
        kv(4, "GPU Power Readings")
        kv(8, "Power Draw", f"{g.power:.2f} W")
        for k in ("Current Power Limit", "Requested Power Limit", "Default Power Limit", "Min Power Limit", "Max Power Limit"):
            kv(8, k, "100.00 W" if k.startswith("Min") else f"{POWER_LIMIT_W:.2f} W")
        kv(4, "Clocks")
        for k, v in (("Graphics", g.sm), ("SM", g.sm), ("Memory", MEM_MHZ), ("Video", min(g.sm, VIDEO_MAX_MHZ))):
            kv(8, k, f"{v} MHz")
        kv(4, "Max Clocks")
        for k, v in (("Graphics", SM_MAX_MHZ), ("SM", SM_MAX_MHZ), ("Memory", MEM_MHZ), ("Video", VIDEO_MAX_MHZ)):
            kv(8, k, f"{v} MHz")
        kv(4, "Fabric")
        kv(8, "State", "N/A")
        kv(8, "Status", "N/A")
        kv(4, "Processes", "None")
        out.append("")
    return "\n".join(out) + "\n"


def _q_xml(h, ids: list[int]) -> str:
    def el(ind, tag, v=None):
        return " " * ind + (f"<{tag}>{v}</{tag}>" if v is not None else f"<{tag}>")

    out = ['<?xml version="1.0" encoding="UTF-8"?>', '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">',
           "<nvidia_smi_log>",
           el(4, "timestamp", time.ctime()), el(4, "driver_version", DRIVER), el(4, "cuda_version", CUDA),
           el(4, "attached_gpus", h.gpus)]
    for i in ids:
        g = gpu(h, i)
        out.append(f'    <gpu id="{g.bus}">')
        out += [el(8, "product_name", g.name), el(8, "product_brand", "NVIDIA"), el(8, "product_architecture", "Ampere"),
                el(8, "display_mode", "Enabled"), el(8, "display_active", "Disabled"),
                el(8, "persistence_mode", _ed(g.persistence)), el(8, "addressing_mode", "None"), el(8, "mig_mode"),
                el(12, "current_mig", _ed(g.mig)), el(12, "pending_mig", _ed(g.mig_pending)), "        </mig_mode>",
                el(8, "serial", 1562120000000 + i), el(8, "uuid", g.uuid), el(8, "minor_number", i),
                el(8, "vbios_version", "92.00.36.00.02"), el(8, "gpu_module_id", i + 1),
                el(8, "gsp_firmware_version", DRIVER), el(8, "gpu_reset_status"), el(12, "reset_required", _yn(g.remap_pending)),
                el(12, "drain_and_reset_recommended", "No"), "        </gpu_reset_status>", el(8, "pci"),
                el(12, "pci_bus", g.bus[9:11]), el(12, "pci_device", "00"), el(12, "pci_domain", "0000"),
                el(12, "pci_device_id", "20B210DE"), el(12, "pci_bus_id", g.bus), el(12, "pci_sub_system_id", "147F10DE"),
                "        </pci>", el(8, "fan_speed", "N/A"), el(8, "performance_state", "P0"), el(8, "clocks_event_reasons")]
        for r in ("gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown", "hw_thermal_slowdown",
                  "hw_power_brake_slowdown", "sync_boost", "sw_thermal_slowdown", "display_clocks_setting"):
            out.append(el(12, f"clocks_event_reason_{r}", _act(g, r)))
        out += ["        </clocks_event_reasons>", el(8, "fb_memory_usage"), el(12, "total", f"{MEM_TOTAL_MIB} MiB"),
                el(12, "reserved", f"{MEM_RESERVED_MIB} MiB"), el(12, "used", f"{MEM_USED_MIB} MiB"),
                el(12, "free", f"{MEM_TOTAL_MIB - MEM_RESERVED_MIB - MEM_USED_MIB} MiB"), "        </fb_memory_usage>",
                el(8, "compute_mode", "Default"), el(8, "utilization")]
        out += [el(12, f"{k}_util", _na(g.util, " %")) for k in ("gpu", "memory", "encoder", "decoder", "jpeg", "ofa")]
        out += ["        </utilization>", el(8, "ecc_mode"), el(12, "current_ecc", "Enabled"), el(12, "pending_ecc", "Enabled"),
                "        </ecc_mode>", el(8, "ecc_errors")]
        for scope in ("volatile", "aggregate"):
            out += [el(12, scope), el(16, "sram_correctable", 0), el(16, "sram_uncorrectable", 0), el(16, "dram_correctable", 0),
                    el(16, "dram_uncorrectable", g.ecc_uncorrected), f"            </{scope}>"]
        out.append("        </ecc_errors>")
        if g.remap_pending is None:
            out.append(el(8, "remapped_rows", "N/A"))
        else:
            u = g.remap_uncorrectable
            out += [el(8, "remapped_rows"), el(12, "remapped_row_corr", 0), el(12, "remapped_row_unc", u),
                    el(12, "remapped_row_pending", _yn(g.remap_pending)), el(12, "remapped_row_failure", _yn(g.remap_failure)),
                    el(12, "row_remapper_histogram")]
            out += [el(16, f"row_remapper_histogram_{k}", f"{v} bank(s)")
                    for k, v in (("max", 640 - u), ("high", 0), ("partial", u), ("low", 0), ("none", 0))]
            out += ["            </row_remapper_histogram>", "        </remapped_rows>"]
        out += [el(8, "temperature"), el(12, "gpu_temp", f"{g.temp} C"), el(12, "gpu_temp_tlimit", "N/A"),
                el(12, "gpu_temp_max_threshold", "92 C"), el(12, "gpu_temp_slow_threshold", "89 C"),
                el(12, "gpu_temp_max_gpu_threshold", "85 C"), el(12, "gpu_target_temperature", "N/A"),
                el(12, "memory_temp", f"{g.temp + 8} C"), el(12, "gpu_temp_max_mem_threshold", "95 C"), "        </temperature>",
                el(8, "gpu_power_readings"), el(12, "power_state", "P0"), el(12, "power_draw", f"{g.power:.2f} W"),
                el(12, "current_power_limit", f"{POWER_LIMIT_W:.2f} W"),
                el(12, "requested_power_limit", f"{POWER_LIMIT_W:.2f} W"),
                el(12, "default_power_limit", f"{POWER_LIMIT_W:.2f} W"), el(12, "min_power_limit", "100.00 W"),
                el(12, "max_power_limit", f"{POWER_LIMIT_W:.2f} W"), "        </gpu_power_readings>", el(8, "clocks"),
                el(12, "graphics_clock", f"{g.sm} MHz"), el(12, "sm_clock", f"{g.sm} MHz"), el(12, "mem_clock", f"{MEM_MHZ} MHz"),
                el(12, "video_clock", f"{min(g.sm, VIDEO_MAX_MHZ)} MHz"), "        </clocks>", el(8, "max_clocks"),
                el(12, "graphics_clock", f"{SM_MAX_MHZ} MHz"), el(12, "sm_clock", f"{SM_MAX_MHZ} MHz"),
                el(12, "mem_clock", f"{MEM_MHZ} MHz"), el(12, "video_clock", f"{VIDEO_MAX_MHZ} MHz"), "        </max_clocks>",
                el(8, "fabric"), el(12, "state", "N/A"), el(12, "status", "N/A"), "        </fabric>",
                "        <processes />", "        <accounted_processes />", "    </gpu>"]
    out.append("</nvidia_smi_log>")
    return "\n".join(out) + "\n"


# --- nvidia-smi topo -m / nvlink -s -------------------------------------------------------

def _topo(h) -> str:
    from mfctl.mock import rdmatools

    numa_of_nic = {n.pci: n.numa_node for n in h.testbed.source.host(h.name).nics if n.pci}
    nics = [(p.dev, p.nic.pci, numa_of_nic.get(p.nic.pci, 0)) for p in rdmatools.ports(h)]
    half = max(1, h.gpus // 2)
    gnuma = [min(i // half, 1) for i in range(h.gpus)]
    cpus = ("0-63,128-191", "64-127,192-255")

    def g2n(i, j):
        if gnuma[i] != nics[j][2]:
            return "SYS"
        mine = [k for k, n in enumerate(nics) if n[2] == gnuma[i]]
        peers = [k for k in range(h.gpus) if gnuma[k] == gnuma[i]]
        return "PXB" if mine.index(j) == peers.index(i) * len(mine) // len(peers) else "NODE"

    cols = [f"GPU{i}" for i in range(h.gpus)] + [f"NIC{j}" for j in range(len(nics))]
    lines = ["\t\x1b[4m" + "\t".join(cols + ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]) + "\x1b[0m"]
    for i in range(h.gpus):
        cells = [" X " if k == i else "NV12" for k in range(h.gpus)] + [g2n(i, j) for j in range(len(nics))]
        lines.append("\t".join([f"GPU{i}", *cells, cpus[gnuma[i]], str(gnuma[i]), "", "N/A"]))
    for j, (_, pci, numa) in enumerate(nics):
        cells = [g2n(i, j) for i in range(h.gpus)]
        cells += [" X " if k == j else "PIX" if n[1] == pci else "NODE" if n[2] == numa else "SYS" for k, n in enumerate(nics)]
        lines.append("\t".join([f"NIC{j}", *cells]))
    lines += ["", "Legend:", "", "  X    = Self",
              "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)",
              "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node",
              "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)",
              "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)",
              "  PIX  = Connection traversing at most a single PCIe bridge",
              "  NV#  = Connection traversing a bonded set of # NVLinks", "", "NIC Legend:", ""]
    lines += [f"  NIC{j}: {dev}" for j, (dev, _, _) in enumerate(nics)]
    return "\n".join(lines) + "\n\n"


def _nvlink(h) -> str:
    out = []
    for i in range(h.gpus):
        g = gpu(h, i)
        out.append(f"GPU {i}: {g.name} (UUID: {g.uuid})")
        if g.mig:
            out.append("Nvlink queries are not supported for Devices in MIG mode")
            continue
        out += [f"         Link {k}: " + ("<inactive>" if (i, k) in h.faults.nvlink_down else f"{NVLINK_GBS} GB/s")
                for k in range(NVLINKS)]
    return "".join(ln + "\n" for ln in out)


def uuid(host_name: str, i: int) -> str:
    """GPU ``i``'s UUID on a mock host, stable and shaped like nvidia-smi's (GPU-8-4-4-4-12 hex)."""
    d = hashlib.md5(f"{host_name}{i}".encode()).hexdigest()
    return f"GPU-{d[:8]}-{d[8:12]}-{d[12:16]}-{d[16:20]}-{d[20:32]}"


def select_ids(args: list[str], n: int, host_name: str = "") -> tuple[list[int], list[str], str | None]:
    """nvidia-smi's ``-i ID[,ID]`` / ``--id=ID[,ID]`` (indexes, PCI bus ids or UUIDs of the mock
    host ``host_name``): the GPUs, the other arguments, and an error text (None when fine)."""
    rest, spec = [], None
    it = iter(args)
    for a in it:
        if a in ("-i", "--id"):
            spec = next(it, None)
            if spec is None:
                return [], rest, "Option -i requires a value (a GPU index, PCI bus id or UUID)\n"
        elif a.startswith("--id="):
            spec = a.split("=", 1)[1]
        else:
            rest.append(a)
    if spec is None:
        return list(range(n)), rest, None
    ids: list[int] = []
    for part in spec.split(","):
        part = part.strip()
        hit = [i for i in range(n) if part == str(i) or part.upper() in (bus_id(i), bus_id(i)[4:]) or part == uuid(host_name, i)]
        if not hit:
            return [], rest, "No devices were found\n"
        ids += [i for i in hit if i not in ids]  # each GPU once, in the order asked
    return ids, rest, None


#: nvidia-smi's default table by driver branch: (inner width, middle column width, driver, CUDA).
#: R530–R535 draw 87 columns with a 22-wide Bus-Id/Memory column (public 535.129/171/183 outputs);
#: R545+ widen that column to 24 (89 columns: the corpus' 550.90.07 capture, tests/data).
TABLES = {535: (87, 22, DRIVER, CUDA), 550: (89, 24, "550.90.07", "12.4")}


def _table(h, ids: list[int]) -> str:
    """nvidia-smi without options: the GPU table and the processes table (the mock runs no CUDA
    process), in the layout of the mock host's driver branch (:data:`TABLES`)."""
    w, m, drv, cuda = TABLES[550 if getattr(h, "driver", 535) >= 545 else 535]
    wide = m == 24
    bar = "+" + "-" * w + "+"
    sep = "+" + "-" * 41 + "+" + "-" * m + "+" + "-" * 22 + "+"
    out = [time.strftime("%a %b %d %H:%M:%S %Y"), bar,
           f"| NVIDIA-SMI {drv:<23}Driver Version: {drv:<{w - 74}}CUDA Version: {cuda:<9}|",
           "|" + "-" * 41 + "+" + "-" * m + "+" + "-" * 22 + "+",
           f"| GPU  Name                 Persistence-M | Bus-Id{'Disp.A':>{m - 8}} | Volatile Uncorr. ECC |",
           f"| Fan  Temp   Perf          Pwr:Usage/Cap |{'Memory-Usage':>{m - 1}} | GPU-Util  Compute M. |",
           f"|                                         |{'':>{m}}|               MIG M. |",
           "|" + "=" * 41 + "+" + "=" * m + "+" + "=" * 22 + "|"]
    for i in ids:
        g = gpu(h, i)
        ecc = "On" if g.mig else str(g.ecc_uncorrected)
        util = "N/A" if g.util is None else f"{g.util}%"
        power, cap = f"{g.power:.0f}W", f"{POWER_LIMIT_W:.0f}W"
        used, total = f"{MEM_USED_MIB}MiB", f"{MEM_TOTAL_MIB - MEM_RESERVED_MIB}MiB"
        out += [f"|{i:>4}  {g.name[:25]:<25}{'On' if g.persistence else 'Off':>8}  |{g.bus:>{m - 5}} Off |{ecc:>21} |",
                f"| N/A  {f'{g.temp}C':>4}    P0{power:>{16 if wide else 17}} / {cap:>{5 if wide else 4}} |"
                f"{used:>{11 if wide else 10}} / {total:>{9 if wide else 8}} |{util:>8}{'Default':>13} |",
                f"|                                         |{'':>{m}}|{_ed(g.mig):>21} |", sep]
    out += ["", bar, "| Processes:" + " " * (w - 11) + "|",
            f"|  GPU   GI   CI        PID   Type   {'Process name':<{w - 47}}GPU Memory |",
            "|        ID   ID" + " " * (w - 26) + "Usage      |",
            "|" + "=" * w + "|", "|  No running processes found" + " " * (w - 28) + "|", bar]
    return "".join(ln + "\n" for ln in out)


def nvidia_smi(h, args: list[str], out, err, ids: list[int] | None = None) -> int | None:
    """No options (the table), ``-L``, ``-q [-x]``, ``topo -m``, ``nvlink -s``, on the GPUs ``ids``
    (default all: see :func:`select_ids`); None for arguments this module does not model. (A lost GPU
    among ``ids`` never gets here: MockHost._nvidia_smi answers with :func:`lost_line`.)"""
    ids = list(range(h.gpus)) if ids is None else ids
    if not args:
        out(_table(h, ids))
        return 0
    if args in (["-L"], ["--list-gpus"]):
        out("".join(f"GPU {i}: {gpu(h, i).name} (UUID: {gpu(h, i).uuid})\n" for i in ids))
        return 0
    if args[:1] == ["-q"] or args[:1] == ["--query"]:
        out(_q_xml(h, ids) if "-x" in args or "--xml-format" in args else _q_text(h, ids))
        return 0
    if args[:1] == ["topo"]:
        if "-m" not in args:
            err("topo: only -m is modelled\n")
            return 2
        out(_topo(h))
        return 0
    if args[:1] == ["nvlink"]:
        if "-s" not in args:
            err("nvlink: only -s is modelled\n")
            return 2
        out(_nvlink(h))
        return 0
    return None


# --- DCGM -------------------------------------------------------------------------------

def _row(name: str, result: str) -> list[str]:
    parts = textwrap.wrap(result, 46) or [""]
    return [f"| {name if k == 0 else '':<25} | {p:<46} |" for k, p in enumerate(parts)]


def _diag(h, level: int) -> str:
    gs = [gpu(h, i) for i in range(h.gpus)]
    bad_pm = [g.index for g in gs if not g.persistence]
    bad_rr = [g.index for g in gs if g.remap_pending or g.remap_failure or g.ecc_uncorrected]
    sep = "+---------------------------+------------------------------------------------+"
    lines = ["Successfully ran diagnostic for group.", sep,
             "| Diagnostic                | Result                                         |",
             "+===========================+================================================+",
             "|-----  Metadata  ----------+------------------------------------------------|"]
    lines += _row("DCGM Version", DCGM) + _row("Driver Version Detected", DRIVER)
    lines += _row("GPU Device IDs Detected", ",".join(["20b2"] * h.gpus))
    lines.append("|-----  Deployment  --------+------------------------------------------------|")
    for name in ("Denylist", "NVML Library", "CUDA Main Library", "Permissions and OS Blocks", "Persistence Mode",
                 "Environment Variables", "Page Retirement/Row Remap", "Graphics Processes", "Inforom"):
        if name == "Persistence Mode" and bad_pm:
            lines += _row(name, "Fail") + _row("Warning", f"Persistence mode for GPU {bad_pm[0]} is currently disabled. The "
                                               "DCGM diagnostic requires peristence mode to be enabled. Enable persistence "
                                               f"mode by running \"nvidia-smi -i {bad_pm[0]} -pm 1 \" as root.")
        elif name == "Page Retirement/Row Remap" and bad_rr:
            g = gs[bad_rr[0]]
            why = ("had uncorrectable memory errors and row remapping failed. Run the field diagnostic on the GPU."
                   if g.remap_failure else "has uncorrectable memory errors and row remappings are pending. Drain the GPU "
                   "and reset it or reboot the node to resolve this issue.")
            lines += _row(name, "Fail") + _row("Warning", f"GPU {g.index} {why}")
        else:
            lines += _row(name, "Pass")
    if level >= 2:
        mem = f"Fail - GPU: {bad_rr[0]}" if bad_rr else "Pass - All"
        lines += ["+-----  Integration  -------+------------------------------------------------+", *_row("PCIe", "Pass - All"),
                  "+-----  Hardware  ----------+------------------------------------------------+", *_row("GPU Memory", mem)]
        if level >= 3:
            lines += _row("Diagnostic", "Pass - All")
        lines.append("+-----  Stress  ------------+------------------------------------------------+")
        if level >= 3:
            slow = [g.index for g in gs if g.reasons]
            power = f"Fail - GPU: {slow[0]}" if slow else "Pass - All"
            lines += (_row("Targeted Stress", "Pass - All") + _row("Targeted Power", power)
                      + _row("Memory Bandwidth", "Pass - All"))
    lines.append(sep)
    return "\n".join(lines) + "\n"


def _discovery(h) -> str:
    sep = "+--------+----------------------------------------------------------------------+"
    lines = [f"{h.gpus} GPUs found.", sep,
             "| GPU ID | Device Information                                                   |", sep]
    for i in range(h.gpus):
        g = gpu(h, i)
        lines += [f"| {i:<6} | {'Name: ' + g.name:<68} |", f"|        | {'PCI Bus ID: ' + g.bus:<68} |",
                  f"|        | {'Device UUID: ' + g.uuid:<68} |", sep]
    lines += ["6 NvSwitches found.", "+-----------+", "| Switch ID |", "+-----------+"]
    lines += [f"| {s:<9} |" for s in (8, 9, 10, 11, 12, 13)] + ["+-----------+"]
    return "\n".join(lines) + "\n"


def dcgmi(h, args: list[str], out, err) -> int:
    if args[:2] == ["discovery", "-l"]:
        out(_discovery(h))
        return 0
    if args[:1] == ["diag"] and "-r" in args:
        lvl = args[args.index("-r") + 1] if args.index("-r") + 1 < len(args) else ""
        if lvl not in ("1", "2", "3"):
            err(f"Error: invalid run level '{lvl}' (expected 1, 2 or 3)\n")
            return 255
        out(_diag(h, int(lvl)))
        return 0
    err("dcgmi: only 'discovery -l' and 'diag -r 1|2|3' are modelled\n")
    return 255


DCGM_NOT_SUPPORTED = 9223372036854775794  # DCGM_INT64_NOT_SUPPORTED (dcgm_structs.h), a blank sentinel
EXPORTER_URLS = ("http://localhost:9400/metrics", "http://127.0.0.1:9400/metrics", "localhost:9400/metrics")
EXPORTER_METRICS = [  # name, type, help, value of a GPU reading
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", lambda g: g.sm),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", lambda g: MEM_MHZ),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).", lambda g: g.temp + 8),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", lambda g: g.temp),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", lambda g: f"{g.power:.6f}"),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", lambda g: DCGM_NOT_SUPPORTED if g.util is None else g.util),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).",
     lambda g: MEM_TOTAL_MIB - MEM_RESERVED_MIB - MEM_USED_MIB),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", lambda g: MEM_USED_MIB),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", lambda g: g.last_xid),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Total number of double-bit volatile ECC errors.", lambda g: g.ecc_uncorrected),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for uncorrectable errors.",
     lambda g: DCGM_NOT_SUPPORTED if g.remap_uncorrectable is None else g.remap_uncorrectable),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed",
     lambda g: DCGM_NOT_SUPPORTED if g.remap_failure is None else int(g.remap_failure)),
    ("DCGM_FI_PROF_NVLINK_TX_BYTES", "gauge",
     "The rate of data not including protocol headers transmitted over NVLink (in B/s).", lambda g: 0),
]


def exporter_text(h) -> str:
    """dcgm-exporter's ``/metrics`` (labels as in the DGX A100 capture)."""
    gs = [gpu(h, i) for i in range(h.gpus)]
    lines = []
    for name, typ, hlp, val in EXPORTER_METRICS:
        lines += [f"# HELP {name} {hlp}", f"# TYPE {name} {typ}"]
        lines += [f'{name}{{gpu="{g.index}",UUID="{g.uuid}",device="nvidia{g.index}",modelName="{g.name}",'
                  f'Hostname="{h.name}"}} {val(g)}' for g in gs]
    return "\n".join(lines) + "\n"


def curl(h, args: list[str], out, err) -> int:
    url = next((a for a in args if not a.startswith("-")), None)
    if url in EXPORTER_URLS:
        out(exporter_text(h))
        return 0
    if url is None:
        err("curl: try 'curl --help' or 'curl --manual' for more information\n")
        return 2
    if "-S" in args or "-s" not in args:
        host = url.split("//")[-1].split("/")[0]
        err(f"curl: (7) Failed to connect to {host.split(':')[0]} port {host.split(':')[1] if ':' in host else 80} "
            "after 0 ms: Connection refused\n")
    return 7


def dmesg(h, args: list[str], out, err) -> int:
    """``dmesg [--level=LIST]``: ``[ uptime] text`` lines of the mock kernel log."""
    lv = next((a.split("=", 1)[1] for a in args if a.startswith("--level=")), None)
    want = set(lv.split(",")) if lv else None
    out("".join(f"[{t:12.6f}] {text}\n" for t, level, text in h.faults.kmsg if want is None or level in want))
    return 0


COMMANDS = {"dcgmi": dcgmi, "curl": curl, "dmesg": dmesg}


def csv_na(v) -> str:
    """A reading as ``--query-gpu`` CSV prints it: ``[N/A]``, ``Yes``/``No`` or the number."""
    return "[N/A]" if v is None else ("Yes" if v else "No") if isinstance(v, bool) else str(v)
