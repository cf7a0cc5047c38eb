"""Pre-flight health sweep over SSH: GPUs (nvidia-smi query CSV) and NIC links (ip -j link).

Thresholds are declared once in :data:`THRESHOLDS` (A100 datasheet class: slowdown near
85 °C; any uncorrected volatile ECC error is critical). Row remapping (NVIDIA's A100 memory
error management): a pending remap needs a GPU reset (warning), a remap failure is an RMA
criterion (critical). Clocks: an active HW/SW slowdown reason, or an SM clock far below its
maximum on a GPU that is not idle, is a warning. ``[N/A]`` readings are never judged.
"""

from __future__ import annotations

import math

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mfctl.errors import ParseError
from mfctl.hosts import iproute, nvidia_smi

XID_WINDOW_MAX_S = 10 * 365 * 86400.0  # xid_window_s: "any XID since boot" is a window longer than any uptime

#: Every threshold of the health sweep, in one table (override with ``mfctl health --threshold name=value``).
THRESHOLDS = {
    "gpu_temp_warn_c": 80.0,  # A100 slowdown begins near 85 °C (datasheet class)
    "gpu_temp_crit_c": 87.0,
    "wrong_priority_share": 0.01,  # RoCE bytes outside the lossless priority, as a share of all bytes
    "nic_phy_errors_max": 0.0,  # physical-layer error frames (CRC, symbol, length) a NIC may gain between sweeps
    "nic_drops_max": 0.0,  # frames dropped for lack of buffers (discards, out of buffer) between sweeps
    "nic_error_window_s": 3600.0,  # NIC error counters: what they gained over (at least) this window, from earlier sweeps
    "xid_window_s": 86400.0,  # a kernel-log XID older than this is history (a warning), not a present fault
    "roce_priority": 3.0,
    "sm_clock_min_share": 0.5,  # SM clock below this share of clocks.max.sm on a busy GPU, with no reason given
}


def parse_overrides(specs: list[str] | None) -> dict[str, float]:
    """``--threshold NAME=VALUE`` options (``mfctl health``, ``mfctl run``) as overrides, checked
    alone and together (:func:`thresholds`). Raises UsageError (exit 2) naming the option."""
    from mfctl.errors import UsageError

    overrides = {}
    for t in specs or []:
        k, eq, v = t.partition("=")
        if not eq or " " in v.strip():
            raise UsageError(f"--threshold {t!r}: expected NAME=NUMBER, one per --threshold (repeat the option)")
        if k not in THRESHOLDS:
            raise UsageError(f"--threshold {t!r}: expected name=number with name one of {', '.join(THRESHOLDS)}")
        try:
            overrides[k] = float(v)
        except ValueError:
            raise UsageError(f"--threshold {t!r}: expected a number") from None
    try:
        thresholds(overrides)  # each value, and the pairs that must agree (warning below critical)
    except ValueError as e:
        raise UsageError(f"--threshold {e}") from None
    return overrides


def thresholds(overrides: dict[str, float] | None = None) -> dict[str, float]:
    """The declared thresholds with ``overrides`` applied; unknown names raise KeyError, a value
    that is not finite, a ``*_share`` outside 0..1, a count below 0, a RoCE priority that is not
    0..7, or a warning temperature at or above the critical one raises ValueError."""
    import math

    out, given = dict(THRESHOLDS), dict(overrides or {})
    for k, v in given.items():
        if k not in out:
            raise KeyError(k)
        v = float(v) + 0.0  # (-0 is 0)
        if not math.isfinite(v):
            raise ValueError(f"{k}={v}: expected a finite number")
        if k.endswith("_share") and not 0 <= v <= 1:
            raise ValueError(f"{k}={v:g}: expected a share from 0 to 1")
        if k.endswith("_max") and v < 0:
            raise ValueError(f"{k}={v:g}: expected a count of 0 or more")
        if k == "xid_window_s" and not 0 < v <= XID_WINDOW_MAX_S:
            raise ValueError(f"{k}={v:g}: expected a duration above 0 s and at most {XID_WINDOW_MAX_S:g} s (10 years: "
                             "every XID since boot is then a present fault)")
        if k.endswith("_window_s") and k != "xid_window_s" and not 0 < v <= KEEP_READINGS_S:
            raise ValueError(f"{k}={v:g}: expected a duration above 0 s and at most {KEEP_READINGS_S:g} s (a week"
                             f"{': the readings are kept that long' if k.startswith('nic_') else ''})")
        if k == "roce_priority" and (v != int(v) or not 0 <= v <= 7):
            raise ValueError(f"{k}={v:g}: expected an 802.1p priority from 0 to 7")
        out[k] = v
    w, c = out["gpu_temp_warn_c"], out["gpu_temp_crit_c"]
    if w >= c:  # blame the value that was given (both given: the warning)
        if "gpu_temp_crit_c" in given and "gpu_temp_warn_c" not in given:
            raise ValueError(f"gpu_temp_crit_c={c:g}: expected above gpu_temp_warn_c ({w:g}, the default)")
        raise ValueError(f"gpu_temp_warn_c={w:g}: expected below gpu_temp_crit_c "
                         f"({c:g}{'' if 'gpu_temp_crit_c' in given else ', the default'})")
    return out


