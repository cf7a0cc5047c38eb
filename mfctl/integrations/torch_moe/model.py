"""A small MoE transformer in plain torch: byte embeddings, ``layers`` pre-norm blocks of causal
self-attention and an MoE feed-forward (a top-k router over ``experts`` GELU experts, placed over
the expert-parallel ranks by :class:`~mfctl.integrations.torch_moe.dispatch.ExpertParallel`), a
linear head over the 256 bytes.

Router (Mixtral-style): ``softmax(x·W_r)`` over the experts, the top-k kept and renormalized as
gates; a Switch-Transformer load-balancing loss ``E · Σ_e f_e · P_e`` (f_e: share of slots routed
to e, P_e: mean router probability; Fedus et al. 2021, eq. 4) weighted by ``aux_loss``.

Parameters: every rank builds the same dense parameters (same seed; their gradients are averaged
over the ranks, :func:`average_dense_grads`) and only its own experts' weights — drawn from one
generator for all ``E`` experts, so that a one-process model of the same seed holds the very same
experts (the dispatch test compares the two).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from mfctl.integrations.torch_moe.dispatch import ExpertParallel


@dataclass(frozen=True)
class MoEConfig:
    vocab: int = 256
    d_model: int = 32
    heads: int = 4
    layers: int = 2
    experts: int = 8
    top_k: int = 2
    ffn: int = 64  # per-expert hidden width
    seq_len: int = 64
    aux_loss: float = 0.01
    seed: int = 1


class Router(nn.Module):
    def __init__(self, cfg: MoEConfig):
        super().__init__()
        self.top_k, self.experts = cfg.top_k, cfg.experts
        self.w = nn.Linear(cfg.d_model, cfg.experts, bias=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``x`` [N, d] → (experts [N, k] long, gates [N, k], load-balancing loss [])."""
        probs = F.softmax(self.w(x), dim=-1)
        top, idx = probs.topk(self.top_k, dim=-1)
        gates = top / top.sum(-1, keepdim=True)
        share = torch.bincount(idx.reshape(-1), minlength=self.experts).to(probs.dtype) / idx.numel()
        aux = self.experts * (share * probs.mean(0)).sum()
        return idx, gates, aux


class Experts(nn.Module):
    """This rank's ``local`` experts (global ids ``first`` … ``first + local − 1``): GELU FFNs."""

    def __init__(self, cfg: MoEConfig, first: int, local: int, layer: int):
        super().__init__()
        g = torch.Generator().manual_seed(cfg.seed * 7919 + layer)
        w1 = torch.randn(cfg.experts, cfg.d_model, cfg.ffn, generator=g) / math.sqrt(cfg.d_model)
        w2 = torch.randn(cfg.experts, cfg.ffn, cfg.d_model, generator=g) / math.sqrt(cfg.ffn)
        self.w1 = nn.Parameter(w1[first:first + local].clone())
        self.w2 = nn.Parameter(w2[first:first + local].clone())


class MoELayer(nn.Module):
    def __init__(self, cfg: MoEConfig, ep: ExpertParallel, layer: int):
        super().__init__()
        self.ep, self.layer = ep, layer
        self.router = Router(cfg)
        self.experts = Experts(cfg, ep.first, ep.local, layer)
        self.counts: torch.Tensor | None = None  # tokens this rank sent each expert, summed since the last take

    def expert(self, j: int, rows: torch.Tensor) -> torch.Tensor:
        return self.ep.gemm(F.gelu(self.ep.gemm(rows, self.experts.w1[j])), self.experts.w2[j])

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        idx, gates, aux = self.router(flat)
        out, counts = self.ep.route(flat, idx, gates, self.expert)
        self.counts = counts if self.counts is None else self.counts + counts
        return out.view(shape), aux


class Block(nn.Module):
    def __init__(self, cfg: MoEConfig, ep: ExpertParallel, layer: int):
        super().__init__()
        self.heads = cfg.heads
        self.ln1, self.ln2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.moe = MoELayer(cfg, ep, layer)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(a)
        m, aux = self.moe(self.ln2(x))
        return x + m, aux


