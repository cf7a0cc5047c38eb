"""Provisioning's plan: read a host's actual state with the real tools, compare it with the desired
state (inventory + recipe + firmware manifest) and list the actions that close the gap.

Order per host (safe order, :data:`PHASES`): firmware → firmware settings → firmware reset → links
(breakout, MTU) → addresses → RoCE QoS → GPU settings. Each action records the target,
before → after, the commands, and what it needs (``reset``). A new kind of desired state is one
more ``_plan_*`` function called from :func:`plan_host`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mfctl.errors import ExitCode, MfctlError
from mfctl.hosts import iproute, mellanox, nvidia_smi
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
    fw: dict[str | None, mellanox.FirmwareDevice]  # by PCI
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
    gpu_fields = ["index", "persistence_mode", "mig.mode.current"]
    gpus = nvidia_smi.parse_query_csv(pool.run_checked(h, nvidia_smi.query_argv(gpu_fields)))
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