@dataclass
class Finding:
    """One judgement on one target. ``code`` is stable for machines (``gpu.xid``,
    ``optics.rx_power_low``, …: the list is in docs/health.md); ``component`` names the part
    (``gpu3``, ``ens1f0np0``, ``nic1``, ``mlx5_1/1``, ``port7``); ``value`` is what was read and
    ``limit`` what it was judged against, in ``unit``. The message says all of it for people."""

    host: str
    severity: str  # warning | critical
    check: str  # ssh | gpu | nic | rdma | optics | roce | ocs (the JUnit test case)
    message: str
    code: str = ""
    component: str | None = None
    value: Any = None
    limit: Any = None
    unit: str | None = None

    def to_dict(self) -> dict:
        return self.__dict__.copy()

    @property
    def shared_message(self) -> str:
        """The message as hosts that fail the same way share it, for folding them into one line:
        an unreachable host's own ``address:port`` (its ``value``) reads ``<address>:<port>``."""
        from mfctl.transport.ssh import without_endpoint

        if self.code != "ssh.unreachable" or not isinstance(self.value, str):
            return self.message
        return without_endpoint(self.message, self.value)


@dataclass
class HostHealth:
    host: str
    gpus: int = 0
    links_up: list[str] = field(default_factory=list)
    links_down: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    elapsed_s: float = 0.0
    reachable: bool = True
    kind: str = "host"  # host | ocs
    gpu_by_pci: dict[tuple[str, str], int] = field(default_factory=dict)  # (bus, device) → GPU index
    nic_counters: dict[str, dict] = field(default_factory=dict)  # NIC → {"t": epoch s, "counters": {name: value}}

    @property
    def worst(self) -> str:
        sev = [f.severity for f in self.findings]
        return "critical" if "critical" in sev else ("warning" if "warning" in sev else "ok")

    def to_dict(self) -> dict:
        return {"host": self.host, "status": self.worst, "gpus": self.gpus, "links_up": self.links_up,
                "links_down": self.links_down, "reachable": self.reachable, "findings": [f.to_dict() for f in self.findings],
                "elapsed_s": round(self.elapsed_s, 4)}


def _ago(seconds: float) -> str:
    """``45 s``, ``12 min``, ``5 h``, ``3 d`` (whole units, rounded down; a second short of a unit is
    the unit: /proc/uptime has two decimals, dmesg six)."""
    seconds += 1.0
    for unit, n in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= n:
            return f"{int(seconds // n)} {unit}"
    return f"{int(seconds - 1.0)} s"


def _span(seconds: float) -> str:
    """A configured duration as given: ``1 d``, ``90 min``, ``5400.5 s`` (the largest unit that divides it)."""
    for unit, n in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= n and seconds % n == 0:
            return f"{int(seconds // n)} {unit}"
    return f"{seconds:g} s"


def _indexes(ix: list[int]) -> str:
    """GPU indexes for a message: ``0-7`` when contiguous, else ``0, 3, 5``."""
    if len(ix) > 1 and ix == list(range(ix[0], ix[-1] + 1)):
        return f"{ix[0]}-{ix[-1]}"
    return ", ".join(map(str, ix))


