"""GPU checks: the nvidia-smi query (``gpu``), kernel-log XIDs (``xid``), NVLink (``nvlink``) and,
opt-in, DCGM's quick diagnostic (``dcgm``).

``gpu`` judges (A100 datasheet class, NVIDIA's memory error management): temperature against
``gpu_temp_warn_c``/``gpu_temp_crit_c``; any uncorrected volatile ECC error is critical; a pending
row remap needs a GPU reset (warning), a remap failure is an RMA criterion (critical); an active
HW/SW slowdown reason, or an SM clock below ``sm_clock_min_share`` of its maximum on a GPU that is
not idle, is a warning; persistence mode off and MIG mode on are warnings; GPUs nvidia-smi cannot
reach (fallen off the bus: exit 15) are critical and the others are still judged. ``[N/A]``
readings are never judged.
"""

from __future__ import annotations

from mfctl.errors import ParseError
from mfctl.health.checks.base import Check, Probe
from mfctl.health.words import ago, indexes, span
from mfctl.hosts import dcgmi, dmesg, nvidia_smi

#: XIDs whose resolution in NVIDIA's Xid catalogue (docs.nvidia.com/deploy/xid-errors) is a GPU reset or
#: service, not an application restart: 48 double-bit ECC, 64 row-remapper failure, 74 NVLink error,
#: 79 fallen off the bus, 95 uncontained ECC. Others (63 "new row marked for remapping, reset GPU to
#: activate" — the pending remap the query CSV also reports —, 92 high single-bit ECC rate, 94 contained
#: ECC error, application faults) are warnings.
XID_CRITICAL = {48, 64, 74, 79, 95}
#: What the XIDs seen on A100-class training nodes mean (NVIDIA Xid catalogue, abridged).
XID_MEANING = {13: "graphics engine exception", 31: "GPU memory page fault", 43: "GPU stopped processing",
               45: "preemptive cleanup after an earlier error", 48: "double-bit ECC error",
               61: "internal micro-controller breakpoint", 62: "internal micro-controller halt",
               63: "row marked for remapping, reset the GPU", 64: "row remapping failed", 74: "NVLink error",
               79: "fallen off the bus", 92: "high single-bit ECC error rate", 94: "contained ECC error",
               95: "uncontained ECC error", 119: "GSP RPC timeout", 120: "GSP error"}


# --- gpu: nvidia-smi --query-gpu ------------------------------------------------------------

def query_with_fallbacks(p: Probe, argv: list[str]):
    """The health query; on a driver that rejects a field (before R535: clocks_throttle_reasons),
    the same query with the field names it knows (:data:`nvidia_smi.QUERY_FALLBACKS`)."""
    r = p.run(argv)
    for fields in nvidia_smi.QUERY_FALLBACKS[1:]:
        if r.rc in (0, None) or not nvidia_smi.unknown_field(r.stdout + r.stderr):
            break
        r = p.run(nvidia_smi.query_argv(fields))
    return r


def _lost(p: Probe, r) -> list[tuple[str, str]]:
    """GPUs nvidia-smi cannot reach (each a critical finding); the line may be on both streams: once."""
    unreachable = [] if r.error else list(dict.fromkeys(nvidia_smi.unreachable_gpus(r.stdout + "\n" + r.stderr)))
    for bus, why in unreachable:
        dom, b, dev = bus.lower().split(":")
        pci = f"{dom[-4:]}:{b}:{dev.split('.')[0]}"  # as the kernel log's XID lines name it: 0000:4e:00
        if "lost" in why.lower():
            p.add("critical", f"GPU at PCI {pci} is lost (fallen off the bus: unreachable until a reboot)", "gpu.lost",
                  component=pci, value=why)
        else:
            p.add("critical", f"GPU at PCI {pci} cannot be reached (nvidia-smi: {why})", "gpu.unreachable",
                  component=pci, value=why)
    return unreachable


def _rows(p: Probe, r, unreachable: list) -> list[dict] | None:
    """The query's rows, or None (with its finding) when it gave none to judge."""
    if not r.ok and not unreachable:
        p.add("critical", r.error or f"nvidia-smi exited {r.rc}: {r.stderr.strip()[:200]}", "gpu.query_failed", value=r.rc)
        return None
    if unreachable and not any(ln.strip() and not nvidia_smi.unreachable_gpus(ln) for ln in r.stdout.splitlines()):
        others = p.host.gpus.count - len(unreachable)
        if others > 0:  # nothing but the unreachable ones: the others are not known
            p.add("critical", f"nvidia-smi gave no data for the other {others} GPUs (exit {r.rc})", "gpu.query_failed",
                  value=r.rc)
        return None
    try:
        return nvidia_smi.parse_query_csv(r.stdout)
    except ParseError as e:
        p.add("critical", str(e), "gpu.unparsable")
        return None


