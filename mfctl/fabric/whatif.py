"""What-if analysis: iteration time, network cost and performance per dollar of MoE
training on different fabrics (``mfctl simulate``).

The iteration time is the flow model of :mod:`mfctl.fabric.itermodel` (pipeline bubbles and
stage-to-stage sends, TP on NVSwitch, the four EP all-to-alls per MoE block with real routing
skew, the DP all-reduce, compute; each fabric as the MixNet paper models it), the same model
``mfctl simulate --reproduce-paper`` checks against the paper (:mod:`mfctl.fabric.reproduce`,
docs/planning.md). Fabric names here: ``fat-tree``, ``fat-tree-3to1``, ``rail-optimized``,
``static-optical`` (the paper's TopoOpt) and ``mfabric`` (the paper's MixNet).

Cost (paper App. D.2, Table 4, mfabric.md §7): NICs, transceivers (one per NIC and per
switch port), electrical switch ports of a k-ary 3-tier fat-tree (1 + 4/oversubscription per
host port: 5 at 1:1), OCS ports, patch-panel ports. Fibre is not counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mfctl.fabric import itermodel as im

NICS_PER_SERVER = 8
GPUS_PER_SERVER = 8

#: Table 4 of the paper (App. D.2): $ per item by link speed (Gbit/s).
PRICES = {
    100: {"transceiver": 99, "nic": 659, "switch_port": 187, "ocs_port": 520, "patch_port": 100},
    200: {"transceiver": 239, "nic": 1079, "switch_port": 374, "ocs_port": 520, "patch_port": 100},
    400: {"transceiver": 659, "nic": 1499, "switch_port": 1090, "ocs_port": 520, "patch_port": 100},
    800: {"transceiver": 1399, "nic": 2248, "switch_port": 1400, "ocs_port": 520, "patch_port": 100},
}

FABRICS = ("fat-tree", "fat-tree-3to1", "rail-optimized", "static-optical", "mfabric")
#: This module's fabric names → the step model's.
MODEL_FABRIC = {"fat-tree": "fat-tree", "fat-tree-3to1": "fat-tree-3to1", "rail-optimized": "rail-optimized",
                "static-optical": "topoopt", "mfabric": "mixnet"}

#: The models (paper Table 1, :data:`mfctl.fabric.itermodel.MODELS`).
PRESETS: dict[str, im.Model] = dict(im.MODELS)
#: The largest cluster simulated (2**17 GPUs, 16,384 servers: beyond any built; ~7 s, ~65 MB): the step model's
#: time grows with the number of EP groups (10**9 GPUs ran for minutes past 9 GB of memory)
MAX_GPUS = 131_072
#: The most micro-batches per iteration simulated (gradient accumulation steps)
MAX_MICRO_BATCHES = 4096


@dataclass
class Scenario:
    preset: im.Model
    gpus: int = 1024
    link_gbps: int = 400
    alpha: int = 6  # OCS NICs per server in mFabric
    reconfig_latency_s: float = 0.025
    micro_batches: int = 8

    @property
    def servers(self) -> int:
        return self.gpus // GPUS_PER_SERVER

    def physics(self) -> im.Physics:
        """The step model's parameters for this scenario (the calibrated rest unchanged)."""
        return im.Physics(gpus=self.gpus, alpha=self.alpha, reconfig_s=self.reconfig_latency_s,
                          micro_batches=self.micro_batches)


@dataclass
class FabricResult:
    fabric: str
    iteration_s: float
    a2a_share: float
    cost_usd: float
    perf_per_dollar: float = 0.0
    relative_perf_per_dollar: float = 1.0
    details: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"fabric": self.fabric, "iteration_s": self.iteration_s, "a2a_share": self.a2a_share,
                "cost_usd": self.cost_usd, "relative_perf_per_dollar": self.relative_perf_per_dollar, **self.details}


def network_cost(fabric: str, servers: int, link_gbps: int, alpha: int) -> float:
    """Network cost in $ for ``servers`` × 8 NICs (paper Table 4 prices)."""
    if link_gbps not in PRICES:
        raise ValueError(f"no prices for {link_gbps}G; have {sorted(PRICES)}")
    pr = PRICES[link_gbps]
    nics = servers * NICS_PER_SERVER

    def fat_tree(host_ports: int, oversub: float) -> float:
        # k-ary 3-tier fat-tree: per host port 1 edge down-port, then 1/o edge up-ports, 2/o
        # aggregation ports and 1/o core ports (5 per host port at 1:1: 5k²/4 switches × k ports
        # for k³/4 hosts)
        sw = host_ports * (1 + 4 / oversub)
        return host_ports * (pr["nic"] + pr["transceiver"]) + sw * (pr["switch_port"] + pr["transceiver"])

    if fabric in ("fat-tree", "rail-optimized"):
        return fat_tree(nics, 1.0)
    if fabric == "fat-tree-3to1":
        return fat_tree(nics, 3.0)
    if fabric == "static-optical":
        return nics * (pr["nic"] + pr["transceiver"] + pr["patch_port"])
    if fabric == "mfabric":
        ocs = servers * alpha
        return ocs * (pr["nic"] + pr["transceiver"] + pr["ocs_port"]) + fat_tree(servers * (NICS_PER_SERVER - alpha), 1.0)
    raise ValueError(f"unknown fabric {fabric!r}; one of {FABRICS}")