def check_host(inv_host, gpu_res, link_res, limits: dict[str, float] | None = None) -> HostHealth:
    """Judge one host from its two command results (parsers never run commands); ``limits``
    are :func:`thresholds` overrides."""
    lim = thresholds(limits)
    hh = HostHealth(inv_host.name, elapsed_s=max(gpu_res.elapsed_s, link_res.elapsed_s),
                    reachable=not (gpu_res.error and link_res.error))
    def add(sev, chk, msg, code, **kw):
        hh.findings.append(Finding(inv_host.name, sev, chk, msg, code, **kw))

    if gpu_res.error and link_res.error:
        add("critical", "ssh", gpu_res.error, "ssh.unreachable", value=gpu_res.endpoint or None)  # (see shared_message)
        return hh
    # GPUs nvidia-smi cannot reach (fallen off the bus: exit 15) are findings; the others are still read
    unreachable = [] if gpu_res.error else list(dict.fromkeys(  # (the line may be on both streams: once)
        nvidia_smi.unreachable_gpus(gpu_res.stdout + "\n" + gpu_res.stderr)))
    for bus, why in unreachable:
        dom, b, dev = bus.lower().split(":")
        pci = f"{dom[-4:]}:{b}:{dev.split('.')[0]}"  # as the kernel log's XID lines name it: 0000:4e:00
        lost = "lost" in why.lower()
        add("critical", "gpu", f"GPU at PCI {pci} is lost (fallen off the bus: unreachable until a reboot)" if lost
            else f"GPU at PCI {pci} cannot be reached (nvidia-smi: {why})", "gpu.lost" if lost else "gpu.unreachable",
            component=pci, value=why)
    if not gpu_res.ok and not unreachable:
        add("critical", "gpu", gpu_res.error or f"nvidia-smi exited {gpu_res.rc}: {gpu_res.stderr.strip()[:200]}",
            "gpu.query_failed", value=gpu_res.rc)
    elif unreachable and not any(ln.strip() and not nvidia_smi.unreachable_gpus(ln) for ln in gpu_res.stdout.splitlines()):
        if len(unreachable) < inv_host.gpus.count:  # nothing but the unreachable ones: the others are not known
            add("critical", "gpu", f"nvidia-smi gave no data for the other {inv_host.gpus.count - len(unreachable)} GPUs "
                                   f"(exit {gpu_res.rc})", "gpu.query_failed", value=gpu_res.rc)
    else:
        try:
            rows = nvidia_smi.parse_query_csv(gpu_res.stdout)
            gpus = [nvidia_smi.GPUStatus.from_row(r) for r in rows]
        except ParseError as e:
            add("critical", "gpu", str(e), "gpu.unparsable")
            rows, gpus = [], []
        for r in rows:  # "00000000:4E:00.0" → ("4e", "00"): kernel-log XIDs name GPUs by PCI address
            parts = str(r.get("pci.bus_id") or "").lower().split(":")
            if len(parts) == 3:
                hh.gpu_by_pci[(parts[1], parts[2].split(".")[0])] = int(r["index"])
        hh.gpus = len(gpus)
        off = [g.index for g in gpus if g.persistence is False]
        if off:
            add("warning", "gpu", f"persistence mode is off on GPU {_indexes(off)}", "gpu.persistence_off", value=off)
        mig = [g.index for g in gpus if g.mig]
        if mig:  # MoE training takes whole GPUs; a MIG-partitioned GPU shows up as slices
            add("warning", "gpu", f"MIG mode is enabled on GPU {_indexes(mig)} (training needs whole GPUs: "
                                  "nvidia-smi -mig 0 and a GPU reset)", "gpu.mig_enabled", value=mig)
        if gpus and len(gpus) + len(unreachable) != inv_host.gpus.count:
            add("critical", "gpu", f"{len(gpus)} GPUs visible{f' (and {len(unreachable)} unreachable)' if unreachable else ''}"
                                   f", inventory says {inv_host.gpus.count}", "gpu.count",
                value=len(gpus), limit=inv_host.gpus.count)
        for g in gpus:
            gpu = f"gpu{g.index}"
            for sev, t_lim in (("critical", lim["gpu_temp_crit_c"]), ("warning", lim["gpu_temp_warn_c"])):
                if g.temperature_c is not None and g.temperature_c >= t_lim:
                    add(sev, "gpu", f"GPU {g.index} at {g.temperature_c} °C", "gpu.temperature", component=gpu,
                        value=g.temperature_c, limit=t_lim, unit="C")
                    break
            if g.ecc_uncorrected:
                add("critical", "gpu", f"GPU {g.index} has {g.ecc_uncorrected} uncorrected ECC errors", "gpu.ecc_uncorrected",
                    component=gpu, value=g.ecc_uncorrected, limit=0)
            if g.remap_failure:
                add("critical", "gpu", f"GPU {g.index}: row remapping failed (memory repair exhausted: RMA)",
                    "gpu.remap_failed", component=gpu)
            elif g.remap_pending:
                add("warning", "gpu", f"GPU {g.index}: row remap pending (reset the GPU to apply it)", "gpu.remap_pending",
                    component=gpu)
            clk = "" if g.sm_clock_mhz is None else f" (SM {g.sm_clock_mhz:g}" + (
                f" of {g.sm_clock_max_mhz:g} MHz)" if g.sm_clock_max_mhz else " MHz)")
            if g.clock_events:
                add("warning", "gpu", f"GPU {g.index} clocks slowed by {', '.join(g.clock_events)}{clk}", "gpu.clocks_slowed",
                    component=gpu, value=list(g.clock_events))
            elif (g.idle is False and g.sm_clock_mhz is not None and g.sm_clock_max_mhz
                  and g.sm_clock_mhz < lim["sm_clock_min_share"] * g.sm_clock_max_mhz):
                add("warning", "gpu", f"GPU {g.index} SM clock far below its maximum{clk}", "gpu.sm_clock_low", component=gpu,
                    value=g.sm_clock_mhz, limit=round(lim["sm_clock_min_share"] * g.sm_clock_max_mhz, 1), unit="MHz")

    if not link_res.ok:
        add("critical", "nic", link_res.error or f"ip exited {link_res.rc}: {link_res.stderr.strip()[:200]}",
            "nic.query_failed", value=link_res.rc)
    else:
        try:
            links = iproute.parse_links(link_res.stdout)
        except ParseError as e:
            add("critical", "nic", str(e), "nic.unparsable")
            links = {}
        for nic in inv_host.nics:
            for lane in nic.lanes:
                l = links.get(lane.netdev)
                if l is None:
                    if links:
                        add("critical", "nic", f"{nic.name} lane {lane.index}: netdev {lane.netdev} not present",
                            "nic.netdev_missing", component=lane.netdev)
                    continue
                (hh.links_up if l.up else hh.links_down).append(lane.netdev)
                if nic.role == "eps" and not l.up:
                    add("critical", "nic", f"EPS link {lane.netdev} ({nic.name}) is {l.operstate}", "nic.eps_link_down",
                        component=lane.netdev, value=l.operstate)
    return hh


