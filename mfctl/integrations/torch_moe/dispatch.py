"""Expert-parallel dispatch and combine over ``torch.distributed`` with real ``all_to_all_single``.

``E`` experts over the ``W`` ranks of the expert-parallel group, contiguously (expert ``e`` on EP
rank ``e // (E/W)``, as Megatron-Core places them). Per MoE layer and micro-batch:

1. the router's top-k gives every token ``k`` (expert, gate) slots; slots are sorted by expert
   (hence by destination rank) and ``counts[e]`` (tokens this rank sends expert ``e``) is kept —
   what the job reports to mfctl;
2. an all-to-all of ``counts`` tells every rank how many rows it receives per source and local
   expert (the ``input_splits``/``output_splits`` of step 3);
3. the dispatch all-to-all sends each slot's token row to its expert's rank; the rows are grouped
   by local expert, the experts run (one GEMM pair each), the rows go back by the reverse
   all-to-all (combine) and are summed per token, weighted by the gates.

Both token all-to-alls are autograd functions whose backward is the reverse all-to-all, so an
iteration runs four all-to-alls per MoE layer (dispatch and combine, forward and backward), plus the
small count exchange. Every all-to-all goes through :class:`mfctl.integrations.torch_timing.Timings`
(``"alltoall"``, bytes of this rank's send buffer) and every forward expert GEMM through
``Timings.gemm`` (``2·m·k·n`` FLOP); the backward GEMMs run inside autograd and are not timed.
One process (no process group, ``W = 1``) runs the same code without collectives.
"""

from __future__ import annotations

from typing import Any, Callable

import torch


def _dist():
    import torch.distributed as dist

    return dist if dist.is_available() and dist.is_initialized() else None


class ExpertParallel:
    """The EP group (``group``: a process group, None = the world) of ``num_experts`` experts.
    ``timings``: a :class:`~mfctl.integrations.torch_timing.Timings` (None: collectives untimed)."""

    def __init__(self, num_experts: int, group: Any = None, timings: Any = None):
        d = _dist()
        self.group, self.timings = group, timings
        self.world = d.get_world_size(group) if d else 1
        self.rank = d.get_rank(group) if d else 0
        if num_experts % self.world:
            raise ValueError(f"{num_experts} experts do not divide over {self.world} EP ranks")
        self.num_experts, self.local = num_experts, num_experts // self.world
        self.first = self.rank * self.local  # global id of this rank's first local expert

    def all_to_all(self, out: torch.Tensor, inp: torch.Tensor, out_splits: list[int] | None,
                   in_splits: list[int] | None) -> None:
        if self.world == 1:
            out.copy_(inp)
            return
        if self.timings is not None:
            self.timings.all_to_all_single(out, inp, out_splits, in_splits, group=self.group)
        else:
            _dist().all_to_all_single(out, inp, out_splits, in_splits, group=self.group)

    def gemm(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        if self.timings is None:
            return a @ b
        return self.timings.gemm(torch.matmul, a, b, flops=2 * a.shape[0] * a.shape[1] * b.shape[1])

    def route(self, x: torch.Tensor, experts: torch.Tensor, gates: torch.Tensor,
              expert_fn: Callable[[int, torch.Tensor], torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """``x`` [N, d] tokens, ``experts``/``gates`` [N, k] their top-k experts and weights;
        ``expert_fn(j, rows)`` runs local expert ``j`` (0 … E/W − 1) on its rows. Returns
        ``(out [N, d] = Σ_k gate·expert(x), counts [E]``: tokens this rank sent each expert)."""
        n, k = experts.shape
        flat = experts.reshape(-1)
        order = torch.argsort(flat, stable=True)  # slots by expert, so by destination rank
        counts = torch.bincount(flat, minlength=self.num_experts)
        send = counts.view(self.world, self.local).sum(1).tolist()
        recv_counts = torch.empty_like(counts)
        self.all_to_all(recv_counts, counts, None, None)  # equal splits: E/W counts per rank
        per_src = recv_counts.view(self.world, self.local)  # [source rank, local expert]
        recv = per_src.sum(1).tolist()
        rows = _AllToAll.apply(x[order // k], recv, send, self)
        # rows arrive by source rank, each source's by local expert: group them by local expert
        label = torch.arange(self.local, device=per_src.device).repeat(self.world).repeat_interleave(per_src.reshape(-1))
        lorder = torch.argsort(label, stable=True)
        sizes = per_src.sum(0).tolist()
        grouped = rows[lorder]
        outs = [expert_fn(j, part) for j, part in enumerate(torch.split(grouped, sizes))]
        y = torch.cat(outs) if outs else grouped
        back = _AllToAll.apply(y[torch.argsort(lorder)], send, recv, self)  # combine: the reverse
        slot = back[torch.argsort(order)].view(n, k, -1)
        return (slot * gates.unsqueeze(-1).to(slot.dtype)).sum(1), counts


class _AllToAll(torch.autograd.Function):
    """``all_to_all_single`` of rows (``out_splits`` received per rank, ``in_splits`` sent);
    backward: the reverse exchange of the gradients."""

    @staticmethod
    def forward(ctx, x, out_splits, in_splits, ep):  # type: ignore[override]
        ctx.splits, ctx.ep = (out_splits, in_splits), ep
        out = x.new_empty((sum(out_splits), *x.shape[1:]))
        ep.all_to_all(out, x.contiguous(), out_splits, in_splits)
        return out

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        out_splits, in_splits = ctx.splits
        gi = grad.new_empty((sum(in_splits), *grad.shape[1:]))
        ctx.ep.all_to_all(gi, grad.contiguous(), in_splits, out_splits)
        return gi, None, None, None
