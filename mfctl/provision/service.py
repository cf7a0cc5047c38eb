"""Read actual state over SSH, compare with the desired state, plan, apply, verify.

Plan order per host (safe order): firmware → firmware settings → firmware reset → links
(breakout, MTU) → addresses → RoCE QoS → GPU settings. Each action records the target,
before → after, the commands, and what it needs (``reset``). Apply runs hosts in parallel,
each host's actions in order, stopping that host at its first failed action; then every
host is re-read and re-planned: anything left is a verification failure.

Every fan-out goes through :meth:`mfctl.transport.ssh.SSHPool.map` (at most ``fanout`` hosts at
once) and reports to an :class:`mfctl.observer.Observer` (a phase — ``plan``, ``apply``,
``verify``, ``optics``, ``firmware`` — then each host started and done); the per-host results
carry an ``exit_code``, so :meth:`mfctl.transport.results.Results.of` gives the command's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mfctl.errors import ExitCode, MfctlError, ParseError
from mfctl.hosts import ethtool, iproute, mellanox, nvidia_smi
from mfctl.provision.models import FirmwareManifest, ProvisionSpec

if TYPE_CHECKING:
    from mfctl.observer import Observer

PHASES = ["firmware", "firmware-settings", "firmware-reset", "links", "addresses", "qos", "gpu"]


@dataclass
class Action:
    phase: str
    target: str  # e.g. "nic0 (0000:0c:00.0)" or "ens1f0np0"
    what: str
    before: str
    after: str
    argvs: list[list[str]]
    needs: list[str] = field(default_factory=list)
    manual: str | None = None  # why it cannot be automated (apply fails here)
    expect: dict | None = None  # e.g. {"stdout_startswith": sha256}

    def to_dict(self) -> dict:
        return {"phase": self.phase, "target": self.target, "what": self.what, "before": self.before,
                "after": self.after, "commands": [" ".join(a) for a in self.argvs], "needs": self.needs,
                "manual": self.manual}


@dataclass
class HostPlan:
    host: str
    actions: list[Action] = field(default_factory=list)
    error: str | None = None  # could not read the host

    @property
    def exit_code(self) -> ExitCode:
        """UNREACHABLE (4) when the host could not be read, DRIFT (6) when it has actions, else OK."""
        return ExitCode.UNREACHABLE if self.error else ExitCode.DRIFT if self.actions else ExitCode.OK

    def to_dict(self) -> dict:
        return {"host": self.host, "error": self.error, "actions": [a.to_dict() for a in self.actions]}


@dataclass
class HostActual:
    fw: dict[str, mellanox.FirmwareDevice]  # by PCI
    mlx: dict[str, mellanox.MlxconfigDevice]
    ports: dict[str, mellanox.DevlinkPort]
    ifaces: dict[str, iproute.Iface]
    qos: dict[str, mellanox.QosState]  # by NIC name
    gpus: list[dict]


def read_actual(pool, inv_host) -> HostActual:
    """Read one host with the real tools (raises MfctlError/ParseError naming the tool)."""
    h = inv_host.name
    fw = {d.pci: d for d in mellanox.parse_mlxfwmanager(pool.run_checked(h, mellanox.mlxfwmanager_query_argv()))}
    mlx, qos = {}, {}
    ports = mellanox.parse_devlink_ports(pool.run_checked(h, mellanox.devlink_ports_argv()))
    for nic in inv_host.nics:
        mlx[nic.pci] = mellanox.parse_mlxconfig(pool.run_checked(h, mellanox.mlxconfig_query_argv(nic.pci)))[0]
        # QoS is per NIC: ask through any of its current netdevs (before a breakout they differ from the inventory's)
        nds = [p.netdev for p in ports.values() if p.name.startswith(f"pci/{nic.pci}/") and p.netdev]
        if nds:
            qos[nic.name] = mellanox.parse_mlnx_qos(pool.run_checked(h, mellanox.mlnx_qos_argv(nds[0])))
    ifaces = iproute.parse_addrs(pool.run_checked(h, iproute.addr_argv()))
    gpus = nvidia_smi.parse_query_csv(pool.run_checked(h, nvidia_smi.query_argv(["index", "persistence_mode", "mig.mode.current"])))
    return HostActual(fw, mlx, ports, ifaces, qos, gpus)


def plan_host(inv, hi: int, inv_host, spec: ProvisionSpec, manifest: FirmwareManifest | None, act: HostActual) -> list[Action]:
    """The actions that bring host ``inv_host`` (index ``hi`` in the inventory) from ``act`` to the
    desired state, in the safe order of :data:`PHASES`."""
    acts: list[Action] = []
    reset: set[str] = set()  # PCI addresses of NICs that need an mlxfwreset
    resplit: set[str] = set()  # NICs whose ports are re-split: their lanes appear after the reset
    for nic in inv_host.nics:
        fwd = act.fw.get(nic.pci)
        if fwd is None:
            acts.append(Action("firmware", f"{nic.name} ({nic.pci})", "NIC present", "missing", "present", [],
                               manual="mlxfwmanager does not list this NIC"))
            continue
        acts += _plan_firmware(nic, fwd, manifest, reset)
        acts += _plan_mlxconfig(nic, act.mlx.get(nic.pci), spec, reset)
        acts += _plan_breakout(nic, act, reset, resplit)
    acts += [Action("firmware-reset", f"{nic.name} ({nic.pci})", "firmware reset", "pending", "active",
                    [mellanox.mlxfwreset_argv(nic.pci)]) for nic in inv_host.nics if nic.pci in reset]
    acts += _plan_lanes(hi, inv_host, act, spec, resplit)
    acts += _plan_qos(inv_host, act, spec)
    acts += _plan_gpu(act, spec)
    acts.sort(key=lambda a: PHASES.index(a.phase))
    return acts


def _plan_firmware(nic, fwd: mellanox.FirmwareDevice, manifest: FirmwareManifest | None, reset: set[str]) -> list[Action]:
    """Burn the pinned image (checksummed on the host first) when the NIC's burnt version differs;
    a burnt image that is not running yet needs only the reset."""
    im = manifest.for_nic(fwd.part_number or "", fwd.psid) if manifest else None
    if im and fwd.fw_current != im.version:
        reset.add(nic.pci)
        return [Action("firmware", f"{nic.name} ({nic.pci})", "firmware", fwd.fw_current or "?", im.version,
                       [["sha256sum", im.image], mellanox.mlxfwmanager_burn_argv(nic.pci, im.image)],
                       needs=["reset"], expect={"sha256": im.sha256})]
    if im and fwd.running != im.version:  # burnt, not yet active
        reset.add(nic.pci)
    return []


def _plan_mlxconfig(nic, dev: mellanox.MlxconfigDevice | None, spec: ProvisionSpec, reset: set[str]) -> list[Action]:
    """The recipe's firmware settings against the NIC's next-boot values (pending ones need the reset)."""
    want = {k: str(v) for k, v in spec.mlxconfig.items()}
    if dev is None or not want:
        return []
    tgt, acts = f"{nic.name} ({nic.pci})", []
    missing = [k for k in want if k not in dev.params]
    if missing:
        acts.append(Action("firmware-settings", tgt, "mlxconfig", "unsupported", ",".join(missing), [],
                           manual=f"the firmware does not know {', '.join(missing)}"))
    change = {k: v for k, v in want.items() if k in dev.params and mellanox.value_code(dev.params[k].get("next_boot")) != v}
    if change:
        before = ", ".join(f"{k}={dev.params[k].get('next_boot')}" for k in change)
        acts.append(Action("firmware-settings", tgt, "mlxconfig", before, ", ".join(f"{k}={v}" for k, v in change.items()),
                           [mellanox.mlxconfig_set_argv(nic.pci, change)], needs=["reset"]))
        reset.add(nic.pci)
    if any(mellanox.value_code(dev.params[k].get("current")) != v for k, v in want.items() if k in dev.params):
        reset.add(nic.pci)
    return acts


def _plan_breakout(nic, act: HostActual, reset: set[str], resplit: set[str]) -> list[Action]:
    """How many ports the module is split into: devlink where the port is splittable, else the
    firmware's MODULE_SPLIT_M0 + reset (mlx5), else MANUAL."""
    ports = [p for p in act.ports.values() if p.name.startswith(f"pci/{nic.pci}/")]
    if len(ports) == len(nic.lanes):
        return []
    tgt, dev = f"{nic.name} ({nic.pci})", act.mlx.get(nic.pci)
    resplit.add(nic.pci)
    if ports and all(p.splittable for p in ports):
        argv = (["devlink", "port", "split", ports[0].name, "count", str(len(nic.lanes))] if len(nic.lanes) > 1
                else ["devlink", "port", "unsplit", ports[0].name])
        return [Action("links", tgt, "breakout", f"{len(ports)} port(s)", nic.breakout, [argv])]
    if dev is not None and "MODULE_SPLIT_M0" in dev.params:
        reset.add(nic.pci)
        return [Action("firmware-settings", tgt, "breakout (MODULE_SPLIT_M0)", f"{len(ports)} port(s)",
                       f"{nic.breakout}: {len(nic.lanes)} ports",
                       [mellanox.mlxconfig_set_argv(nic.pci, {"MODULE_SPLIT_M0": str(len(nic.lanes))})], needs=["reset"])]
    return [Action("links", tgt, "breakout", f"{len(ports)} port(s)", nic.breakout, [],
                   manual="the port is not splittable with devlink and the firmware has no MODULE_SPLIT")]