def sweep(pool, inv, hosts: list[str] | None = None, limits: dict[str, float] | None = None) -> list[HostHealth]:
    """Run the sweep on ``hosts`` (default all) in parallel over the pool (``limits``: threshold overrides)."""
    names = hosts or [h.name for h in inv.hosts]
    gpu = pool.run_many(names, lambda h: nvidia_smi.query_argv())
    for fields in nvidia_smi.QUERY_FALLBACKS[1:]:  # an older driver: ask again with the fields it knows
        older = [i for i, r in enumerate(gpu) if r.rc not in (0, None) and nvidia_smi.unknown_field(r.stdout + r.stderr)]
        for i, r in zip(older, pool.run_many([names[i] for i in older], lambda h: nvidia_smi.query_argv(fields))):
            gpu[i] = r
    link = pool.run_many(names, lambda h: iproute.link_argv())
    return [check_host(inv.host(n), g, l, limits) for n, g, l in zip(names, gpu, link)]


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


#: How long NIC readings are kept (any ``nic_error_window_s`` up to this can be judged), all of
#: those younger than ``THIN_AFTER_S``; older ones are thinned to one per time cell of 1/8 of
#: their age's power-of-two band (~8 per doubling of age: ~110 per NIC for a week, whatever the
#: sweep rate). Cells are aligned, so a kept reading stays kept as it ages.
KEEP_READINGS_S, THIN_AFTER_S = 7 * 24 * 3600.0, 60.0


def _history(baseline: dict | None, host: str, nic: str) -> list[dict]:
    """One NIC's earlier readings from the readings file, oldest first; only well-formed ones
    (``{"t": epoch s, "counters": {name: int}, "total": {name: int}}``, ``total`` optional): a
    damaged file is no history, never a crash."""
    import math

    def ints(d):
        return isinstance(d, dict) and all(isinstance(v, int) and not isinstance(v, bool) for v in d.values())

    r = (baseline or {}).get(host)
    r = r.get(nic) if isinstance(r, dict) else None
    r = [r] if isinstance(r, dict) else r if isinstance(r, list) else []
    ok = [x for x in r if isinstance(x, dict) and isinstance(x.get("t"), (int, float)) and not isinstance(x.get("t"), bool)
          and math.isfinite(x["t"]) and ints(x.get("counters")) and ints(x.get("total", {}))]
    return sorted(ok, key=lambda x: x["t"])


def reading(stats, history: list[dict], now: float) -> dict:
    """This sweep's reading of a NIC: the raw counters, and ``total`` — each counter made
    monotonic across driver reloads (a value below the previous one counts from zero, as
    Prometheus' ``increase()`` does), so that the errors between any two readings are the
    difference of their totals even when readings in between are thinned away."""
    from mfctl.hosts import ethtool

    raw = {k: stats.counters[k] for k in ethtool.PHY_ERRORS + ethtool.DROPS if k in stats.counters}
    total = {}
    for k, v in raw.items():
        last = next((x for x in reversed(history) if k in x["counters"]), None)  # a counter may skip a reading
        if last is None:
            total[k] = v
        else:
            before = last["counters"][k]
            total[k] = _total(last, k) + (v - before if v >= before else v)
    return {"t": now, "counters": raw, "total": total}


def _total(r: dict, k: str) -> int:
    """Reading ``r``'s reset-proof total of counter ``k`` (its raw value when it has none)."""
    return r.get("total", {}).get(k, r["counters"].get(k, 0))


