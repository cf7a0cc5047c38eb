"""Flow-level iteration-time model of MoE training on five fabrics, as the MixNet paper's
simulations set them up (SIGCOMM'25 §7.1–7.4, App. D; ``../shared/research/mfabric.md`` §7).

One iteration (all times in seconds, sizes in bytes, one set of :class:`Physics` for every model):

- **Parallelism** (paper Table 1): EP × TP × PP GPUs per pipeline, ``DP = GPUs / (EP·TP·PP)``
  replicas (FlexFlow's EP is a dimension of its own). EP rank ``r`` is GPUs
  ``r·TP .. r·TP+TP−1``; a region is one EP group, ``EP·TP/8`` servers.
- **Pipeline** (1F1B): ``(m + PP − 1)`` micro-batch slots of one stage's time; a stage holds
  ``L/PP`` MoE blocks and sends its activations (``T·H·2/TP`` bytes per GPU, forward and
  backward) to the next stage over the fabric that carries PP traffic.
- **Compute** per block and micro-batch of ``T = seq·mb`` tokens per EP rank: attention
  ``(8TH² + 4·mb·seq²·H)/TP`` FLOPs forward, experts ``6·H·F·T·k·h/TP`` (SwiGLU; ``h`` the busiest
  rank's share of the token copies relative to the mean, from the skew model), shared experts
  ``6·H·F_s·T/TP``; backward 2× forward; at ``eta · peak``.
- **TP**: 4 ring all-reduces of ``T·H·2`` bytes per block on NVSwitch (900 GB/s bidirectional).
- **EP**: 4 all-to-alls per block (FP dispatch/combine, BP two), each moving ``W[i, j] · T·k·H·2``
  bytes from rank i to rank j, ``W`` the paper's EP×EP token-matrix skew model
  (:func:`token_matrix`): each source row is a random permutation of Zipf(``zipf_s``) shares —
  the fork's ``wm_ep8`` rows are exactly Zipf(1.6) — drawn anew per (block, micro-batch), so the
  hot pairs move.
- **DP**: one ring all-reduce per iteration of the stage's gradients (bf16): the attention
  weights across ``DP·EP`` GPUs, the experts across ``DP``; ``dp_exposed`` of it is not hidden
  behind backward.

Fabrics (8 NICs per server of ``B`` Gbit/s, ``goodput`` of line rate):

- ``fat-tree``: non-blocking; a server is one node with ``8B`` (GPUs reach any NIC over
  NVSwitch), so only server-level imbalance of the all-to-all counts.
- ``fat-tree-3to1``: the paper simulator's 3:1 tree (htsim ``fat_tree_topology_3to1_k12``): 9
  servers per ToR with 3 uplinks of a server's rate, 1:1 above; servers placed region after
  region, so a region that straddles two ToRs sends part of its all-to-all up, sharing the 3
  uplinks with its neighbours', each flow on one uplink at random (ECMP collisions,
  :func:`rack_time`); the DP ring and the PP sends leave the ToR at a third of the rate.
- ``rail-optimized``: NIC q of every server on rail switch q; a GPU's traffic to GPU q of
  another server is forwarded over NVSwitch to its server's NIC q, so the busiest (server, rail)
  NIC sets the all-to-all time — GPU-level skew is not spread over the server's 8 NICs.
- ``topoopt``: all 8 NICs on one static optical topology for the whole job; 2 NICs form the PP
  chain, 2 the DP ring (1 for DP = 2), the rest are the region's all-to-all circuits, planned once
  on the average traffic. Traffic of a pair without a circuit, and of a hot pair beyond its
  circuits' share, takes 2-hop paths through another server (consuming two circuits).
- ``mixnet``: ``alpha`` (6) OCS NICs whose circuits are re-planned for every (block, micro-batch)
  matrix (:func:`mfctl.fabric.planner.plan`), plus ``8 − alpha`` NICs on a fat-tree carrying the
  rest of the all-to-all, DP and PP. Reconfiguration: one blocking ``reconfig_s`` per iteration;
  later ones, one per (block, micro-batch) in FP and one in BP, as the paper's simulator makes
  them, are hidden behind the block's forward (backward) compute; what is left of one when the
  all-to-all starts runs that all-to-all on the EPS NICs alone until the circuits are up
  (:func:`reconfig_exposed`: bounded by the EPS-only time however slow the OCS; paper §5.1, App. D.7).
  ``eps_spill`` chooses the data path: the §5.3 runtime's (a pair's overflow beyond its circuits on
  the EPS too, the default) or the paper simulator's (a pair with a circuit on it only).

The paper's packet simulator (htsim, TCP, ECN) captures queueing, incast and flow-completion
skew that a flow model does not; docs/planning.md says where that shows.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache

import numpy as np

from mfctl.fabric.planner import LinkRates, a2a_time, plan
from mfctl.fabric.traffic import load_routing

GPUS_PER_SERVER = 8
NICS_PER_SERVER = 8
FABRICS = ("fat-tree", "fat-tree-3to1", "rail-optimized", "topoopt", "mixnet")


@dataclass(frozen=True)
class Model:
    """An MoE model and its parallelism (paper Table 1; dimensions from the public model cards)."""

    name: str
    blocks: int  # MoE blocks (layers)
    experts: int
    top_k: int
    hidden: int
    ffn: int  # per expert
    ep: int
    tp: int
    pp: int
    shared_ffn: int = 0  # shared experts' FFN width (Qwen-MoE), computed locally
    seq_len: int = 4096
    micro_batch: int = 8  # sequences per micro-batch per EP rank


#: Paper Table 1 (mfabric.md §7). LLaMA-MoE 6.7B: LLaMA-2 7B's FFN (11008) split into 16 experts.
#: Qwen-MoE 14.3B (Qwen1.5-MoE-A2.7B dimensions): the §7.3 configuration, 32 experts on EP 32
#: ("32 EP participants"; Table 1 says 64 experts on EP 16), no shared expert (Table 1 lists none;
#: ``shared_ffn`` would add one, computed locally).
MODELS = {
    "mixtral-8x22b": Model("Mixtral 8x22B", 56, 8, 2, 6144, 16384, 8, 8, 8),
    "mixtral-8x7b": Model("Mixtral 8x7B", 32, 8, 2, 4096, 14336, 8, 4, 4),
    "llama-moe": Model("LLaMA-MoE 6.7B", 32, 16, 2, 4096, 688, 16, 1, 4),
    "qwen-moe": Model("Qwen-MoE 14.3B", 24, 32, 4, 2048, 1408, 32, 1, 4),
    # not in the paper's figure: DeepSeek-V3-like dimensions, EP 64 / PP 16 (paper App. D.1)
    "deepseek-256": Model("DeepSeek-style (256 experts, top-8)", 58, 256, 8, 7168, 2048, 64, 1, 16),
}


@dataclass(frozen=True)
class Physics:
    """The one set of physical parameters for every model and fabric (docs/planning.md: which
    are datasheet values and which are calibrated against the paper's figure)."""

    peak_flops: float = 989e12  # H800/H100 dense BF16 (datasheet)
    eta: float = 0.067  # compute efficiency (calibrated: ~100 ms of expert forward, Mixtral 8x7B mb 8, §5.1)
    nvswitch_Bps: float = 450e9  # per direction (900 GB/s bidirectional, paper §7.1)
    goodput: float = 0.92  # RoCE goodput / line rate (DESIGN §8)
    a2a_efficiency: float = 1 / 3  # share of that an all-to-all's many concurrent flows attain (calibrated)
    micro_batches: int = 8  # per iteration (global batch 128 / micro-batch 8 / DP 2, README run)
    dp_exposed: float = 1.0  # share of the gradient all-reduce not hidden behind backward
    attn_share: float = 0.05  # attention FLOPs charged (1 = 8TH² + 4·mb·seq²·H; calibrated)
    tp_scaling: float = 1.0  # per-GPU compute ∝ 1/TP**tp_scaling (1 = ideal TP speed-up)
    skewed_compute: bool = False  # the busiest rank's experts set the compute (the paper's sim: no)
    skew: str = "trace"  # "trace": real router statistics; "zipf": the fork's synthetic rows
    zipf_s: float = 1.6  # skew model (the fork's wm_ep8 rows are Zipf(1.6))
    samples: int = 8  # (block, micro-batch) matrices drawn per estimate
    alpha: int = 6  # MixNet OCS NICs per server
    # MixNet routing: True = the §5.3 runtime, a pair's bytes beyond its circuits spill onto the EPS
    # (mixnet_time); False = the paper's simulator, a pair with a circuit sends on it only (htsim's
    # use_ocs when conn > 0; the planner's objective). docs/planning.md: what False does to the cells.
    eps_spill: bool = True
    reconfig_s: float = 0.025  # MixNet blocking reconfiguration (paper default)
    oversub: float = 3.0  # fat-tree-3to1: rack_servers / rack_uplinks
    rack_servers: int = 9  # the paper simulator's 3:1 fat-tree (k = 12, 648 hosts): 9 servers per ToR ...
    rack_uplinks: int = 3  # ... and 3 uplinks of a server's rate (htsim fat_tree_topology_3to1_k12.cpp)
    ecmp_draws: int = 32  # random path choices (one per flow, as htsim's rand() % paths) averaged
    gpus: int = 1024
    seed: int = 0


@dataclass
class StepTime:
    """One iteration on one fabric, and where its time goes (seconds)."""

    fabric: str
    gbps: float
    iteration_s: float
    compute_s: float
    tp_s: float
    a2a_s: float
    pp_s: float
    bubble_s: float
    dp_s: float
    reconfig_s: float
    parts: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"fabric": self.fabric, "gbps": self.gbps, "iteration_s": self.iteration_s, "compute_s": self.compute_s,
                "tp_s": self.tp_s, "a2a_s": self.a2a_s, "pp_s": self.pp_s, "bubble_s": self.bubble_s, "dp_s": self.dp_s,
                "reconfig_s": self.reconfig_s}


