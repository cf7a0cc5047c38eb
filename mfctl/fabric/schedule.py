"""FSMoE scheduling: the forward/backward pipeline degrees and gradient partitions of a model.

Pure: a playbook's model and parallelism, an inventory's first region, link rates and (optionally)
``mfctl profile``'s fits in, a :class:`Schedule` out (what ``mfctl schedule`` prints). The step
time of every choice is :func:`mfctl.fabric.stepmodel.iteration_time` on the mean routing of the
model's trace, with the circuits the planner would give that demand (FSMoE, arXiv 2501.10714,
§4–5; docs/design-notes.md)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

#: pipeline degrees r tried for forward and backward (FSMoE §4)
DEGREES = (1, 2, 4, 8)
#: gradient all-reduce partitions tried (FSMoE §5)
PARTITIONS = (1, 2, 4, 8, 16)
#: all-reduce fixed cost without a profile, s (an assumed NCCL-class latency: ``mfctl profile`` measures
#: it); the all-to-all's fixed cost and the expert GEMM efficiency η without a profile are StepSpec's defaults
DEFAULT_ALPHA_AR_S = 22e-6

@dataclass
class Schedule:
    """Every choice's predicted step time (s, including the best partitioning's exposed gradient
    all-reduce), the partitions' exposed all-reduce (s), the best of each, and the gradient bytes
    per GPU. ``profiled``: costs came from ``mfctl profile``'s fits."""

    choices: list[dict] = field(default_factory=list)  # {pipeline_degree, bp_pipeline_degree, iteration_s}
    gradient_partitions: list[dict] = field(default_factory=list)  # {partitions, exposed_allreduce_s}
    best: dict = field(default_factory=dict)
    best_partitions: int = 1
    grad_bytes: float = 0.0
    profiled: bool = False
    #: the costs priced with: ``alltoall_alpha_s`` (s), ``gemm_eta`` (expert GEMM efficiency, 0–1, of
    #: StepSpec.peak_flops), ``all_reduce_alpha_s`` (s), and ``profiled``: the tasks whose fit set them
    costs: dict = field(default_factory=dict)
    #: what the prices rest on that the user should know (a fit used far beyond what it measured)
    warnings: list[str] = field(default_factory=list)

    def command(self, playbook) -> str:
        """The ``mfctl run`` line with the best choice."""
        return (f"mfctl run {playbook} --pipeline-degree {self.best['pipeline_degree']} "
                f"--bp-pipeline-degree {self.best['bp_pipeline_degree']} --grad-partitions {self.best_partitions}")


def mean_layer_tokens(trace, layers: int, tokens_per_rank: int, ep: int) -> list[np.ndarray]:
    """Per MoE layer, the EP-rank × expert token counts of the trace's mean routing: every rank
    sends ``tokens_per_rank × top_k`` tokens spread as the trace's mean probabilities say."""
    mean = trace.probs.mean(axis=0)
    return [np.tile(mean[trace.trace_layer_for(layer)] * tokens_per_rank * trace.top_k, (ep, 1)) for layer in range(layers)]