def reference(history: list[dict], now: float, window_s: float) -> dict | None:
    """The reading to judge a NIC's error counters against: the newest one at least ``window_s``
    old, so that errors stay a finding for a whole window however often someone looks (like
    Prometheus' ``increase()`` over a range); None while no reading is that old."""
    old = [x for x in history if now - x["t"] >= window_s]
    return old[-1] if old else None


def new_errors(now_reading: dict, names: tuple[str, ...], ref: dict | None, first: dict | None = None
               ) -> tuple[dict[str, int], str, bool]:
    """The error counters of ``names`` a NIC gained since ``ref`` (:func:`reference`), from the
    two readings' totals (:func:`reading`); the period in words; True for increments, False for
    totals. Without a reading a window old: every error known — the counters now, or, given the
    history's ``first`` reading, what it showed plus all gained since, across driver reloads — as
    errors of unknown age are judged, not hidden."""
    raw, total = now_reading["counters"], now_reading["total"]
    if ref is None:
        if first is None:
            return {n: raw[n] for n in names if raw.get(n, 0) > 0}, "since the driver loaded", False
        # everything known: what the first reading showed, and all the counters gained since (across reloads)
        seen = {n: first["counters"].get(n, 0) + total[n] - _total(first, n) if n in first["counters"] else total[n]
                for n in names if n in total}
        reloaded = any(seen[n] != raw[n] for n in seen)
        since = (f"since the driver loaded{' (and before its reload)' if reloaded else ''} (readings for "
                 f"{_duration(now_reading['t'] - first['t'])} only, less than a window)")
        return {n: v for n, v in seen.items() if v > 0}, since, False
    grown = {n: total[n] - _total(ref, n) for n in names if n in total and total[n] > _total(ref, n)}
    return grown, f"in the last {_duration(now_reading['t'] - ref['t'])}", True


def remember(history: list[dict], new: dict) -> list[dict]:
    """``history`` with the reading ``new`` added, thinned (:data:`THIN_AFTER_S`): per time cell the
    earliest reading is kept, and the newest reading older than :data:`KEEP_READINGS_S`. Thinning
    only ever makes a reference older (at most ~1/4 of its age), so errors are never hidden before
    their window has passed."""
    import math

    now = new["t"]
    past = [x for x in history if x["t"] < now]
    expired = [x for x in past if now - x["t"] > KEEP_READINGS_S]
    kept, cells = [], set()
    for x in past:  # oldest first: the earliest reading of each cell wins
        age = now - x["t"]
        if age > KEEP_READINGS_S:
            continue
        if age >= THIN_AFTER_S:
            level = int(math.log2(age / THIN_AFTER_S))
            size = THIN_AFTER_S * 2 ** level / 8
            cell = (level, math.floor(x["t"] / size))
            if cell in cells:
                continue
            cells.add(cell)
        kept.append(x)
    return expired[-1:] + kept + [new]


def _duration(s: float) -> str:
    s = max(0.0, s)
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min" if s < 7200 else f"{s / 3600:.1f} h"


#: The DOM quantities of ``ethtool -m`` judged against the module's own thresholds (SFF-8636 /
#: CMIS): (name in the thresholds' keys, ModuleInfo field, unit, unit key, the flags' words).
DOM = (("temperature", "temperature_c", "C", "c", "Module temperature"), ("voltage", "voltage_v", "V", "v", "Module voltage"),
       ("tx_power", "tx_power_dbm", "dBm", "dbm", "Laser tx power"), ("rx_power", "rx_power_dbm", "dBm", "dbm", "Laser rx power"),
       ("bias", "bias_ma", "mA", "ma", "Laser bias current"))


