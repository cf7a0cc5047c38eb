"""What-if analysis: iteration time, network cost and performance per dollar of MoE
training on different fabrics (``mfctl simulate``).

Model (one iteration, all times in seconds):
- Per MoE layer and micro-batch: the step-time model of :mod:`mfctl.fabric.stepmodel`
  (expert GEMMs, attention, four all-to-alls over circuits and/or the electrical fabric),
  fed with real routing statistics (the shipped Mixtral / OLMoE traces; every EP rank's
  micro-batch comes from one text domain).
- Pipeline: ``(m + PP − 1)`` micro-batch stage times (1F1B bubble), ``m`` micro-batches.
- Gradient all-reduce over the data-parallel group on the electrical fabric, ring
  ``2(dp−1)/dp × bytes / bandwidth``; a fraction ``dp_overlap`` hides behind backward.
- Fabrics, 8 NICs per server (the paper's simulated servers, mfabric.md §7):
  ``fat-tree`` (8 NICs on a non-blocking fat-tree), ``fat-tree-3to1`` (3:1 oversubscribed
  above the rack: the DP all-reduce and EP groups larger than a rack slow down),
  ``rail-optimized`` (same bandwidth as the fat-tree for these collectives, via PXN),
  ``static-optical`` (TopoOpt-like: all 8 NICs on a patch panel, no electrical switch; α
  of them form the EP region's circuits, planned once on the average traffic and never
  changed; traffic between servers without a circuit is relayed through an intermediate
  server, modelled as one NIC's rate; the other 8 − α form fixed data-parallel rings),
  ``mfabric`` (α OCS NICs re-planned for
  every iteration's traffic + 8 − α NICs on a fat-tree; one blocking reconfiguration of
  latency L per iteration).
- Cost (paper App. D.2, Table 4, mfabric.md §7): NICs, transceivers (one per NIC and per
  switch port), electrical switch ports of a 3-tier fat-tree (1 + 5/oversubscription per
  host port), OCS ports, patch-panel ports. Fibre is not counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mfctl.fabric.planner import GOODPUT, LinkRates, plan
from mfctl.fabric.stepmodel import StepSpec, layer_time
from mfctl.fabric.traffic import expert_to_rank, load_routing, rank_matrix, rank_to_server, server_matrix

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


@dataclass
class ModelPreset:
    """Paper Table 1 (mfabric.md §7) where given; public model cards otherwise."""

    name: str
    moe_layers: int
    experts: int
    top_k: int
    hidden: int
    ffn_hidden: int
    ep: int
    tp: int
    pp: int
    routing: str  # which shipped trace gives the expert popularity
    seq_len: int = 4096
    micro_batch: int = 8


PRESETS = {
    "mixtral-8x7b": ModelPreset("Mixtral-8x7B", 32, 8, 2, 4096, 14336, 8, 4, 4, "mixtral"),
    "mixtral-8x22b": ModelPreset("Mixtral-8x22B", 56, 8, 2, 6144, 16384, 8, 8, 8, "mixtral"),
    "qwen-moe": ModelPreset("Qwen-MoE (64 experts, top-4)", 24, 64, 4, 2048, 1408, 16, 1, 4, "olmoe"),
    "deepseek-256": ModelPreset("DeepSeek-style (256 experts, top-8)", 58, 256, 8, 7168, 2048, 64, 1, 16, "olmoe"),
}


def expert_probs(preset: ModelPreset, seed: int = 0) -> tuple[np.ndarray, list[str]]:
    """Per domain and trace layer, the share of routing to each expert ``[D, 3, E]``.
    More experts than the trace has: the trace's distribution tiled with ±30 % lognormal
    noise (seeded), renormalised."""
    tr = load_routing(preset.routing)
    p = tr.probs
    E = preset.experts
    if E != p.shape[-1]:
        reps = -(-E // p.shape[-1])
        rng = np.random.default_rng(seed)
        p = np.tile(p, reps)[..., :E] * rng.lognormal(0, 0.3, size=(1, 1, E))
        p = p / p.sum(axis=-1, keepdims=True)
    return p, tr.domains


@dataclass
class Scenario:
    preset: ModelPreset
    gpus: int = 1024
    link_gbps: int = 400
    alpha: int = 6  # OCS NICs per server in mFabric
    reconfig_latency_s: float = 0.025
    micro_batches: int = 16
    dp_overlap: float = 0.9
    rack_servers: int = 32
    eta_expert: float = 0.65
    eta_dense: float = 0.55

    @property
    def servers(self) -> int:
        return self.gpus // GPUS_PER_SERVER


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
        sw = host_ports * (1 + 5 / oversub)
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


def _region_layers(sc: Scenario, probs: np.ndarray, domain_of_rank: np.ndarray) -> list[np.ndarray]:
    """Token copies ``[R, E]`` per trace layer for one micro-batch."""
    pre = sc.preset
    tokens = pre.seq_len * pre.micro_batch * pre.top_k
    return [np.stack([tokens * probs[domain_of_rank[r], layer] for r in range(pre.ep)]) for layer in range(probs.shape[1])]


def simulate(sc: Scenario, fabrics=FABRICS) -> list[FabricResult]:
    """Iteration time, all-to-all share and cost for each fabric (see module doc)."""
    pre = sc.preset
    if sc.gpus % GPUS_PER_SERVER or (pre.ep * pre.tp) % GPUS_PER_SERVER:
        raise ValueError("GPUs and EP x TP must be multiples of 8 (one region = EP x TP / 8 servers)")
    region = pre.ep * pre.tp // GPUS_PER_SERVER
    if sc.gpus % (pre.ep * pre.tp * pre.pp):
        raise ValueError(f"{sc.gpus} GPUs do not divide into EP {pre.ep} x TP {pre.tp} x PP {pre.pp} groups")
    if not 1 <= sc.alpha < NICS_PER_SERVER:
        raise ValueError(f"alpha (OCS NICs per server) must be 1..{NICS_PER_SERVER - 1}")
    probs, domains = expert_probs(pre)
    er = expert_to_rank(pre.experts, pre.ep)
    rs = rank_to_server(pre.ep, pre.tp, GPUS_PER_SERVER)
    r = sc.link_gbps * 1e9 / 8 * GOODPUT
    spec = StepSpec(hidden=pre.hidden, ffn_hidden=pre.ffn_hidden, ep=pre.ep, tp=pre.tp, gpus_per_server=GPUS_PER_SERVER,
                    tokens_per_rank=pre.seq_len * pre.micro_batch, eta_expert=sc.eta_expert, eta_dense=sc.eta_dense)
    D = len(domains)
    # iterations: in each, EP ranks draw their micro-batches from domains (rotating mixes)
    mixes = [np.array([(k + r_) % D for r_ in range(pre.ep)]) if k % 2 else np.full(pre.ep, k % D) for k in range(2 * D)]
    layer_sets = [_region_layers(sc, probs, mix) for mix in mixes]
    avg_layers = [np.mean([ls[layer] for ls in layer_sets], axis=0) for layer in range(probs.shape[1])]
    to_B = lambda t: server_matrix(rank_matrix(t, er, pre.ep), rs, region, spec.bytes_per_token)  # noqa: E731
    layers_per_stage = pre.moe_layers / pre.pp
    # gradient all-reduce (bf16): dense 4H^2 per layer + this GPU's experts, per stage, / TP
    params = layers_per_stage * (4 * pre.hidden ** 2 + (pre.experts / pre.ep) * 3 * pre.hidden * pre.ffn_hidden) / pre.tp
    dp = sc.gpus // (pre.tp * pre.pp)
    grad_bytes = 2 * params
    cross_rack = region > sc.rack_servers
    out = []
    for fab in fabrics:
        static_C = np.zeros((region, region), int)  # planned once below for static-optical
        if fab in ("static-optical",):
            B_avg = np.stack([to_B(t) for t in avg_layers])
            static_C = plan(B_avg, np.full(region, sc.alpha), LinkRates(r, r)).circuits
        elif fab == "mfabric":
            B_avg = np.stack([to_B(t) for t in avg_layers])
        its, a2as = [], []
        for ls in layer_sets:
            Bl = np.stack([to_B(t) for t in ls])
            if fab in ("fat-tree", "rail-optimized"):
                C, rates = np.zeros((region, region), int), LinkRates(r, NICS_PER_SERVER * r)
            elif fab == "fat-tree-3to1":
                C, rates = np.zeros((region, region), int), LinkRates(r, NICS_PER_SERVER * r / (3 if cross_rack else 1))
            elif fab == "static-optical":
                C, rates = static_C, LinkRates(r, r)
            else:
                rates = LinkRates(r, (NICS_PER_SERVER - sc.alpha) * r)
                C = plan(Bl, np.full(region, sc.alpha), rates).circuits
            lt = [layer_time(t, C, er, rs, spec, rates) for t in ls]
            per_layer = np.mean([x.total_s for x in lt])
            a2a_layer = np.mean([4 * x.a2a_s for x in lt])
            stage = layers_per_stage * per_layer
            it = (sc.micro_batches + pre.pp - 1) * stage
            gpu_bw = {"fat-tree": r, "rail-optimized": r, "fat-tree-3to1": r / 3,
                      "static-optical": (NICS_PER_SERVER - sc.alpha) / NICS_PER_SERVER * r,
                      "mfabric": (NICS_PER_SERVER - sc.alpha) / NICS_PER_SERVER * r}[fab]
            ar = 2 * (dp - 1) / dp * grad_bytes / gpu_bw if dp > 1 else 0.0
            it += (1 - sc.dp_overlap) * ar
            if fab == "mfabric":
                it += sc.reconfig_latency_s
            its.append(it)
            a2as.append((sc.micro_batches + pre.pp - 1) * layers_per_stage * a2a_layer / it)
        cost = network_cost(fab, sc.servers, sc.link_gbps, sc.alpha)
        out.append(FabricResult(fab, float(np.mean(its)), float(np.mean(a2as)), cost,
                                details={"tokens_per_s": sc.gpus // (pre.tp * pre.pp) * pre.seq_len * pre.micro_batch
                                         * sc.micro_batches / float(np.mean(its))}))
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
