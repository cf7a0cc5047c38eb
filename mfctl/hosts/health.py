"""Pre-flight health sweep over SSH: GPUs (nvidia-smi query CSV) and NIC links (ip -j link).

Thresholds are declared once in :data:`THRESHOLDS` (A100 datasheet class: slowdown near
85 °C; any uncorrected volatile ECC error is critical).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mfctl.errors import ParseError
from mfctl.hosts import iproute, nvidia_smi

THRESHOLDS = {"gpu_temp_warn_c": 80.0, "gpu_temp_crit_c": 87.0}


@dataclass
class Finding:
    host: str
    severity: str  # ok | warning | critical
    check: str
    message: str

    def to_dict(self) -> dict:
        return self.__dict__.copy()


@dataclass
class HostHealth:
    host: str
    gpus: int = 0
    links_up: list[str] = field(default_factory=list)
    links_down: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    elapsed_s: float = 0.0
    reachable: bool = True

    @property
    def worst(self) -> str:
        sev = [f.severity for f in self.findings]
        return "critical" if "critical" in sev else ("warning" if "warning" in sev else "ok")

    def to_dict(self) -> dict:
        return {"host": self.host, "status": self.worst, "gpus": self.gpus, "links_up": self.links_up,
                "links_down": self.links_down, "reachable": self.reachable, "findings": [f.to_dict() for f in self.findings],
                "elapsed_s": round(self.elapsed_s, 4)}


def check_host(inv_host, gpu_res, link_res) -> HostHealth:
    """Judge one host from its two command results (parsers never run commands)."""
    hh = HostHealth(inv_host.name, elapsed_s=max(gpu_res.elapsed_s, link_res.elapsed_s),
                    reachable=not (gpu_res.error and link_res.error))
    add = lambda sev, chk, msg: hh.findings.append(Finding(inv_host.name, sev, chk, msg))  # noqa: E731
    if not gpu_res.ok:
        add("critical", "gpu", gpu_res.error or f"nvidia-smi exited {gpu_res.rc}: {gpu_res.stderr.strip()[:200]}")
    else:
        try:
            gpus = [nvidia_smi.GPUStatus.from_row(r) for r in nvidia_smi.parse_query_csv(gpu_res.stdout)]
        except ParseError as e:
            add("critical", "gpu", str(e))
            gpus = []
        hh.gpus = len(gpus)
        if gpus and len(gpus) != inv_host.gpus.count:
            add("critical", "gpu", f"{len(gpus)} GPUs visible, inventory says {inv_host.gpus.count}")
        for g in gpus:
            if g.temperature_c is not None and g.temperature_c >= THRESHOLDS["gpu_temp_crit_c"]:
                add("critical", "gpu", f"GPU {g.index} at {g.temperature_c} °C")
            elif g.temperature_c is not None and g.temperature_c >= THRESHOLDS["gpu_temp_warn_c"]:
                add("warning", "gpu", f"GPU {g.index} at {g.temperature_c} °C")
            if g.ecc_uncorrected:
                add("critical", "gpu", f"GPU {g.index} has {g.ecc_uncorrected} uncorrected ECC errors")
            if g.persistence is False:
                add("warning", "gpu", f"GPU {g.index} persistence mode is off")
    if not link_res.ok:
        add("critical", "nic", link_res.error or f"ip exited {link_res.rc}: {link_res.stderr.strip()[:200]}")
    else:
        try:
            links = iproute.parse_links(link_res.stdout)
        except ParseError as e:
            add("critical", "nic", str(e))
            links = {}
        for nic in inv_host.nics:
            for lane in nic.lanes:
                l = links.get(lane.netdev)
                if l is None:
                    if links:
                        add("critical", "nic", f"{nic.name} lane {lane.index}: netdev {lane.netdev} not present")
                    continue
                (hh.links_up if l.up else hh.links_down).append(lane.netdev)
                if nic.role == "eps" and not l.up:
                    add("critical", "nic", f"EPS link {lane.netdev} ({nic.name}) is {l.operstate}")
    return hh


def sweep(pool, inv, hosts: list[str] | None = None) -> list[HostHealth]:
    """Run the sweep on ``hosts`` (default all) in parallel over the pool."""
    names = hosts or [h.name for h in inv.hosts]
    gpu = pool.run_many(names, lambda h: nvidia_smi.query_argv())
    link = pool.run_many(names, lambda h: iproute.link_argv())
    return [check_host(inv.host(n), g, l) for n, g, l in zip(names, gpu, link)]