def judge_module(mod) -> list[tuple]:
    """Findings for one transceiver (:class:`mfctl.hosts.ethtool.ModuleInfo`): every DOM reading
    (module temperature and voltage; per channel Tx power, Rx power, laser bias) against the
    module's own high/low alarm (critical) and warning thresholds, then the module's alarm and
    warning flags that no reading explains (a latched flag: the event has passed). A channel
    whose laser is off (bias 0 mA, no Tx power) is unused — the upper channels of a 4-lane
    module in an 8-lane CMIS cage — and not judged; an active channel with no Rx reading is
    dark: no light arrives (critical). Returns ``(severity, code, channel or None, value,
    limit, unit, message)`` tuples."""
    import re

    th, out, seen = mod.thresholds, [], set()
    unused = {ch for ch, b in mod.bias_ma.items() if (b or 0.0) == 0.0 and mod.tx_power_dbm.get(ch) is None}
    if unused and unused == set(mod.bias_ma):  # every laser off: nothing is sent (disabled, or a failed module)
        out.append(("critical", "optics.laser_off", None, sorted(unused), None, None,
                    "every laser is off (bias 0 mA, no Tx power): the module sends nothing"))
        unused = set()
        seen |= {("bias", ch, "low") for ch in mod.bias_ma} | {("tx_power", ch, "low") for ch in mod.bias_ma}
    for q, attr, unit, ukey, words in DOM:
        vals, shown = getattr(mod, attr), "°C" if unit == "C" else unit
        for ch, v in (vals.items() if isinstance(vals, dict) else [(None, vals)]):
            if ch in unused or (q, ch, "low") in seen:
                continue
            if v is None:
                if q == "rx_power":
                    out.append(("critical", "optics.rx_power_low", ch, None, th.get("rx_power_low_alarm_dbm"), unit,
                                "no Rx light (no power reading)"))
                    seen.add((q, ch, "low"))
                continue
            for level, sev in (("alarm", "critical"), ("warning", "warning")):
                hi, lo = th.get(f"{q}_high_{level}_{ukey}"), th.get(f"{q}_low_{level}_{ukey}")
                side, limit = ("high", hi) if hi is not None and v > hi else ("low", lo) if lo is not None and v < lo else (None, None)
                if side:
                    out.append((sev, f"optics.{q}_{side}", ch, v, limit, unit,
                                f"{words} {v:g} {shown} {'above' if side == 'high' else 'below'} the module's {level} threshold "
                                f"{limit:g} {shown}"))
                    seen.add((q, ch, side))
                    break
    flag = re.compile(r"^(?P<w>[A-Za-z ]+?) (?P<side>high|low) (?P<level>alarm|warning)(?: \(channel (?P<ch>\d+)\))?$")
    quantity = {words.lower(): q for q, _, _, _, words in DOM}
    for f in mod.flags_on:
        m = flag.match(f)
        q = quantity.get(m["w"].lower()) if m else None
        ch = int(m["ch"]) if m and m["ch"] else None
        if m and ((q, ch, m["side"]) in seen or ch in unused):
            continue
        out.append(("critical" if "alarm" in f else "warning", "optics.flag", ch, f, None, None, f"the module reports {f}"))
    return out