def _plan_lanes(hi: int, inv_host, act: HostActual, spec: ProvisionSpec, resplit: set[str]) -> list[Action]:
    """Each lane's netdev: MTU and its address (``spec.address_for``); a lane of a NIC being
    re-split is planned as the fresh netdev that appears after the reset (MTU 1500, no address)."""
    acts = []
    for ni, nic in enumerate(inv_host.nics):
        for lane in nic.lanes:
            ifc = act.ifaces.get(lane.netdev)
            if ifc is None and nic.pci in resplit:
                ifc = iproute.Iface(lane.netdev, 1500, False, [])
            if ifc is None:
                acts.append(Action("links", lane.netdev, "netdev", "missing", "present", [],
                                   manual="the lane's network device does not exist"))
                continue
            if ifc.mtu != spec.mtu:
                acts.append(Action("links", lane.netdev, "MTU", str(ifc.mtu), str(spec.mtu),
                                   [["ip", "link", "set", "dev", lane.netdev, "mtu", str(spec.mtu)]]))
            addr = spec.address_for(hi + 1, ni, lane.index)
            if addr and addr not in ifc.addresses:
                acts.append(Action("addresses", lane.netdev, "address", ",".join(ifc.addresses) or "none", addr,
                                   [["ip", "addr", "replace", addr, "dev", lane.netdev]]))
    return acts


