"""Fault injection into a mock testbed from the command line (``mfctl mock up --inject SPEC``).

``SPEC`` is ``TARGET:PART=FAULT`` (after DCGM's ``--inject`` and the research notes' knobs):

==========================  ==============================================================
``gpu02:gpu3=xid79``         an NVRM XID event (any number) in gpu02's kernel log for GPU 3
                             (79: the GPU is also lost — nvidia-smi cannot reach it, exit 15);
                             ``xid48:3d`` logged 3 days ago (``s``, ``min``, ``h``, ``d``; ≤ 9 d)
``gpu02:gpu1=remap-pending`` a row remap waiting for a GPU reset (query CSV, ``-q``, XML)
``gpu02:gpu5=remap-failure`` row remapping failed
``gpu01:gpu0=ecc:4``         4 volatile uncorrectable ECC errors
``gpu01:gpu2=slowdown``      an active clock slowdown (``slowdown:hw_power_brake_slowdown``…)
``gpu01:gpu4=sm-clock:420``  the SM clock held at 420 MHz without a reason
``gpu01:gpu0=nvlink-down:3`` NVLink 3 of GPU 0 inactive
``gpu01:nic0=crc:120``       120 CRC errors on gpu01's first NIC (also ``symbol:N``, ``discards:N``)
``gpu03:ssh=refuse``         the host's SSH server closes every connection
``gpu02:linkup=slow:30``     gpu02's optical lanes come up 30 testbed s later than modelled after
                             every change of their circuits (a slow transceiver); ``linkup=fail``:
                             they never come up (a dead one)
``gpu02:nvidia-smi=hang``    every ``nvidia-smi`` on gpu02 never answers (until the client gives up);
                             ``hang:3`` only its 3rd call (any program: ``gpu02:ip=hang:5``)
``ocs:port7=deny``           the OCS denies cross-connects touching port 7 (``DENY SROF``)
``ocs:patch2=deny``          the OCS denies its 2nd ``ENT-PATCH`` (``DENY SROF``, nothing made), once;
                             ``deny:3`` that one and the 2 after it (the initial topology is the 1st)
``ocs/ocs-b:patch2=deny``    the same on the OCS the inventory names ``ocs-b`` (``ocs/NAME:``, any
                             OCS fault); plain ``ocs:`` is the only OCS, or the first of several
``mock:start=slow:5``        the mock's start takes 5 s more, its hosts and OCS already listening
                             (a loaded machine: what a Ctrl-C during ``mfctl mock up`` meets)
==========================  ==============================================================

The grammar: ``TARGET:PART[N]=FAULT[:ARG]`` with TARGET a host, ``mock``, ``ocs`` or ``ocs/NAME``
(NAME an OCS of the inventory: letters, digits, ``_ . -``), PART a lower-case word and N its
number, FAULT a lower-case word (``xid`` may end in digits), ARG letters, digits, ``_ . -``.
Raises ValueError with the spec and what was expected.
"""

from __future__ import annotations

import re
import time

from mfctl.mock.gputools import NVLINKS, SLOWDOWNS, SM_MAX_MHZ

_SPEC = re.compile(r"^(?P<target>[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)?):(?P<part>[a-z][a-z0-9_-]*?)(?P<index>\d*)"
                   r"=(?P<fault>[a-z-]+\d*)(?::(?P<arg>[\w.-]+))?$")
GPU_FAULTS = ("xidN", "remap-pending", "remap-failure", "ecc:N", "slowdown[:REASON]", "sm-clock:MHZ", "nvlink-down:LINK")


def parse(spec: str) -> tuple[str, str, int | None, str, str | None]:
    """``(target, part, index, fault, arg)`` of a spec; ValueError when it is malformed."""
    m = _SPEC.match(spec.strip())
    if not m:
        raise ValueError(f"bad fault spec {spec!r}: expected TARGET:PART=FAULT, e.g. gpu02:gpu3=xid79, "
                         "gpu03:ssh=refuse, ocs:port7=deny, ocs/ocs-b:patch2=deny")
    idx = int(m["index"]) if m["index"] else None
    return m["target"], m["part"], idx, m["fault"], m["arg"]