def zipf_shares(n: int, s: float) -> np.ndarray:
    """Zipf(s) shares of n destinations, largest first, summing to 1."""
    w = 1.0 / np.arange(1, n + 1) ** s
    return w / w.sum()


def token_matrix(ep: int, s: float, rng: np.random.Generator) -> np.ndarray:
    """The paper's EP×EP token-matrix skew model: row i (source rank) is a random permutation of
    Zipf(s) shares over the destination ranks (rows sum to 1; the paper scales them to 32768)."""
    base = zipf_shares(ep, s)
    return np.stack([rng.permutation(base) for _ in range(ep)])


def _layout(m: Model) -> tuple[np.ndarray, int]:
    """Server of every EP rank, and the region's size in servers."""
    gpus = m.ep * m.tp
    n = max(1, gpus // GPUS_PER_SERVER)
    return (np.arange(m.ep) * m.tp) // GPUS_PER_SERVER, n


def server_bytes(W: np.ndarray, m: Model) -> np.ndarray:
    """Inter-server bytes ``[n, n]`` of one all-to-all (diagonal = intra-server)."""
    rs, n = _layout(m)
    V = m.seq_len * m.micro_batch * m.top_k * m.hidden * 2.0
    R = W * V
    np.fill_diagonal(R, 0.0)
    oh = np.zeros((m.ep, n))
    oh[np.arange(m.ep), rs] = 1.0
    return oh.T @ R @ oh


def rail_time(W: np.ndarray, m: Model, B: float, nvs: float) -> float:
    """All-to-all time on a rail-optimized fabric: the busiest (server, rail) NIC, plus the
    NVSwitch forwarding of cross-rail bytes."""
    V = m.seq_len * m.micro_batch * m.top_k * m.hidden * 2.0
    n_gpu = m.ep * m.tp
    G = np.zeros((n_gpu, n_gpu))
    for s in range(m.tp):  # shard s of rank i sends to shard s of rank j
        idx = np.arange(m.ep) * m.tp + s
        G[np.ix_(idx, idx)] = W * V / m.tp
    srv = np.arange(n_gpu) // GPUS_PER_SERVER
    rail = np.arange(n_gpu) % GPUS_PER_SERVER
    remote = srv[:, None] != srv[None, :]
    Gr = np.where(remote, G, 0.0)
    n = srv.max() + 1
    egress = np.zeros((n, GPUS_PER_SERVER))
    np.add.at(egress, (srv[:, None].repeat(n_gpu, 1), rail[None, :].repeat(n_gpu, 0)), Gr)
    ingress = np.zeros((n, GPUS_PER_SERVER))
    np.add.at(ingress, (srv, rail), Gr.sum(axis=0))
    cross = np.where(remote & (rail[:, None] != rail[None, :]), G, 0.0)
    fwd = np.zeros(n)
    np.add.at(fwd, srv, cross.sum(axis=1))
    return max(egress.max(), ingress.max()) / B + fwd.max() / nvs


def fat_tree_time(Bs: np.ndarray, host_Bps: float) -> float:
    """Server-level all-to-all time on a non-blocking EPS of ``host_Bps`` per server."""
    off = Bs - np.diag(np.diag(Bs))
    return max(off.sum(axis=1).max(), off.sum(axis=0).max()) / host_Bps


def rack_time(regions: list[np.ndarray], host_Bps: float, rack_servers: int, uplinks: int, flows_per_pair: int,
              draws: int, seed: int = 0) -> float:
    """All-to-all time of every region at once on an oversubscribed fat-tree as the paper's
    simulator builds it: servers placed region after region (region r on servers ``r·n ..
    r·n+n−1``), ``rack_servers`` per ToR with ``uplinks`` uplinks of ``host_Bps`` each; every flow
    (``flows_per_pair`` per server pair: one per GPU pair) takes one uplink at random (ECMP, htsim's
    ``rand() % paths``) and, through the same aggregation position, the same-numbered downlink
    of the destination ToR. ``regions``: each region's server bytes ``[n, n]``. The time is the
    larger of the servers' own NIC term and the busiest up/down link, averaged over ``draws``
    path choices (seeded: deterministic). Regions that straddle a ToR are what pay."""
    n = regions[0].shape[0]
    server_t = max(fat_tree_time(B, host_Bps) for B in regions)
    src, dst, size = [], [], []
    for r, B in enumerate(regions):
        rack = (r * n + np.arange(n)) // rack_servers
        i, j = np.nonzero((rack[:, None] != rack[None, :]) & (B > 0))
        src.append(np.repeat(rack[i], flows_per_pair))
        dst.append(np.repeat(rack[j], flows_per_pair))
        size.append(np.repeat(B[i, j] / flows_per_pair, flows_per_pair))
    s, d, w = np.concatenate(src), np.concatenate(dst), np.concatenate(size)
    if not len(w):
        return server_t
    racks = int(max(s.max(), d.max())) + 1
    rng = np.random.default_rng(seed)
    worst = []
    for _ in range(draws):
        u = rng.integers(uplinks, size=len(w))
        up = np.bincount(s * uplinks + u, weights=w, minlength=racks * uplinks)
        down = np.bincount(d * uplinks + u, weights=w, minlength=racks * uplinks)
        worst.append(max(up.max(), down.max()))
    return max(server_t, float(np.mean(worst)) / host_Bps)


def reconfig_exposed(remaining_s: float, phases: list[tuple[str, float, float]]) -> float:
    """Time a (block, micro-batch)'s all-to-alls lose to a reconfiguration still running for
    ``remaining_s`` when the first of them starts. ``phases`` in order: ``("a2a", t_circuits,
    t_eps_only)`` or ``("compute", s, 0)``. While the OCS is switching the region's all-to-all is
    not stopped: it runs on the EPS NICs alone (their flows are never paused, paper §5.3 / the
    simulator's topology manager), a fraction ``r / t_eps`` of it in the ``r`` s left, the rest
    on circuits and EPS once they are up; compute lets the switching go on. Bounded by each
    all-to-all's EPS-only time, however slow the OCS."""
    r, lost = remaining_s, 0.0
    for kind, t, t_eps in phases:
        if r <= 0:
            break
        if kind == "compute":
            r -= t
            continue
        if r >= t_eps:
            lost += t_eps - t
            r -= t_eps
        else:
            took = r + (1 - r / t_eps) * t
            lost += took - t
            r = 0.0
    return lost


def mixnet_time(Bs: np.ndarray, C: np.ndarray, circuit_Bps: float, eps_Bps) -> float:
    """All-to-all time on circuits ``C`` plus ``eps_Bps`` of EPS per server (a number, or one per
    server), the inter-host step running over both OCS and EPS NICs (paper §5.3): a pair's bytes
    beyond what its circuits carry in time t spill onto the EPS; the smallest feasible t (bisection)."""
    n = Bs.shape[0]
    off = ~np.eye(n, dtype=bool)
    D = np.where(off, Bs, 0.0)
    if not D.any():
        return 0.0
    cap = C.astype(float) * circuit_Bps
    eps = np.broadcast_to(np.asarray(eps_Bps, dtype=float), (n,))

    def feasible(t: float) -> bool:
        rest = np.maximum(0.0, D - cap * t)
        return bool((rest.sum(axis=1) <= eps * t).all() and (rest.sum(axis=0) <= eps * t).all())

    lo, hi = 0.0, float(D.sum()) / max(float(eps.min()), 1e-9) + 1e-12
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if feasible(mid) else (mid, hi)
    return hi


def region_objective(B: np.ndarray, C: np.ndarray, rates: LinkRates) -> np.ndarray:
    """The planner objective's quantity (:func:`mfctl.fabric.planner.objective`: the 4 all-to-alls
    per layer, ``2 Σ_l [t(B_l) + t(B_lᵀ)]``, seconds) with this model's all-to-all time
    (:func:`mixnet_time`: circuits and EPS together); ``[K]`` for candidates ``C`` ``[K, n, n]``.
    The controller's reconfiguration policy prices a change with it."""
    B = np.asarray(B, dtype=float)
    if B.ndim == 2:
        B = B[None]
    C = np.asarray(C)
    if C.ndim == 2:
        C = C[None]
    return np.array([2.0 * sum(mixnet_time(b, c, rates.circuit_Bps, rates.eps_Bps) +
                               mixnet_time(b.T, c, rates.circuit_Bps, rates.eps_Bps) for b in B) for c in C])


def _paths(C: np.ndarray, i: int, j: int) -> list[list[tuple[int, int]]]:
    """The direct circuit and the 2-hop relays of pair (i, j); with neither, every shortest path."""
    n = C.shape[0]
    out = [[(i, j)]] if C[i, j] > 0 else []
    out += [[(i, k), (k, j)] for k in range(n) if k not in (i, j) and C[i, k] > 0 and C[k, j] > 0]
    if out:
        return out
    frontier = [[i]]
    seen = {i}
    while frontier:
        nxt = []
        for path in frontier:
            for k in np.nonzero(C[path[-1]] > 0)[0]:
                if int(k) == j:
                    out.append([(a, b) for a, b in zip(path, path[1:] + [j])])
                elif int(k) not in seen:
                    nxt.append(path + [int(k)])
        if out:
            return out
        seen |= {p[-1] for p in nxt}
        frontier = nxt
    return out


def multihop_time(Bs: np.ndarray, C: np.ndarray, circuit_Bps: float) -> float:
    """All-to-all time on static circuits ``C`` with no EPS: each pair's bytes split over its
    direct circuits and the 2-hop relays through other servers in proportion to their capacity
    (a relayed byte takes two circuits); a pair with neither uses its shortest paths equally
    (TopoOpt's host forwarding). The busiest circuit direction sets the time."""
    n = Bs.shape[0]
    load = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            if i == j or Bs[i, j] <= 0:
                continue
            paths = _paths(C, i, j)
            if not paths:
                return float("inf")
            caps = [min(float(C[a, b]) for a, b in p) / len(p) for p in paths]
            tot = sum(caps)
            for p, c in zip(paths, caps):
                for (a, b) in p:
                    load[a, b] += Bs[i, j] * c / tot
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(C > 0, load / np.where(C > 0, C, 1) / circuit_Bps, np.where(load > 0, np.inf, 0.0))
    return float(t.max())


def topoopt_degrees(m: Model, dp: int, micro_batches: int) -> tuple[int, int, int]:
    """TopoOpt's split of a server's 8 optical NICs between the PP chain, the DP ring and the
    region's all-to-all: each class present gets its minimum (PP 2: one circuit to each neighbour
    stage; DP 1; all-to-all 1), the rest goes by each class's bytes per iteration (largest
    remainder) — TopoOpt sizes the topology to the job's traffic."""
    _, n = _layout(m)
    T, H = m.seq_len * m.micro_batch, m.hidden
    bps = m.blocks / m.pp
    ranks_per_server = GPUS_PER_SERVER // m.tp if m.ep * m.tp >= GPUS_PER_SERVER else m.ep
    remote = 1 - ranks_per_server / m.ep
    vol = {"ep": bps * micro_batches * 4 * T * m.top_k * H * 2 * ranks_per_server * remote if n > 1 else 0.0,
           "pp": micro_batches * 2 * T * H * 2 / m.tp * GPUS_PER_SERVER if m.pp > 1 else 0.0,
           "dp": 2 * 2 * bps * (4 * H * H + (m.experts / m.ep) * 3 * H * m.ffn) / m.tp * GPUS_PER_SERVER
           if dp * m.ep > 1 else 0.0}
    deg = {"pp": 2 if vol["pp"] else 0, "dp": 1 if vol["dp"] else 0, "ep": 1 if vol["ep"] else 0}
    left = NICS_PER_SERVER - sum(deg.values())
    tot = sum(vol.values()) or 1.0
    share = {k: left * v / tot for k, v in vol.items()}
    for k in share:
        deg[k] += int(share[k])
    rest = NICS_PER_SERVER - sum(deg.values())
    for k in sorted(share, key=lambda k: share[k] - int(share[k]), reverse=True)[:rest]:
        deg[k] += 1
    return deg["pp"], deg["dp"], deg["ep"]


def trace_matrix(m: Model, rng: np.random.Generator) -> np.ndarray:
    """An EP×EP token matrix from real router statistics (``mfctl/data/routing``): every EP
    rank's micro-batch comes from one text domain (drawn per sample) at one traced layer; its row
    is that domain's expert popularity folded onto the EP ranks (contiguous placement). Mixtral's
    trace for 8-expert models, OLMoE's (64 experts) for the others, folded to the model's experts."""
    tr = load_routing("mixtral" if m.experts == 8 else "olmoe")
    p = tr.probs  # [D, layers, E_trace]
    e_tr = p.shape[-1]
    if m.experts > e_tr and m.experts % e_tr == 0:  # more experts: tiled, ±30 % lognormal (fixed seed)
        p = np.tile(p, m.experts // e_tr) * np.random.default_rng(0).lognormal(0, 0.3, size=(1, 1, m.experts))
        p = p / p.sum(axis=-1, keepdims=True)
        e_tr = m.experts
    if e_tr % m.experts:
        raise ValueError(f"trace of {e_tr} experts does not fold onto {m.experts}")
    p = p.reshape(p.shape[0], p.shape[1], m.experts, e_tr // m.experts).sum(-1)
    p = p.reshape(p.shape[0], p.shape[1], m.ep, m.experts // m.ep).sum(-1)  # → ranks
    layer = rng.integers(p.shape[1])
    doms = rng.integers(p.shape[0], size=m.ep)
    return p[doms, layer]


@lru_cache(maxsize=256)
def _samples(m: Model, skew: str, s: float, count: int, seed: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    if skew == "zipf":
        return tuple(token_matrix(m.ep, s, rng) for _ in range(count))
    if skew == "trace":
        return tuple(trace_matrix(m, rng) for _ in range(count))
    raise ValueError(f"unknown skew model {skew!r}; trace or zipf")


def step(m: Model, fabric: str, gbps: float, ph: Physics = Physics()) -> StepTime:
    """One iteration of ``m`` on ``fabric`` with ``gbps`` NICs (module doc)."""
    if fabric not in FABRICS:
        raise ValueError(f"unknown fabric {fabric!r}; one of {', '.join(FABRICS)}")
    if ph.gpus % (m.ep * m.tp * m.pp):
        raise ValueError(f"{ph.gpus} GPUs do not divide into EP {m.ep} x TP {m.tp} x PP {m.pp}")
    B = gbps * 1e9 / 8 * ph.goodput  # one NIC, bytes/s
    dp = ph.gpus // (m.ep * m.tp * m.pp)
    servers = ph.gpus // GPUS_PER_SERVER
    _, n = _layout(m)
    Ws = _samples(m, ph.skew, ph.zipf_s, ph.samples, ph.seed)
    T = m.seq_len * m.micro_batch
    H, tp = m.hidden, m.tp
    f = ph.eta * ph.peak_flops * m.tp ** (1.0 - ph.tp_scaling)  # (divided by tp below)
    attn = ph.attn_share * (8 * T * H * H + 4 * m.micro_batch * m.seq_len ** 2 * H) / tp / f
    shared = 6 * H * m.shared_ffn * T / tp / f
    h = float(np.mean([W.sum(axis=0).max() for W in Ws]))  # busiest rank / mean
    # 6·H·F FLOPs per token copy; the busiest rank receives T·k·h copies (W's mean column sum is 1)
    expert = 6 * H * m.ffn * T * m.top_k * (h if ph.skewed_compute else 1.0) / tp / f
    comp_layer = 3 * (attn + shared + expert)
    tp_layer = 0.0 if tp == 1 else 4 * 2 * (tp - 1) / tp * T * H * 2 / ph.nvswitch_Bps
    # all-to-all per fabric (mean over the skew samples of one all-to-all; dispatch = W, combine = Wᵀ)
    Ba = B * ph.a2a_efficiency  # one NIC's rate for all-to-all traffic
    eps_Bps = (NICS_PER_SERVER - ph.alpha) * Ba  # MixNet's EPS NICs of a server
    a2as, eps_only = [], []
    d_pp, d_dp, d_ep = topoopt_degrees(m, dp, ph.micro_batches)
    C_static = None
    if fabric == "topoopt" and n > 1:
        C_static = _static_plan(m, d_ep, _traffic_key(ph))
    regions = servers // n
    for idx, W in enumerate(Ws):
        ts, es = [], []
        for d, Wd in enumerate((W, W.T)):
            Bs = server_bytes(Wd, m)
            intra = float(np.diag(Bs).max()) / ph.nvswitch_Bps
            if n == 1:
                ts.append(intra)
                es.append(intra)
                continue
            if fabric == "fat-tree":
                t = fat_tree_time(Bs, NICS_PER_SERVER * Ba)
            elif fabric == "fat-tree-3to1":
                t = _rack_a2a(m, _traffic_key(ph), idx, d, regions) / (NICS_PER_SERVER * Ba)
            elif fabric == "rail-optimized":
                t = rail_time(Wd, m, Ba, ph.nvswitch_Bps)
            elif fabric == "topoopt":
                assert C_static is not None  # (planned above: the region has servers to connect)
                t = multihop_time(Bs, C_static, Ba)
            else:
                C = _mixnet_plan(m, _traffic_key(ph), idx)
                t = (mixnet_time(Bs, C, Ba, eps_Bps) if ph.eps_spill else
                     float(a2a_time(Bs, C, LinkRates(circuit_Bps=Ba, eps_Bps=eps_Bps))[0, 0]))
                es.append(max(intra, fat_tree_time(Bs, eps_Bps)))
            ts.append(max(intra, t))
        a2as.append(ts)
        eps_only.append(es)
    a2a_layer = float(np.mean([2 * sum(ts) for ts in a2as]))  # FP dispatch + combine, BP the same two
    # PP: activations to the next stage (forward) and their gradients back, per micro-batch
    pp_bytes = T * H * 2 / tp
    pp_gpu_Bps = {"fat-tree": B, "rail-optimized": B, "fat-tree-3to1": B / ph.oversub,
                  "mixnet": (NICS_PER_SERVER - ph.alpha) * B / GPUS_PER_SERVER,
                  "topoopt": max(d_pp // 2, 1) * B / GPUS_PER_SERVER}[fabric]
    pp_mb = 0.0 if m.pp == 1 else 2 * pp_bytes / pp_gpu_Bps
    blocks_per_stage = m.blocks / m.pp
    stage_mb = blocks_per_stage * (comp_layer + tp_layer + a2a_layer) + pp_mb
    mb = ph.micro_batches
    slots = mb + m.pp - 1
    # DP gradient all-reduce (bf16), one stage's weights per GPU
    dense_p = blocks_per_stage * (4 * H * H + 3 * H * m.shared_ffn) / tp
    expert_p = blocks_per_stage * (m.experts / m.ep) * 3 * H * m.ffn / tp
    dp_gpu_Bps = {"fat-tree": B, "rail-optimized": B, "fat-tree-3to1": B / ph.oversub,
                  "mixnet": (NICS_PER_SERVER - ph.alpha) * B / GPUS_PER_SERVER,
                  "topoopt": max(d_dp, 1) * B / GPUS_PER_SERVER}[fabric]

    def ring(params: float, k: int) -> float:
        return 0.0 if k <= 1 else 2 * (k - 1) / k * params * 2 / dp_gpu_Bps

    dp_s = ph.dp_exposed * (ring(dense_p, dp * m.ep) + ring(expert_p, dp))
    reconf = 0.0
    if fabric == "mixnet":
        # one blocking reconfiguration per iteration; later ones, one per (block, micro-batch) in
        # FP (dispatch; combine is its transpose on the same circuits) and one in BP, are made
        # while the region computes (one block's forward, resp. backward compute); what is left
        # of them when the all-to-all starts slows it to the EPS alone (reconfig_exposed)
        fwd = attn + shared + expert
        lost = []
        for ts, es in zip(a2as, eps_only):
            if n == 1:
                lost.append(0.0)
                continue
            (td, tc), (ed, ec) = ts, es
            fp = reconfig_exposed(ph.reconfig_s - fwd, [("a2a", td, ed), ("compute", expert + shared, 0.0),
                                                         ("a2a", tc, ec)])
            bp = reconfig_exposed(ph.reconfig_s - 2 * fwd, [("a2a", tc, ec), ("compute", 2 * (expert + shared), 0.0),
                                                            ("a2a", td, ed)])
            lost.append(fp + bp)
        reconf = ph.reconfig_s + slots * blocks_per_stage * float(np.mean(lost))
    it = slots * stage_mb + dp_s + reconf
    return StepTime(fabric=fabric, gbps=gbps, iteration_s=it,
                    compute_s=mb * blocks_per_stage * comp_layer, tp_s=mb * blocks_per_stage * tp_layer,
                    a2a_s=mb * blocks_per_stage * a2a_layer, pp_s=mb * pp_mb, bubble_s=(m.pp - 1) * stage_mb,
                    dp_s=dp_s, reconfig_s=reconf, parts={"h": h, "degrees": (d_pp, d_dp, d_ep)})


def _traffic_key(ph: Physics) -> Physics:
    """The fields that fix the traffic, the plans and the racks (the cache key of the helpers
    below: calibrating ``eta`` or sweeping the latency does not re-plan)."""
    d = Physics()
    return replace(d, skew=ph.skew, zipf_s=ph.zipf_s, samples=ph.samples, alpha=ph.alpha, gpus=ph.gpus, seed=ph.seed,
                   rack_servers=ph.rack_servers, rack_uplinks=ph.rack_uplinks, ecmp_draws=ph.ecmp_draws)


@lru_cache(maxsize=1024)
def _rack_a2a(m: Model, ph: Physics, idx: int, direction: int, regions: int) -> float:
    """The 3:1 fat-tree's all-to-all for skew sample ``idx`` (0 dispatch, 1 combine) at 1 byte/s
    per server: every region at once, region r on sample ``idx + r`` (:func:`rack_time`)."""
    Ws = _samples(m, ph.skew, ph.zipf_s, ph.samples, ph.seed)
    mats = [server_bytes(Ws[(idx + r) % len(Ws)].T if direction else Ws[(idx + r) % len(Ws)], m) for r in range(regions)]
    flows = (GPUS_PER_SERVER // m.tp) ** 2 * m.tp  # GPU pairs (rank shard s to shard s) per server pair
    return rack_time(mats, 1.0, ph.rack_servers, ph.rack_uplinks, flows, ph.ecmp_draws, ph.seed)


@lru_cache(maxsize=1024)
def _mixnet_plan(m: Model, ph: Physics, idx: int) -> np.ndarray:
    """MixNet's circuits for skew sample ``idx`` (planned on its dispatch matrix; the planner
    symmetrises). The plan does not depend on the link speed (circuit and EPS rates scale together)."""
    W = _samples(m, ph.skew, ph.zipf_s, ph.samples, ph.seed)[idx]
    _, n = _layout(m)
    rates = LinkRates(circuit_Bps=1.0, eps_Bps=float(NICS_PER_SERVER - ph.alpha))
    return plan(server_bytes(W, m), np.full(n, ph.alpha), rates, method="local").circuits


@lru_cache(maxsize=256)
def _static_plan(m: Model, ports: int, ph: Physics) -> np.ndarray:
    """TopoOpt's one topology for the job: circuits planned on the average (block, micro-batch)
    matrix, duplex (symmetric) demand, ``ports`` per server."""
    Ws = _samples(m, ph.skew, ph.zipf_s, 64, ph.seed + 1)
    avg = np.mean([server_bytes(W, m) + server_bytes(W.T, m) for W in Ws], axis=0)
    _, n = _layout(m)
    rates = LinkRates(circuit_Bps=1.0, eps_Bps=1e-9)
    return plan(avg, np.full(n, ports), rates, method="greedy").circuits


def with_latency(ph: Physics, latency_s: float) -> Physics:
    """The same physics with another reconfiguration latency."""
    return replace(ph, reconfig_s=latency_s)