def _plan_qos(inv_host, act: HostActual, spec: ProvisionSpec) -> list[Action]:
    """RoCE QoS per NIC: the trust mode and PFC on the RoCE priority only."""
    acts = []
    pfc = [1 if p == spec.roce.pfc_priority else 0 for p in range(8)]
    for nic in inv_host.nics:
        q = act.qos.get(nic.name)
        if q is not None and (q.trust != spec.roce.trust or q.pfc_enabled != pfc):
            acts.append(Action("qos", nic.lanes[0].netdev, "RoCE QoS", f"trust {q.trust}, {_pfc(q.pfc_enabled)}",
                               f"trust {spec.roce.trust}, {_pfc(pfc)}",
                               [mellanox.mlnx_qos_argv(nic.lanes[0].netdev, spec.roce.trust, pfc)]))
    return acts


def _plan_gpu(act: HostActual, spec: ProvisionSpec) -> list[Action]:
    """Persistence mode and MIG mode of all GPUs (MIG needs a GPU reset)."""
    acts = []
    pm = [g.get("persistence_mode") for g in act.gpus]
    if spec.gpu.persistence and any(v != "Enabled" for v in pm):
        acts.append(Action("gpu", "all GPUs", "persistence mode", ",".join(sorted(set(map(str, pm)))), "Enabled",
                           [["nvidia-smi", "-pm", "1"]]))
    mig = [g.get("mig.mode.current") for g in act.gpus]
    want_mig = "Enabled" if spec.gpu.mig else "Disabled"
    if any(v != want_mig and v is not None for v in mig):
        acts.append(Action("gpu", "all GPUs", "MIG mode", ",".join(sorted(set(map(str, mig)))), want_mig,
                           [["nvidia-smi", "-mig", "1" if spec.gpu.mig else "0"]], needs=["GPU reset"]))
    return acts