class TinyMoE(nn.Module):
    """``forward(x [B, T] bytes, y [B, T] next bytes) → (loss, lm loss)``: cross-entropy plus
    ``aux_loss`` × the layers' mean load-balancing loss."""

    def __init__(self, cfg: MoEConfig, ep: ExpertParallel):
        super().__init__()
        self.cfg = cfg
        torch.manual_seed(cfg.seed)  # the same dense parameters on every rank
        self.emb = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos = nn.Parameter(torch.randn(cfg.seq_len, cfg.d_model) * 0.02)
        self.blocks = nn.ModuleList(Block(cfg, ep, i) for i in range(cfg.layers))
        self.ln = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.emb(x) + self.pos[: x.shape[1]]
        aux = h.new_zeros(())
        for blk in self.blocks:
            h, a = blk(h)
            aux = aux + a
        lm = F.cross_entropy(self.head(self.ln(h)).reshape(-1, self.cfg.vocab), y.reshape(-1))
        return lm + self.cfg.aux_loss * aux / len(self.blocks), lm

    def moe_layers(self) -> list[MoELayer]:
        return [b.moe for b in self.blocks if isinstance(b, Block)]

    def take_counts(self) -> dict[int, list[int]]:
        """Per MoE layer, the tokens this rank sent each expert since the last call (ints)."""
        out = {}
        for m in self.moe_layers():
            if m.counts is not None:
                out[m.layer] = [int(c) for c in m.counts.tolist()]
            m.counts = None
        return out

    def dense_parameters(self) -> list[nn.Parameter]:
        """The parameters every rank holds a copy of (all but the experts')."""
        experts = {id(p) for m in self.moe_layers() for p in m.experts.parameters()}
        return [p for p in self.parameters() if id(p) not in experts]


def average_dense_grads(model: TinyMoE, group=None, partitions: int = 1) -> None:
    """Sum the dense gradients over the ranks (each rank back-propagated its loss / W: the sum is
    the mean loss's gradient), as ``partitions`` all-reduces of about equal size (FSMoE's gradient
    partitions; here after the backward pass, not overlapped with it). The experts' gradients
    already hold every rank's share (they came back through the combine all-to-all's backward)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return
    grads = [p.grad for p in model.dense_parameters() if p.grad is not None]
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    for part in torch.tensor_split(flat, max(1, min(partitions, flat.numel()))):
        dist.all_reduce(part, group=group)  # a view: reduced in place
    i = 0
    for g in grads:
        g.copy_(flat[i:i + g.numel()].view_as(g))
        i += g.numel()


class Adam:
    """Adam with decoupled weight decay (AdamW; Loshchilov & Hutter 2019, Algorithm 2), the update
    ``torch.optim.AdamW`` makes. Not ``torch.optim``: constructing any torch 2.13 optimizer imports
    ``torch._dynamo`` (2.3 s of CPU per process, measured on the CI machine; × every rank on a
    2-core box), which a 20-line update does not need."""

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.01):
        self.params = [p for p in params if p.requires_grad]
        self.lr, self.betas, self.eps, self.wd = lr, betas, eps, weight_decay
        self.m = [torch.zeros_like(p) for p in self.params]
        self.v = [torch.zeros_like(p) for p in self.params]
        self.t = 0

    @torch.no_grad()
    def step(self) -> None:
        self.t += 1
        b1, b2 = self.betas
        c1, c2 = 1 - b1 ** self.t, 1 - b2 ** self.t
        for p, m, v in zip(self.params, self.m, self.v):
            if p.grad is None:
                continue
            p.mul_(1 - self.lr * self.wd)
            m.mul_(b1).add_(p.grad, alpha=1 - b1)
            v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
            p.addcdiv_(m, (v / c2).sqrt_().add_(self.eps), value=-self.lr / c1)

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None
