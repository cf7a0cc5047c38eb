"""The job's real routing folded into what the controller reads (docs/runtime-protocol.md ``traffic``).

Input: every EP rank's per-layer token counts (``counts[rank][layer][e]``: tokens rank sent expert
``e`` over the iteration's micro-batches, summed), the rank → host map and the region's host order
(the welcome's ``hosts``). Expert ``e`` is on EP rank ``e // (E/W)``
(:class:`~mfctl.integrations.torch_moe.dispatch.ExpertParallel`).

Output, per layer: ``matrices[l][i][j]`` = bytes server ``i`` sends server ``j`` in **one**
dispatch all-to-all (one micro-batch: the counts divided by ``micro_batches``), and ``tokens[l]``
the EP-rank × expert counts of one micro-batch.

Bytes per token. The job's own hidden width is tiny (its all-to-all moves ``d_model`` float32 per
token); what mfctl prices is the traffic of the model the playbook describes, so one token counts
``model.hidden × model.bytes_per_element`` bytes (Mixtral-8x7B: 4096 × 2 = 8 KiB) — the job's *real
token counts* (its router's assignments, never scaled) at the playbook model's width. The
controller thus sees the testbed-scale traffic the learned routing would cause, and the job's own
measured all-to-all bytes go to ``timings`` (bytes of the real send buffers).
Pure Python: tested without torch.
"""

from __future__ import annotations


def fold(counts: dict[int, dict[int, list[int]]], host_of: dict[int, str], hosts: list[str], *,
         bytes_per_token: float, micro_batches: int = 1) -> tuple[list[list[list[float]]], dict[str, list[list[float]]]]:
    """``(matrices [L][n][n] bytes, tokens {layer: [W][E]})`` for one dispatch (see the module
    doc); layers in ascending order. Raises ValueError for a rank on a host outside ``hosts``."""
    index = {h: i for i, h in enumerate(hosts)}
    outside = sorted({h for h in host_of.values() if h not in index})
    if outside:
        raise ValueError(f"ranks on hosts outside the run's region: {', '.join(outside)}")
    world = len(counts)
    layers = sorted({layer for c in counts.values() for layer in c})
    mb = max(1, micro_batches)
    n = len(hosts)
    matrices, tokens = [], {}
    for layer in layers:
        m = [[0.0] * n for _ in range(n)]
        tok: list[list[float]] = []
        for r in range(world):
            c = counts[r].get(layer, [])
            local = len(c) // world if c else 1
            src = index[host_of[r]]
            for e, k in enumerate(c):
                m[src][index[host_of[e // local]]] += k * bytes_per_token / mb
            tok.append([k / mb for k in c])
        matrices.append(m)
        tokens[str(layer)] = tok
    return matrices, tokens


def bytes_on_fabric(matrices: list[list[list[float]]], circuits: list[list[int]], micro_batches: int = 1) -> tuple[float, float]:
    """``(inter-server bytes, of which on circuits)`` of an iteration: each layer's matrix four
    times (dispatch and combine, forward and backward) per micro-batch; a pair's bytes are on
    circuits when ``circuits[i][j] > 0`` (the circuits in force, as the step model counts them)."""
    inter = ocs = 0.0
    for m in matrices:
        for i, row in enumerate(m):
            for j, b in enumerate(row):
                if i != j:
                    inter += b
                    if circuits and circuits[i][j] > 0:
                        ocs += b
    f = 4 * max(1, micro_batches)
    return inter * f, ocs * f