def _pfc(v: list[int]) -> str:
    on = [str(p) for p, x in enumerate(v) if x]
    return f"PFC on prio {','.join(on)}" if on else "PFC off"


def plan(pool, inv, spec: ProvisionSpec, manifest: FirmwareManifest | None, hosts: list[str] | None = None, *,
         observer: Observer | None = None, phase: str = "plan") -> list[HostPlan]:
    """Read every host (``hosts``: these only) in parallel and plan it, in host order. A host that
    cannot be read gets ``error`` (the message names it). ``phase``: what the observer hears
    (``verify`` for the re-read after apply)."""
    names = hosts or [h.name for h in inv.hosts]
    index = {h.name: i for i, h in enumerate(inv.hosts)}

    def one(name: str) -> HostPlan:
        try:
            act = read_actual(pool, inv.host(name))
        except MfctlError as e:  # (ParseError is one)
            return HostPlan(name, error=str(e))
        return HostPlan(name, plan_host(inv, index[name], inv.host(name), spec, manifest, act))

    return pool.map(names, one, observer=observer, phase=phase).values()


@dataclass
class HostResult:
    """What apply did on one host: the actions applied in order, the one that failed (``step``,
    ``error``), and what the re-read found left (:func:`verify`)."""

    host: str
    applied: list[dict] = field(default_factory=list)
    failed: dict | None = None
    elapsed_s: float = 0.0
    left: list[dict] = field(default_factory=list)  #: actions the verification still finds
    verify_error: str | None = None  #: the host could not be re-read

    @property
    def error(self) -> str | None:
        return self.failed["error"] if self.failed else self.verify_error

    @property
    def exit_code(self) -> ExitCode:
        """FAILED (1) when an action failed or the verification found anything left (or could not
        read the host), else OK."""
        return ExitCode.FAILED if self.failed or self.left or self.verify_error else ExitCode.OK

    def to_dict(self) -> dict:
        return {"host": self.host, "ok": self.failed is None, "applied": self.applied, "failed": self.failed,
                "elapsed_s": round(self.elapsed_s, 3)}


def apply(pool, plans: list[HostPlan], journal=None, stop=None, *, observer: Observer | None = None) -> list[HostResult]:
    """Run each host's actions in order (hosts in parallel); a host stops at its first
    failure. A host with an action that cannot be automated is refused before anything is
    touched. ``stop`` (a threading.Event, set on Ctrl-C) stops every host after its current
    action. Results in the plans' order."""
    by_host = {hp.host: hp for hp in plans}

    def one(host: str) -> HostResult:
        return _apply_host(pool, by_host[host], journal, stop)

    return pool.map(list(by_host), one, observer=observer, phase="apply").values()


def verify(pool, inv, spec: ProvisionSpec, manifest: FirmwareManifest | None, results: list[HostResult],
           hosts: list[str] | None = None, *, observer: Observer | None = None) -> list[HostResult]:
    """Re-read and re-plan every host after :func:`apply`; what is left (or a host that cannot be
    read) goes into its result's ``left`` / ``verify_error``. Returns ``results``."""
    again = {v.host: v for v in plan(pool, inv, spec, manifest, hosts, observer=observer, phase="verify")}
    for r in results:
        v = again.get(r.host)
        if v is not None:
            r.left, r.verify_error = [a.to_dict() for a in v.actions], v.error
    return results


