"""Step-time model of an MoE training iteration (DESIGN §8).

Per MoE layer and micro-batch:
- expert compute forward ``F = 2·g·X·M·H / TP`` FLOPs per GPU (g = 3 for SwiGLU, 2 for
  GELU; X = token copies on the busiest EP rank), backward 2×F, at ``η·peak``
  (A100 peak 312 TFLOP/s dense BF16, datasheet; η ≈ 0.65 large experts);
- attention/dense forward ``(8·T·H² + 4·T²·H) / TP`` FLOPs per GPU (T tokens per DP rank,
  standard transformer FLOP count), backward 2×, at ``η_dense·peak``;
- four all-to-alls, each ``α + max(intra-server bytes / NVLink, inter-server time)`` with
  the inter-server time of :func:`mfctl.fabric.planner.a2a_time` (circuits or EPS);
- FSMoE pipelining of degree r: ``T(r) = 2a + c + (r−1)·max(2a, c)`` with per-chunk
  ``a = α + t_a2a/r``, ``c = α_e + t_exp/r`` (FSMoE, arXiv 2501.10714); r is chosen per
  layer from {1, 2, 4, 8} when ``pipeline_degree = 0``.
Gradient all-reduce (:func:`grad_allreduce_exposed_s`): once per iteration, over the EPS
(it does not change with the OCS topology), split into p partitions overlapped with the
backward pass, of which p start-up costs and the last partition stay exposed (FSMoE §5).
The optimizer step is not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mfctl.fabric.planner import LinkRates, a2a_time
from mfctl.fabric.traffic import rank_matrix, server_matrix


@dataclass
class StepSpec:
    hidden: int = 4096
    ffn_hidden: int = 14336
    gated: bool = True  # SwiGLU (g = 3) vs GELU (g = 2)
    bytes_per_element: int = 2
    ep: int = 8
    tp: int = 4
    gpus_per_server: int = 8
    tokens_per_rank: int = 4096  # micro-batch tokens per DP rank (= per EP rank)
    peak_flops: float = 312e12  # A100 BF16 dense, datasheet
    eta_expert: float = 0.65
    eta_dense: float = 0.55
    nvlink_Bps: float = 230e9  # A100 NVLink per direction (DESIGN §8)
    alpha_a2a_s: float = 100e-6
    alpha_expert_s: float = 20e-6
    pipeline_degree: int = 0  # forward; 0 = choose the best of 1, 2, 4, 8
    bp_pipeline_degree: int = 0  # backward; 0 = choose the best of 1, 2, 4, 8

    @property
    def bytes_per_token(self) -> float:
        return float(self.hidden * self.bytes_per_element)


@dataclass
class LayerTime:
    a2a_s: float  # one all-to-all
    expert_fwd_s: float
    dense_fwd_s: float
    moe_fwd_s: float
    moe_bwd_s: float
    total_s: float
    inter_bytes: float  # inter-server bytes of the 4 all-to-alls
    ocs_bytes: float  # of which on circuits


def _pipelined(a2a: float, exp: float, alpha: float, alpha_e: float, r: int) -> float:
    a = alpha + a2a / r
    c = alpha_e + exp / r
    return 2 * a + c + (r - 1) * max(2 * a, c)


def expert_gemm_flops(rank_tokens: np.ndarray, spec: StepSpec) -> float:
    """FLOP of the busiest EP rank's expert GEMMs in one micro-batch's forward: the token copies arriving
    at it (``rank_tokens[r, r']``, EP rank × EP rank) through ``2·g`` matrix products of H × F per
    token (g = 3 gated: gate, up, down; else 2), split over TP."""
    g = 3 if spec.gated else 2
    x = rank_tokens.sum(axis=0).max()  # token copies arriving at the busiest EP rank
    return float(2 * g * x * spec.ffn_hidden * spec.hidden / spec.tp)


def layer_time(tokens: np.ndarray, C: np.ndarray, expert_rank: np.ndarray, rank_server: np.ndarray,
               spec: StepSpec, rates: LinkRates) -> LayerTime:
    """Time of one MoE layer (fwd + bwd) for one micro-batch.

    ``tokens[r, e]``: token copies from EP rank r to expert e; ``C``: circuits ``[n, n]``.
    """
    n = C.shape[0]
    rt = rank_matrix(tokens, expert_rank, spec.ep)
    B = server_matrix(rt, rank_server, n, spec.bytes_per_token)
    intra = np.diag(B).max() / spec.nvlink_Bps
    t_inter = max(float(a2a_time(B, C, rates)[0, 0]), float(a2a_time(B.T, C, rates)[0, 0]))
    a2a = spec.alpha_a2a_s + max(intra, t_inter)
    f = expert_gemm_flops(rt, spec)
    exp_fwd = f / (spec.eta_expert * spec.peak_flops)
    T, H = spec.tokens_per_rank, spec.hidden
    dense_fwd = (8 * T * H * H + 4 * T * T * H) / spec.tp / (spec.eta_dense * spec.peak_flops)
    rs = [spec.pipeline_degree] if spec.pipeline_degree else [1, 2, 4, 8]
    rb = [spec.bp_pipeline_degree] if spec.bp_pipeline_degree else [1, 2, 4, 8]
    fwd = min(_pipelined(a2a, exp_fwd, spec.alpha_a2a_s, spec.alpha_expert_s, r) for r in rs)
    bwd = min(_pipelined(a2a, 2 * exp_fwd, spec.alpha_a2a_s, spec.alpha_expert_s, r) for r in rb)
    off = ~np.eye(n, dtype=bool)
    inter = float(B[off].sum()) * 4
    ocs = float(B[off & (C > 0)].sum()) * 4
    return LayerTime(a2a_s=a2a, expert_fwd_s=exp_fwd, dense_fwd_s=dense_fwd, moe_fwd_s=fwd, moe_bwd_s=bwd,
                     total_s=3 * dense_fwd + fwd + bwd, inter_bytes=inter, ocs_bytes=ocs)


@dataclass
class IterationTime:
    seconds: float
    a2a_s: float  # summed all-to-all time (4 per layer per micro-batch)
    compute_s: float
    inter_bytes: float
    ocs_bytes: float


def iteration_time(tokens_by_layer: list[np.ndarray], C: np.ndarray, expert_rank: np.ndarray,
                   rank_server: np.ndarray, micro_batches: int, spec: StepSpec, rates: LinkRates) -> IterationTime:
    """Iteration time for per-layer, per-micro-batch token matrices (same for every micro-batch)."""
    tot = a2a = comp = inter = ocs = 0.0
    for tokens in tokens_by_layer:
        lt = layer_time(tokens, C, expert_rank, rank_server, spec, rates)
        tot += lt.total_s
        a2a += 4 * lt.a2a_s
        comp += 3 * lt.dense_fwd_s + 3 * lt.expert_fwd_s
        inter += lt.inter_bytes
        ocs += lt.ocs_bytes
    m = micro_batches
    return IterationTime(seconds=tot * m, a2a_s=a2a * m, compute_s=comp * m, inter_bytes=inter * m, ocs_bytes=ocs * m)


def grad_sync_bytes(spec: StepSpec, layers: int, num_experts: int, world: int) -> float:
    """Gradient bytes one GPU all-reduces per iteration: the dense (attention) parameters,
    ``layers·4·H²/TP`` (data-parallel degree ``world/TP``), plus the expert parameters
    ``layers·(E/EP)·g·H·F/TP`` when experts are replicated (``world/(EP·TP) > 1``)."""
    g = 3 if spec.gated else 2
    dense = layers * 4 * spec.hidden ** 2 / spec.tp
    experts = layers * (num_experts / spec.ep) * g * spec.hidden * spec.ffn_hidden / spec.tp
    return (dense + (experts if world // (spec.ep * spec.tp) > 1 else 0.0)) * spec.bytes_per_element


def grad_allreduce_exposed_s(grad_bytes: float, partitions: int, servers: int, gpus_per_server: int,
                             eps_Bps: float, alpha_s: float = 22e-6) -> float:
    """Exposed time (s) of the per-iteration gradient all-reduce in ``partitions`` buckets.

    A ring all-reduce over ``servers`` on the EPS moves ``2(n−1)/n`` of every server's
    gradients (``gpus_per_server · grad_bytes``) through its EPS NICs (``eps_Bps``, bytes/s):
    ``T = 2(n−1)/n · G·b / eps_Bps``. Split into p partitions overlapped with backward, the
    last partition and p start-ups (``alpha_s`` each) stay exposed: ``p·α + T/p`` (FSMoE
    §5, arXiv 2501.10714). One server: NVLink only, 0 here."""
    if servers <= 1 or partitions < 1:
        return 0.0
    t = 2 * (servers - 1) / servers * gpus_per_server * grad_bytes / eps_Bps
    return partitions * alpha_s + t / partitions

