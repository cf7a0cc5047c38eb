"""Synthetic-but-real MoE routing workload: real per-domain router statistics, mixed per
micro-batch.

Each EP rank's micro-batch comes from one text domain; the domain mixture of the data
loader changes every ``phase_iterations`` iterations (a Dirichlet draw with
``concentration``), so traffic is skewed and shifts during training. Every rank of a job
computes the same numbers from the same seed — as Megatron's dispatcher all-gathers
``num_global_tokens_per_expert`` — so any worker can report the region's matrix.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mfctl.fabric.traffic import RoutingTrace


@dataclass
class Workload:
    trace: RoutingTrace
    ep: int
    layers: int
    tokens_per_rank: int  # tokens of one micro-batch on one EP rank
    micro_batches: int
    seed: int = 1
    concentration: float = 0.3
    phase_iterations: int = 10

    def mixture(self, iteration: int) -> np.ndarray:
        phase = iteration // max(1, self.phase_iterations)
        rng = np.random.default_rng([self.seed, 7919, phase])
        return rng.dirichlet(np.full(len(self.trace.domains), self.concentration))

    def tokens(self, iteration: int) -> np.ndarray:
        """Token copies ``[micro_batch, layer, ep_rank, expert]`` for one iteration."""
        rng = np.random.default_rng([self.seed, iteration])
        w = self.mixture(iteration)
        nd = len(self.trace.domains)
        dom = rng.choice(nd, size=(self.micro_batches, self.ep), p=w)
        tl = [self.trace.trace_layer_for(layer) for layer in range(self.layers)]
        p = self.trace.probs[:, tl, :]  # [domain, layer, expert]
        probs = p[dom]  # [mb, ep, layer, expert]
        probs = np.moveaxis(probs, 2, 1)  # [mb, layer, ep, expert]
        n = self.tokens_per_rank * self.trace.top_k
        return rng.multinomial(n, probs).astype(float)