def _run_action(pool, host: str, a: Action) -> str | None:
    """Run an action's commands in order; why it failed, or None."""
    for argv in a.argvs:
        r = pool.run(host, argv)
        if not r.ok:
            return f"{' '.join(argv)}: " + (r.error or f"exit {r.rc}: {(r.stderr or r.stdout).strip()[:300]}")
        if a.expect and argv[0] == "sha256sum" and not r.stdout.startswith(a.expect["sha256"]):
            return f"image checksum mismatch: {r.stdout.split()[0] if r.stdout else '?'} != manifest {a.expect['sha256']}"
    return None


def _apply_host(pool, hp: HostPlan, journal, stop) -> HostResult:
    """One host's actions in order, stopping at the first failure (see :func:`apply`)."""
    t0 = time.monotonic()
    res = HostResult(hp.host)
    if hp.error:
        res.failed = {"step": "read", "error": hp.error}
        return res
    manual = [a for a in hp.actions if a.manual]
    if manual:
        res.failed = {"step": f"{manual[0].phase}: {manual[0].what} on {manual[0].target}",
                      "error": f"cannot be automated ({manual[0].manual}); nothing was changed on this host"}
        return res
    for a in hp.actions:
        if stop is not None and stop.is_set():
            res.failed = {"step": f"{a.phase}: {a.what} on {a.target}", "error": "interrupted before this step"}
            break
        if journal:
            journal.append("provision.action", host=hp.host, **a.to_dict(), state="start")
        err = a.manual or _run_action(pool, hp.host, a)
        if journal:
            journal.append("provision.action", host=hp.host, phase=a.phase, target=a.target, what=a.what,
                           state="failed" if err else "done", error=err)
        if err:
            res.failed = {"step": f"{a.phase}: {a.what} on {a.target}", "error": err}
            break
        res.applied.append(a.to_dict())
    res.elapsed_s = time.monotonic() - t0
    return res


def check_optics(pool, inv, spec: ProvisionSpec, ocs_power: dict[int, float | None], xc: dict[int, int], *,
                 observer: Observer | None = None) -> list[dict]:
    """Each optical lane end to end: link up, per-channel Rx power above the module's own
    low-warning threshold + margin, and the module's total Rx power agreeing with the OCS
    reading at the output port wired to this lane (a swapped fibre shows up here).
    ``ocs_power``: dBm by OCS output port; ``xc``: the OCS's cross-connects, input → output port.
    One row per lane (every host's, in inventory order), ``status`` ok, bad or no circuit."""
    rx_ports = set(xc.values())

    def failed(h, finding: str) -> list[dict]:
        return [{"host": h.name, "lane": f"{nic.name}.{lane.index}", "netdev": lane.netdev, "ocs_rx": lane.ocs_rx,
                 "findings": [finding], "status": "bad"} for nic, lane in h.ocs_lanes()]

    def lane_rows(name: str) -> list[dict]:
        h = inv.host(name)
        r = pool.run(h.name, iproute.link_argv())
        if not r.ok:
            return failed(h, f"host unreachable: {r.error or r.stderr.strip()[:100]}")
        links = iproute.parse_links(r.stdout)
        return [_lane_row(pool, h.name, nic, lane, links, spec, ocs_power, rx_ports) for nic, lane in h.ocs_lanes()]

    res = pool.map([h.name for h in inv.hosts], lane_rows, observer=observer, phase="optics")
    # a host whose link list did not parse (ParseError) gave no rows: its lanes are bad, saying why
    return [row for r in res for row in (r.value if r.value is not None else failed(inv.host(r.host), r.error))]


def _lane_row(pool, host: str, nic, lane, links: dict, spec: ProvisionSpec, ocs_power: dict[int, float | None],
              rx_ports: set[int]) -> dict:
    row = {"host": host, "lane": f"{nic.name}.{lane.index}", "netdev": lane.netdev, "ocs_rx": lane.ocs_rx, "findings": []}
    if lane.ocs_rx not in rx_ports:
        row["status"] = "no circuit"
        return row
    link = links.get(lane.netdev)
    if link is None or not link.up:
        row["findings"].append("link down")
    m = pool.run(host, ethtool.module_argv(lane.netdev))
    if not m.ok:
        row["findings"].append(f"ethtool -m failed: {m.error or m.stderr.strip()[:100]}")
    else:
        try:
            _judge_module(row, ethtool.parse_module(m.stdout), spec, ocs_power.get(lane.ocs_rx), lane.ocs_rx)
        except ParseError as e:
            row["findings"].append(str(e))
    row["status"] = "ok" if not row["findings"] else "bad"
    return row