def plan_schedule(pb, inv, rates, fits: dict[str, dict] | None = None) -> Schedule:
    """Choose pipeline degrees and gradient partitions for playbook ``pb`` on inventory ``inv``'s
    first region, with ``rates`` (:class:`mfctl.fabric.planner.LinkRates`, bytes/s) and ``fits``
    (task → fit dict of ``mfctl profile``: ``alltoall``/``all_reduce`` ``alpha_s``, ``gemm``
    ``rate_per_s``; without them: :class:`StepSpec`'s defaults and :data:`DEFAULT_ALPHA_AR_S`)."""
    from mfctl.fabric import mapping
    from mfctl.fabric.planner import plan
    from mfctl.fabric.stepmodel import StepSpec, expert_gemm_flops, grad_allreduce_exposed_s, grad_sync_bytes, iteration_time
    from mfctl.fabric.traffic import expert_to_rank, load_routing, rank_matrix, rank_to_server, server_matrix

    fits = fits or {}
    par, m, tr_cfg = pb.parallelism, pb.model, pb.training
    tr = load_routing(m.routing, tr_cfg.domains)
    gps = inv.hosts[0].gpus.count
    reg = inv.regions[0]
    n = len(reg.hosts)
    er, rs = expert_to_rank(tr.num_experts, par.ep), rank_to_server(par.ep, par.tp, gps)
    tok = tr_cfg.seq_len * tr_cfg.micro_batch
    layers = mean_layer_tokens(tr, m.layers, tok, par.ep)
    B = np.stack([server_matrix(rank_matrix(t, er, par.ep), rs, n, m.hidden * m.bytes_per_element) for t in layers])
    C = plan(B, np.array([len(mapping.region_lanes(inv, reg.hosts)[x]) for x in reg.hosts]), rates).circuits
    alpha_a2a = fits.get("alltoall", {}).get("alpha_s", StepSpec.alpha_a2a_s)
    eta = min(1.0, fits["gemm"]["rate_per_s"] / StepSpec.peak_flops) if "gemm" in fits else StepSpec.eta_expert
    world = sum(inv.host(h).gpus.count for h in reg.hosts)
    alpha_ar = fits.get("all_reduce", {}).get("alpha_s", DEFAULT_ALPHA_AR_S)
    out = Schedule(profiled=bool(fits), costs={"alltoall_alpha_s": alpha_a2a, "gemm_eta": eta, "all_reduce_alpha_s": alpha_ar,
                                               "profiled": [t for t in ("alltoall", "gemm", "all_reduce") if t in fits]})
    spec = None
    for rf, rb in itertools.product(DEGREES, repeat=2):
        spec = StepSpec(hidden=m.hidden, ffn_hidden=m.ffn_hidden, gated=m.gated, bytes_per_element=m.bytes_per_element,
                        ep=par.ep, tp=par.tp, gpus_per_server=gps, tokens_per_rank=tok,
                        eta_expert=eta, alpha_a2a_s=alpha_a2a, pipeline_degree=rf, bp_pipeline_degree=rb)
        it = iteration_time(layers, C, er, rs, tr_cfg.micro_batches, spec, rates).seconds
        out.choices.append({"pipeline_degree": rf, "bp_pipeline_degree": rb, "iteration_s": it})
    if spec is None:  # DEGREES is empty: no choice was priced, so there is no step to size the gradients of
        raise ValueError("no pipeline degrees to try (DEGREES is empty)")
    # the gradient all-reduce over the EPS, split into p partitions overlapped with backward (FSMoE §5)
    out.grad_bytes = grad_sync_bytes(spec, m.layers, tr.num_experts, world)
    out.gradient_partitions = [
        {"partitions": p, "exposed_allreduce_s": grad_allreduce_exposed_s(out.grad_bytes, p, n, gps, rates.eps_Bps, alpha_ar)}
        for p in PARTITIONS]
    bestp = min(out.gradient_partitions, key=lambda r: r["exposed_allreduce_s"])
    out.best_partitions = bestp["partitions"]
    for r in out.choices:  # the step time includes the exposed gradient all-reduce of the best partitioning
        r["iteration_s"] += bestp["exposed_allreduce_s"]
    out.best = min(out.choices, key=lambda r: r["iteration_s"])
    gemm = fits.get("gemm") or {}
    f = max(expert_gemm_flops(rank_matrix(t, er, par.ep), spec) for t in layers)
    if gemm.get("n_max") and f > EXTRAPOLATION * gemm["n_max"]:
        out.warnings.append(
            f"the profiled expert GEMM rate was measured on GEMMs of at most {gemm['n_max']:.3g} FLOP; this playbook's "
            f"model ({m.hidden} x {m.ffn_hidden}) does {f:.3g} FLOP per expert GEMM, {f / gemm['n_max']:,.0f}x more: its "
            "times are extrapolated from the fit (a profile of another model or hardware?)")
    return out


#: a fit used at sizes more than this many times its largest measured one is said to be extrapolated
EXTRAPOLATION = 10.0