def _judge_fleet(p: Probe, gpus: list, unreachable: list) -> None:
    """What the host's GPUs are together: persistence, MIG, how many."""
    off = [g.index for g in gpus if g.persistence is False]
    if off:
        p.add("warning", f"persistence mode is off on GPU {indexes(off)}", "gpu.persistence_off", value=off)
    mig = [g.index for g in gpus if g.mig]
    if mig:  # MoE training takes whole GPUs; a MIG-partitioned GPU shows up as slices
        p.add("warning", f"MIG mode is enabled on GPU {indexes(mig)} (training needs whole GPUs: "
                         "nvidia-smi -mig 0 and a GPU reset)", "gpu.mig_enabled", value=mig)
    want = p.host.gpus.count
    if gpus and len(gpus) + len(unreachable) != want:
        p.add("critical", f"{len(gpus)} GPUs visible{f' (and {len(unreachable)} unreachable)' if unreachable else ''}"
                          f", inventory says {want}", "gpu.count", value=len(gpus), limit=want)


def _judge_memory(p: Probe, g) -> None:
    gpu = f"gpu{g.index}"
    if g.ecc_uncorrected:
        p.add("critical", f"GPU {g.index} has {g.ecc_uncorrected} uncorrected ECC errors", "gpu.ecc_uncorrected",
              component=gpu, value=g.ecc_uncorrected, limit=0)
    if g.remap_failure:
        p.add("critical", f"GPU {g.index}: row remapping failed (memory repair exhausted: RMA)", "gpu.remap_failed",
              component=gpu)
    elif g.remap_pending:
        p.add("warning", f"GPU {g.index}: row remap pending (reset the GPU to apply it)", "gpu.remap_pending", component=gpu)


def _judge_temperature(p: Probe, g) -> None:
    for sev, t_lim in (("critical", p.lim["gpu_temp_crit_c"]), ("warning", p.lim["gpu_temp_warn_c"])):
        if g.temperature_c is not None and g.temperature_c >= t_lim:
            p.add(sev, f"GPU {g.index} at {g.temperature_c} °C", "gpu.temperature", component=f"gpu{g.index}",
                  value=g.temperature_c, limit=t_lim, unit="C")
            return


def _judge_clocks(p: Probe, g) -> None:
    gpu, share = f"gpu{g.index}", p.lim["sm_clock_min_share"]
    clk = "" if g.sm_clock_mhz is None else f" (SM {g.sm_clock_mhz:g}" + (
        f" of {g.sm_clock_max_mhz:g} MHz)" if g.sm_clock_max_mhz else " MHz)")
    if g.clock_events:
        p.add("warning", f"GPU {g.index} clocks slowed by {', '.join(g.clock_events)}{clk}", "gpu.clocks_slowed",
              component=gpu, value=list(g.clock_events))
    elif (g.idle is False and g.sm_clock_mhz is not None and g.sm_clock_max_mhz
          and g.sm_clock_mhz < share * g.sm_clock_max_mhz):
        p.add("warning", f"GPU {g.index} SM clock far below its maximum{clk}", "gpu.sm_clock_low", component=gpu,
              value=g.sm_clock_mhz, limit=round(share * g.sm_clock_max_mhz, 1), unit="MHz")


def _remember_pci(p: Probe, rows: list[dict]) -> None:
    """``"00000000:4E:00.0"`` → ``("4e", "00")``: kernel-log XIDs name GPUs by PCI address."""
    for r in rows:
        parts = str(r.get("pci.bus_id") or "").lower().split(":")
        if len(parts) == 3:
            p.health.gpu_by_pci[(parts[1], parts[2].split(".")[0])] = int(r["index"])
    p.facts["gpu_by_pci"] = p.health.gpu_by_pci


def judge_gpu(p: Probe, results: dict) -> None:
    r = results["query"]
    unreachable = _lost(p, r)
    rows = _rows(p, r, unreachable)
    if rows is None:
        return
    gpus = nvidia_smi.gpu_statuses(rows)  # each row knows its place: an [N/A] index still names its GPU
    _remember_pci(p, rows)
    p.health.gpus = len(gpus)
    _judge_fleet(p, gpus, unreachable)
    for g in gpus:
        _judge_temperature(p, g)
        _judge_memory(p, g)
        _judge_clocks(p, g)