def _judge_module(row: dict, mod, spec: ProvisionSpec, ocs: float | None, ocs_rx: int) -> None:
    """A module's Rx power (dBm per channel) against its low-warning threshold + margin, and its
    total against the OCS's reading ``ocs`` (dBm) at port ``ocs_rx``: findings into ``row``."""
    import math

    row["rx_dbm"] = mod.rx_power_dbm
    low = mod.rx_low_warning_dbm()
    if low is not None:
        bad = [c for c, v in mod.rx_power_dbm.items() if v is None or v < low + spec.optics.rx_margin_db]
        if bad:
            row["findings"].append(f"Rx power below {low + spec.optics.rx_margin_db:.1f} dBm "
                                   f"(low warning {low} + margin) on channel(s) {bad}")
    vals = [v for v in mod.rx_power_dbm.values() if v is not None]
    total = 10 * math.log10(sum(10 ** (v / 10) for v in vals)) if vals else None
    row["rx_total_dbm"] = None if total is None else round(total, 2)
    row["ocs_dbm"] = ocs
    if (ocs is None) != (total is None) or (ocs is not None and abs(ocs - total) > spec.optics.ocs_agreement_db):
        row["findings"].append(f"module Rx {row['rx_total_dbm']} dBm but OCS port {ocs_rx} reads "
                               f"{ocs} dBm: the lane is not wired to the port the inventory says")


@dataclass
class HostFirmware:
    """One host's NICs against the firmware manifest: a row per NIC (``status`` ok, drift,
    reset needed — burnt but not running —, no pinned version), or ``error`` when it could not be read."""

    host: str
    nics: list[dict] = field(default_factory=list)
    error: str | None = None

    @property
    def exit_code(self) -> ExitCode:
        """UNREACHABLE (4) when the host could not be read, DRIFT (6) when a NIC is not on its pinned
        version (burnt or running), else OK."""
        if self.error:
            return ExitCode.UNREACHABLE
        return ExitCode.DRIFT if any(r["status"] in ("drift", "reset needed") for r in self.nics) else ExitCode.OK

    def rows(self) -> list[dict]:
        """The NIC rows; a host that could not be read is one row with status ``unreachable``."""
        if self.error:
            return [{"host": self.host, "pci": None, "part_number": None, "psid": None, "running": None, "burnt": None,
                     "pinned": None, "status": "unreachable", "error": self.error}]
        return self.nics


def firmware_check(pool, manifest: FirmwareManifest, hosts: list[str], *, observer: Observer | None = None) -> list[HostFirmware]:
    """Every NIC's running and burnt firmware (``mlxfwmanager --query``) against ``manifest``, hosts
    in parallel, in the order given."""

    def one(host: str) -> HostFirmware:
        try:
            devs = mellanox.parse_mlxfwmanager(pool.run_checked(host, mellanox.mlxfwmanager_query_argv()))
        except MfctlError as e:
            return HostFirmware(host, error=str(e))
        return HostFirmware(host, [_firmware_row(host, d, manifest) for d in devs])

    return pool.map(hosts, one, observer=observer, phase="firmware").values()


def _firmware_row(host: str, d, manifest: FirmwareManifest) -> dict:
    im = manifest.for_nic(d.part_number or "", d.psid)
    want = im.version if im else None
    status = ("no pinned version" if not im else "ok" if d.running == want and d.fw_current == want else
              "reset needed" if d.fw_current == want else "drift")
    return {"host": host, "pci": d.pci, "part_number": d.part_number, "psid": d.psid,
            "running": d.running, "burnt": d.fw_current, "pinned": want, "status": status}