def full_sweep(pool, inv, hosts: list[str] | None = None, limits: dict[str, float] | None = None,
               ocs_state: dict | None = None, baseline: dict | None = None, since_boot: bool = False) -> list[HostHealth]:
    """The operator's health sweep (``mfctl health``): the preflight checks plus XID events,
    per-lane link speed, per-priority RoCE counters, transceiver DOM against each module's
    own thresholds, and (given ``ocs_state``) OCS alarms and dark connected ports.

    NIC error counters are judged by what they gained over the ``nic_error_window_s`` threshold,
    against the earlier sweeps' readings in ``baseline`` (by host and NIC, see :func:`load_baseline`
    and :func:`reference`); as totals since the driver loaded while no reading is a window old, or
    with ``since_boot``. Each result's ``nic_counters`` holds this sweep's readings (:func:`reading`)."""
    import re
    import time
    from concurrent.futures import ThreadPoolExecutor

    from mfctl.hosts import ethtool

    lim = thresholds(limits)
    now = time.time()
    base = {h.host: h for h in sweep(pool, inv, hosts, limits)}

    def deeper(name: str) -> HostHealth:
        hh = base[name]
        if not hh.reachable:
            return hh
        inv_host = inv.host(name)
        def add(sev, chk, msg, code, **kw):
            hh.findings.append(Finding(name, sev, chk, msg, code, **kw))

        def read(argv, parser, check):
            """Run and parse; None when the command failed or its output did not parse (a warning)."""
            r = pool.run(name, argv)
            if not r.ok:
                return None
            try:
                return parser(r.stdout)
            except ParseError as e:
                add("warning", check, str(e), f"{check}.unparsable", component=argv[0])
                return None

        r = pool.run(name, ["dmesg", "--level=err,warn"])
        if r.ok and "NVRM: Xid" in r.stdout:
            up = pool.run(name, ["cat", "/proc/uptime"])  # dmesg stamps are seconds since boot: how old each is
            try:
                now_up = float(up.stdout.split()[0]) if up.ok else None
            except (IndexError, ValueError):
                now_up = None
            if now_up is not None and not (math.isfinite(now_up) and now_up >= 0):
                now_up = None  # (inf, nan, negative: no age, so judged as new)
            for ln in r.stdout.splitlines():
                m = re.search(r"NVRM: Xid \(PCI:([0-9a-fA-F:.]+)\): (\d+)", ln)
                if m:
                    x, pci = int(m.group(2)), m.group(1).lower()
                    parts = pci.split(":")
                    gi = hh.gpu_by_pci.get((parts[-2], parts[-1].split(".")[0])) if len(parts) >= 3 else None
                    who = f"GPU {gi}" if gi is not None else f"GPU at PCI {pci}"  # (a lost GPU has no row to name it)
                    stamp = re.match(r"\s*\[\s*(\d+(?:\.\d+)?)\]", ln)  # no stamp (printk.time=0): age unknown
                    age = now_up - float(stamp[1]) if stamp and now_up is not None else None
                    old = age is not None and age > lim["xid_window_s"]
                    add("critical" if x in XID_CRITICAL and not old else "warning", "gpu",
                        f"{who}: XID {x} ({XID_MEANING.get(x, 'see the NVIDIA Xid catalogue')})"
                        + (f" at PCI {pci}" if gi is not None else "")
                        + (f", {_ago(age)} ago (older than xid_window_s, {_span(lim['xid_window_s'])}: history)" if old else ""),
                        "gpu.xid", component=f"gpu{gi}" if gi is not None else pci, value=x,
                        limit=lim["xid_window_s"] if old else None, unit="s" if old else None)
        nv = read(nvidia_smi.nvlink_argv(), nvidia_smi.parse_nvlink_status, "gpu")
        if nv is not None and not nv.unsupported:  # (no NVLink at all, or MIG: nothing to judge)
            down = {g: sorted(k for k, v in links.items() if v is None) for g, links in nv.gpus.items()}
            for g, ks in down.items():
                if ks:  # an inactive link: NVLink all-to-all and TP traffic inside the server slow down
                    add("warning", "gpu", f"GPU {g}: NVLink {', '.join(map(str, ks))} inactive "
                                          f"({len(nv.gpus[g]) - len(ks)} of {len(nv.gpus[g])} up)", "gpu.nvlink_inactive",
                        component=f"gpu{g}", value=ks, limit=len(nv.gpus[g]))
        from mfctl.hosts import rdma

        rep = read(["ibstat"], rdma.parse_ibstat, "rdma")
        if rep is not None:
            eps_devs = {n.rdma_device or f"mlx5_{i}" for i, n in enumerate(inv_host.nics) if n.role == "eps"}
            for p in rep.ports:
                if not p.active and p.device in eps_devs:
                    add("critical", "rdma", f"{p.device} port {p.port} is {p.state} ({p.physical_state}): the EPS RDMA path is down",
                        "rdma.port_down", component=f"{p.device}/{p.port}", value=p.state)
            for e in rep.errors:
                add("warning", "rdma", e, "rdma.unparsable", component="ibstat")
        for nic in inv_host.nics:
            for lane in nic.lanes:
                ls = read(ethtool.link_argv(lane.netdev), ethtool.parse_link, "nic")
                if ls is not None:
                    want = int(nic.lane_rate_gbps * 1000)
                    if ls.link_detected and ls.speed_mbps and ls.speed_mbps != want:
                        add("warning", "nic", f"{lane.netdev} runs at {ls.speed_mbps} Mb/s, expected {want}", "nic.speed",
                            component=lane.netdev, value=ls.speed_mbps, limit=want, unit="Mb/s")
                if lane.ocs_tx is not None and lane.netdev in hh.links_up:
                    mod = read(ethtool.module_argv(lane.netdev), ethtool.parse_module, "optics")
                    if mod is not None:
                        for sev, code, part, v, limit, unit, msg in judge_module(mod):
                            add(sev, "optics", f"{lane.netdev}{f' channel {part}' if part else ''}: {msg}", code,
                                component=f"{lane.netdev}/{part}" if part else lane.netdev, value=v, limit=limit, unit=unit)
            st = read(ethtool.stats_argv(nic.lanes[0].netdev), ethtool.parse_stats, "nic")
            if st is not None:
                hist = _history(baseline, name, nic.name)
                cur = reading(st, hist, now)
                for names, limit, what, code in ((ethtool.PHY_ERRORS, "nic_phy_errors_max", "physical-layer errors (a dirty "
                                                  "connector, a failing transceiver or fibre?)", "nic.phy_errors"),
                                                 (ethtool.DROPS, "nic_drops_max", "drops for lack of buffers (PFC/buffers?)",
                                                  "nic.drops")):
                    ref = None if since_boot else reference(hist, now, lim["nic_error_window_s"])
                    bad, since, grown = new_errors(cur, names, ref, None if since_boot or not hist else hist[0])
                    if sum(bad.values()) > lim[limit]:
                        add("warning", "nic", f"{nic.name}: {what} {since}: "
                            + ", ".join(f"{k}={'+' if grown else ''}{v}" for k, v in bad.items()),
                            code, component=nic.name, value=bad, limit=lim[limit])
                hh.nic_counters[nic.name] = cur
                pb = st.prio_bytes()
                total = sum(pb.values())
                roce = int(lim["roce_priority"])
                wrong = total - pb.get(roce, 0)
                if total and wrong / total > lim["wrong_priority_share"]:
                    top = max(pb, key=pb.get)
                    add("warning", "roce", f"{nic.name}: {100 * wrong / total:.0f}% of traffic on priorities other than "
                                           f"{roce} (most on prio {top}): PFC/DSCP not applied?", "roce.wrong_priority",
                        component=nic.name, value=round(wrong / total, 4), limit=lim["wrong_priority_share"])
        return hh

    names = list(base)
    with ThreadPoolExecutor(max_workers=min(pool.fanout, max(1, len(names)))) as ex:
        out = list(ex.map(deeper, names))
    if ocs_state is not None:
        hh = HostHealth(inv.ocs.name, reachable=ocs_state.get("error") is None, kind="ocs")
        if ocs_state.get("error"):
            hh.findings.append(Finding(inv.ocs.name, "critical", "ocs", ocs_state["error"], "ocs.unreachable"))
        for a in ocs_state.get("standing", []):
            m = re.match(r'^\s*"?([^:\s"]+):', str(a))  # TL1: AID:NTFCNCDE,CONDTYPE,... (the AID is the port)
            aid = m.group(1) if m else None
            if m:
                from mfctl.ocs.service import parse_alarm

                f = parse_alarm(str(a).strip().strip('"'))
                text = (f"{'port ' if aid.isdigit() else ''}{aid}: {f['severity']} {f['condition']}"
                        + (f" — {f['description']}" if f["description"] else ""))
            else:
                text = str(a)
            hh.findings.append(Finding(inv.ocs.name, "critical", "ocs", f"standing alarm {text}", "ocs.alarm",
                                       component=f"port{aid}" if aid and aid.isdigit() else aid, value=a))
        for p in ocs_state.get("dark_outputs", []):
            hh.findings.append(Finding(inv.ocs.name, "critical", "ocs", f"output port {p} is connected but dark", "ocs.dark_port",
                                       component=f"port{p}", value=p))
        out.append(hh)
    return out