GPU = Check("gpu", "gpu", "nvidia-smi --query-gpu=… --format=csv (older drivers: their field names)",
            "lost/unreachable GPUs, GPU count, persistence, MIG, temperature, uncorrected ECC, row remapping, "
            "clock slowdowns", lambda p: {"query": nvidia_smi.query_argv()}, None, judge_gpu, run=query_with_fallbacks)


# --- xid: the kernel log ---------------------------------------------------------------------

def _judge_xid(p: Probe, e: dmesg.XidEvent, now_up: float | None) -> None:
    window = p.lim["xid_window_s"]
    gi = p.facts.get("gpu_by_pci", {}).get(e.bus_device) if e.bus_device else None
    who = f"GPU {gi}" if gi is not None else f"GPU at PCI {e.pci}"  # (a lost GPU has no row to name it)
    age = now_up - e.stamp_s if e.stamp_s is not None and now_up is not None else None
    old = age is not None and age > window
    past = f", {ago(age)} ago (older than xid_window_s, {span(window)}: history)" if age is not None and old else ""
    p.add("critical" if e.xid in XID_CRITICAL and not old else "warning",
          f"{who}: XID {e.xid} ({XID_MEANING.get(e.xid, 'see the NVIDIA Xid catalogue')})"
          + (f" at PCI {e.pci}" if gi is not None else "") + past,
          "gpu.xid", component=f"gpu{gi}" if gi is not None else e.pci, value=e.xid,
          limit=window if old else None, unit="s" if old else None)


def judge_xid(p: Probe, data: dict) -> None:
    """Each XID line; one older than ``xid_window_s`` (its dmesg stamp against /proc/uptime) is history."""
    for e in data.get("dmesg", []):
        _judge_xid(p, e, data.get("uptime"))


XID = Check("xid", "gpu", "dmesg --level=err,warn; cat /proc/uptime",
            "NVIDIA XIDs in the kernel log (48, 64, 74, 79, 95 critical within xid_window_s; older ones history)",
            lambda p: {"dmesg": dmesg.xid_argv(), "uptime": dmesg.uptime_argv()},
            {"dmesg": dmesg.parse_xids, "uptime": dmesg.parse_uptime}, judge_xid)


# --- nvlink ------------------------------------------------------------------------------------

def judge_nvlink(p: Probe, data: dict) -> None:
    nv = data.get("nvlink")
    if nv is None or nv.unsupported:  # (no NVLink at all, or MIG: nothing to judge)
        return
    for g, links in nv.gpus.items():
        down = sorted(k for k, v in links.items() if v is None)
        if down:  # an inactive link: NVLink all-to-all and TP traffic inside the server slow down
            p.add("warning", f"GPU {g}: NVLink {', '.join(map(str, down))} inactive ({len(links) - len(down)} of "
                             f"{len(links)} up)", "gpu.nvlink_inactive", component=f"gpu{g}", value=down, limit=len(links))


NVLINK = Check("nvlink", "gpu", "nvidia-smi nvlink -s", "inactive NVLink links per GPU",
               lambda p: {"nvlink": nvidia_smi.nvlink_argv()}, nvidia_smi.parse_nvlink_status, judge_nvlink)


# --- dcgm: DCGM's quick diagnostic (opt-in) ---------------------------------------------------

DCGM_LEVEL = 1  # -r 1: deployment checks, seconds; -r 2 (minutes) and -r 3 (~30 min) belong to maintenance windows


def judge_dcgm(p: Probe, data: dict) -> None:
    diag = data.get("diag")
    if diag is None:
        return
    for test in diag.failed:
        why = getattr(diag, "warnings", {}).get(test.split(" (GPU ")[0], [])  # DCGM's own words, first one
        p.add("critical", f"DCGM diagnostic (dcgmi diag -r {DCGM_LEVEL}): {test} failed"
              + (f": {why[0][:200]}" if why else ""), "gpu.dcgm_diag_failed", component=test)


DCGM = Check("dcgm", "gpu", f"dcgmi diag -r {DCGM_LEVEL}", "DCGM's deployment diagnostic: every failed test (critical)",
             lambda p: {"diag": ["dcgmi", "diag", "-r", str(DCGM_LEVEL)]}, dcgmi.parse_diag, judge_dcgm, default=False)