def simulate(sc: Scenario, fabrics=FABRICS) -> list[FabricResult]:
    """Iteration time (the step model), all-to-all share, cost and perf/$ for each fabric."""
    pre = sc.preset
    if not GPUS_PER_SERVER <= sc.gpus <= MAX_GPUS:
        raise ValueError(f"GPUs must be {GPUS_PER_SERVER} to {MAX_GPUS}, got {sc.gpus}")
    if not 1 <= sc.micro_batches <= MAX_MICRO_BATCHES:
        raise ValueError(f"micro-batches must be 1 to {MAX_MICRO_BATCHES}, got {sc.micro_batches}")
    if sc.gpus % GPUS_PER_SERVER or (pre.ep * pre.tp) % GPUS_PER_SERVER:
        raise ValueError("GPUs and EP x TP must be multiples of 8 (one region = EP x TP / 8 servers)")
    if sc.gpus % (pre.ep * pre.tp * pre.pp):
        raise ValueError(f"{sc.gpus} GPUs do not divide into EP {pre.ep} x TP {pre.tp} x PP {pre.pp} groups")
    if not 1 <= sc.alpha < NICS_PER_SERVER:
        raise ValueError(f"alpha (OCS NICs per server) must be 1..{NICS_PER_SERVER - 1}")
    ph = sc.physics()
    out = []
    for fab in fabrics:
        st = im.step(pre, MODEL_FABRIC[fab], sc.link_gbps, ph)
        cost = network_cost(fab, sc.servers, sc.link_gbps, sc.alpha)
        tokens = sc.gpus // (pre.tp * pre.pp) * pre.seq_len * pre.micro_batch * sc.micro_batches / st.iteration_s
        out.append(FabricResult(fab, st.iteration_s, st.a2a_s / st.iteration_s, cost,
                                details={"tokens_per_s": tokens, "breakdown_s": {
                                    k: v for k, v in st.to_dict().items() if k.endswith("_s") and k != "iteration_s"}}))
    for res in out:
        res.perf_per_dollar = 1.0 / res.iteration_s / res.cost_usd
    ref = next((x for x in out if x.fabric == "fat-tree"), out[0])
    for res in out:
        res.relative_perf_per_dollar = res.perf_per_dollar / ref.perf_per_dollar
    return out


def latency_sweep(sc: Scenario, latencies_s: list[float]) -> list[dict]:
    """mFabric's iteration time relative to the fat-tree as the reconfiguration latency grows."""
    ft = simulate(sc, ("fat-tree",))[0].iteration_s
    out = []
    for L in latencies_s:
        sc2 = Scenario(**{**sc.__dict__, "reconfig_latency_s": L})
        mf = simulate(sc2, ("mfabric",))[0].iteration_s
        out.append({"latency_s": L, "mfabric_iteration_s": mf, "relative_to_fat_tree": mf / ft})
    return out


def plot(results: list[FabricResult], sweep: list[dict] | None, path: str, title: str) -> None:
    """A PNG: iteration time and performance per dollar per fabric (and the latency sweep)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ncols = 3 if sweep else 2
    fig, ax = plt.subplots(1, ncols, figsize=(5 * ncols, 4))
    names = [r.fabric for r in results]
    ax[0].bar(names, [r.iteration_s for r in results], color="#4c72b0")
    ax[0].set_ylabel("iteration time (s)")
    ax[1].bar(names, [r.relative_perf_per_dollar for r in results], color="#55a868")
    ax[1].axhline(1.0, color="grey", lw=0.8)
    ax[1].set_ylabel("performance per $ (fat-tree = 1)")
    for a in ax[:2]:
        a.tick_params(axis="x", rotation=30)
    if sweep:
        ax[2].semilogx([x["latency_s"] for x in sweep], [x["relative_to_fat_tree"] for x in sweep], marker="o")
        ax[2].set_xlabel("reconfiguration latency (s)")
        ax[2].set_ylabel("mFabric iteration time / fat-tree")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
