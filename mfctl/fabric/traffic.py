"""Traffic matrices from MoE routing.

Shapes and units:
- ``tokens[r, e]``: token copies (one per top-k slot) that EP rank ``r`` sends to expert
  ``e`` in one all-to-all (dispatch) — Megatron's ``num_global_tokens_per_expert``.
- server matrices ``B[i, j]``: bytes server ``i`` sends to server ``j`` in one dispatch.
  The combine all-to-all is the transpose; forward + backward give 4 all-to-alls per MoE
  layer (DESIGN §6).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources

import numpy as np

SHIPPED_TRACES = {"mixtral": "mixtral", "olmoe": "olmoe"}


@dataclass
class RoutingTrace:
    """Real router statistics: ``probs[d, l, e]`` = share of top-k selections of expert ``e``
    at trace layer ``layers[l]`` for text domain ``domains[d]`` (rows sum to 1)."""

    model: str
    num_experts: int
    top_k: int
    layers: list[int]
    domains: list[str]
    probs: np.ndarray

    def trace_layer_for(self, layer: int) -> int:
        """Index of the trace layer nearest to model layer ``layer`` (beyond the last: the last)."""
        return int(np.argmin([abs(layer - t) for t in self.layers]))


def load_routing(name: str, domains: list[str] | None = None) -> RoutingTrace:
    """Load a routing trace shipped in ``mfctl/data/routing/<name>/`` (see its PROVENANCE.md).

    Raises ValueError for an unknown trace or domain.
    """
    if name not in SHIPPED_TRACES:
        raise ValueError(f"unknown routing trace {name!r}; shipped: {sorted(SHIPPED_TRACES)}")
    root = resources.files("mfctl.data").joinpath("routing").joinpath(SHIPPED_TRACES[name])
    available = sorted(p.name[:-5] for p in root.iterdir() if p.name.endswith(".json"))
    wanted = domains or available
    missing = [d for d in wanted if d not in available]
    if missing:
        raise ValueError(f"trace {name!r} has no domain(s) {missing}; available: {available}")
    docs = [json.loads(root.joinpath(d + ".json").read_text()) for d in wanted]
    probs = []
    for doc in docs:
        counts = np.asarray(doc["counts"], dtype=float)
        probs.append(counts / counts.sum(axis=1, keepdims=True))
    meta = docs[-1]
    return RoutingTrace(model=meta["model"], num_experts=int(meta["num_experts"]), top_k=int(meta["top_k"]),
                        layers=list(meta["layers"]), domains=list(wanted), probs=np.stack(probs))


def expert_to_rank(num_experts: int, ep: int) -> np.ndarray:
    """Contiguous expert placement: expert ``e`` lives on EP rank ``e // (E / ep)``."""
    if num_experts % ep:
        raise ValueError(f"{num_experts} experts do not divide over EP={ep}")
    return np.arange(num_experts) // (num_experts // ep)


def rank_to_server(ep: int, tp: int, gpus_per_server: int) -> np.ndarray:
    """EP rank ``r`` occupies GPUs ``r*tp .. r*tp+tp-1``; its server is ``r*tp // gpus_per_server``."""
    if gpus_per_server % tp:
        raise ValueError(f"TP={tp} does not divide {gpus_per_server} GPUs per server")
    return (np.arange(ep) * tp) // gpus_per_server


def rank_matrix(tokens: np.ndarray, expert_rank: np.ndarray, ep: int) -> np.ndarray:
    """Fold experts onto EP ranks: ``[..., R, E]`` token counts → ``[..., R, R]``."""
    out = np.zeros(tokens.shape[:-1] + (ep,), dtype=float)
    for e, r in enumerate(expert_rank):
        out[..., r] += tokens[..., e]
    return out


def server_matrix(rank_tokens: np.ndarray, rank_server: np.ndarray, n_servers: int, bytes_per_token: float) -> np.ndarray:
    """Fold EP ranks onto servers: ``[..., R, R]`` tokens → ``[..., n, n]`` bytes.

    The diagonal holds intra-server bytes (NVLink), excluding a rank's traffic to itself.
    """
    rt = rank_tokens.copy()
    idx = np.arange(rt.shape[-1])
    rt[..., idx, idx] = 0.0
    onehot = np.zeros((len(rank_server), n_servers))
    onehot[np.arange(len(rank_server)), rank_server] = 1.0
    return np.einsum("ri,...rs,sj->...ij", onehot, rt, onehot) * bytes_per_token


def symmetrise(m: np.ndarray) -> np.ndarray:
    """Duplex demand: ``m + mᵀ`` with a zero diagonal (paper Algorithm 1, step 1)."""
    s = m + np.swapaxes(m, -1, -2)
    n = s.shape[-1]
    s[..., np.arange(n), np.arange(n)] = 0.0
    return s