def apply(testbed, spec: str) -> str:
    """Apply one spec to a running :class:`~mfctl.mock.testbed.MockTestbed`; returns what was
    done (for the mock's log). Raises ValueError naming the spec and the problem."""
    target, part, idx, fault, arg = parse(spec)

    def number(v, lo: int, hi: int, what: str) -> int:
        if v is None or not str(v).isdigit() or not lo <= int(v) <= hi:
            raise ValueError(f"bad fault spec {spec!r}: {what} must be an integer from {lo} to {hi}")
        return int(v)

    if target == "mock":
        if part == "start" and idx is None and fault == "slow":
            seconds = number(arg, 1, 600, "the seconds")
            time.sleep(seconds)  # (a signal meanwhile abandons the start: mfctl.mock.testbed.serve)
            return f"the start took {seconds} s more"
        raise ValueError(f"bad fault spec {spec!r}: the mock takes start=slow:SECONDS")
    if target == "ocs" or target.startswith("ocs/"):
        name, emu = _ocs(testbed, spec, target.partition("/")[2] or None)
        ports = emu.inputs + emu.outputs
        if part == "port" and idx is not None and fault == "deny":
            emu.faults.deny_ports.add(number(idx, 1, ports, "the OCS port"))
            return f"OCS {name} denies cross-connects on port {idx}"
        if part == "patch" and idx is not None and fault == "deny":
            return f"OCS {name}: " + _deny_patches(emu, number(idx, 1, 10**6, "the ENT-PATCH number"),
                                                   number(arg, 1, 10**6, "the count") if arg is not None else 1)
        raise ValueError(f"bad fault spec {spec!r}: the OCS takes portN=deny or patchN=deny[:COUNT]")
    if "/" in target:
        raise ValueError(f"bad fault spec {spec!r}: only an OCS is named so (ocs/NAME:...); a host is HOST:...")
    host = testbed.hosts.get(target)
    if host is None:
        raise ValueError(f"bad fault spec {spec!r}: no host {target!r} in the mock (hosts: {', '.join(testbed.hosts)})")
    if part == "linkup" and idx is None and fault in ("slow", "fail"):
        if fault == "fail":
            host.linkup_extra_s = None
            return f"{target}: optical lanes never come up"
        host.linkup_extra_s = float(number(arg, 1, 86400, "the testbed seconds"))
        return f"{target}: optical lanes come up {arg} s late"
    if fault == "hang" and idx is None and part not in ("gpu", "nic"):  # a program that never answers
        host.hangs[part] = number(arg, 1, 10**9, "the call that hangs") if arg is not None else None
        return f"{target}: {part} hangs" + (f" on its call {arg}" if arg is not None else "")
    if part == "ssh" and fault == "refuse":
        testbed.servers[target].refuse = True
        return f"{target}: SSH refuses connections"
    if part == "nic":
        nics = list(host.config.nics.values()) if host.config is not None else []
        counter = {"crc": "rx_crc_errors_phy", "symbol": "rx_symbol_err_phy", "discards": "rx_discards_phy"}.get(fault)
        if idx is None or not 0 <= idx < len(nics) or counter is None:
            raise ValueError(f"bad fault spec {spec!r}: expected nicN (0..{len(nics) - 1})=crc|symbol|discards:COUNT")
        nics[idx].errors[counter] = number(arg, 1, 10**12, "the count")
        return f"{target}: {nics[idx].name} {counter}={arg}"
    if part != "gpu" or idx is None or not 0 <= idx < host.gpus:
        raise ValueError(f"bad fault spec {spec!r}: expected gpuN (0..{host.gpus - 1}) or ssh=refuse on {target}")
    f = host.faults
    if m := re.fullmatch(r"xid(\d+)", fault):
        ago = 0.0
        if arg is not None:  # an old event, still in the kernel log
            a = re.fullmatch(r"(\d+)(s|min|h|d)", arg)
            ago = int(a[1]) * {"s": 1, "min": 60, "h": 3600, "d": 86400}[a[2]] if a else -1
            if not 0 <= ago <= 9 * 86400:
                raise ValueError(f"bad fault spec {spec!r}: an XID's age is a whole number of s, min, h or d, "
                                 "at most 9 d (the mock's uptime), e.g. xid48:3d")
        return f"{target}: {f.xid(idx, number(m[1], 1, 999, 'the XID'), ago_s=ago)}"
    if fault == "remap-pending":
        f.remap_pending.add(idx)
    elif fault == "remap-failure":
        f.remap_failure.add(idx)
    elif fault == "ecc":
        f.ecc_uncorrected[idx] = number(arg or 1, 1, 10**9, "the ECC error count")
    elif fault == "slowdown":
        reason = arg or "hw_thermal_slowdown"
        if reason not in SLOWDOWNS:
            raise ValueError(f"bad fault spec {spec!r}: unknown slowdown {reason!r} (one of {', '.join(SLOWDOWNS)})")
        f.slowdown[idx] = reason
    elif fault == "sm-clock":
        f.sm_clock_mhz[idx] = number(arg, 0, SM_MAX_MHZ, "the SM clock (MHz)")
    elif fault == "nvlink-down":
        f.nvlink_down.add((idx, number(arg, 0, NVLINKS - 1, "the NVLink")))
    else:
        raise ValueError(f"bad fault spec {spec!r}: unknown GPU fault {fault!r} (one of {', '.join(GPU_FAULTS)})")
    return f"{target}: GPU {idx} {fault}{f':{arg}' if arg else ''}"


def _ocs(testbed, spec: str, name: str | None):
    """``(name, emulator)`` of the mock's OCS ``name`` (None: the first, the only one of most
    inventories). ValueError naming the OCSes the mock has when there is none of that name."""
    ocses = getattr(testbed, "ocses", None) or {}
    if name is None:
        if ocses:
            first = next(iter(ocses))
            return first, ocses[first].emulator
        return "ocs", testbed.ocs
    if name not in ocses:
        raise ValueError(f"bad fault spec {spec!r}: no OCS {name!r} in the mock (OCSes: {', '.join(ocses) or 'none'})")
    return name, ocses[name].emulator


def _deny_patches(emu, first: int, count: int) -> str:
    """Make the emulator deny its ENT-PATCH number ``first`` .. ``first + count - 1`` (1-based,
    counted over every session) with ``DENY SROF`` before it makes anything; the others as usual."""
    emu.faults.deny_patch_numbers |= set(range(first, first + count))
    last = first + count - 1
    return f"OCS denies ENT-PATCH {first}" + (f" to {last}" if last > first else "")