def junit(results: list[HostHealth]) -> str:
    """JUnit XML: one test case per target and check; critical findings are failures."""
    import xml.etree.ElementTree as ET

    suite = ET.Element("testsuite", name="mfctl-health")
    n = fails = skipped = 0
    for hh in results:
        checks = ("ocs",) if hh.kind == "ocs" else ("ssh", "gpu", "nic", "rdma", "optics", "roce")
        for chk in checks:
            fs = [f for f in hh.findings if f.check == chk]
            if chk == "ssh" and not fs:
                continue
            tc = ET.SubElement(suite, "testcase", classname=hh.host, name=chk)
            n += 1
            if not hh.reachable and chk not in ("ssh", "ocs"):  # not checked is not passed
                ET.SubElement(tc, "skipped", message=f"{hh.host} was not reachable")
                skipped += 1
                continue
            crit = [f for f in fs if f.severity == "critical"]
            if crit:
                fails += 1
                ET.SubElement(tc, "failure", message=crit[0].message).text = "\n".join(f.message for f in crit)
            warn = [f for f in fs if f.severity == "warning"]
            if warn:
                ET.SubElement(tc, "system-out").text = "\n".join("warning: " + f.message for f in warn)
    suite.set("tests", str(n))
    suite.set("failures", str(fails))
    suite.set("skipped", str(skipped))
    return ET.tostring(suite, encoding="unicode")


def baseline_path(inv) -> Path:
    """Where the NIC error counters' readings of this inventory are kept (the state dir)."""
    from mfctl import settings

    return settings.state_path() / "health" / f"{inv.name}-nic-counters.json"


def load_baseline(inv) -> dict:
    """The previous sweep's NIC counters by host (``{}`` when there is none or it is unreadable)."""
    import json

    p = baseline_path(inv)
    try:
        if not p.is_file() or p.stat().st_size > 64 << 20:  # a FIFO or a device would block or never end
            return {}
        data = json.loads(p.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def save_baseline(inv, results: list[HostHealth], before: dict) -> None:
    """Add this sweep's NIC readings to each NIC's history (:func:`remember`: a week, thinned;
    whatever window the next sweep asks for); hosts not swept keep theirs. Written atomically."""
    import json
    import os
    import tempfile

    data = {h: v for h, v in before.items() if isinstance(v, dict)}
    for hh in results:
        if hh.nic_counters:
            data[hh.host] = {**data.get(hh.host, {}), **{nic: remember(_history(before, hh.host, nic), r)
                                                         for nic, r in hh.nic_counters.items()}}
    p = baseline_path(inv)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=".tmp-")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
    os.replace(tmp, p)
