"""The planner's local search, vectorised over a stack of same-shaped regions (issue 22).

A region of ``n`` servers has ``P = n(n−1)/2`` server pairs (``np.triu_indices`` order).
Circuits are a count per pair; traffic is each pair's bytes in both directions.

One round, for every region still improving at once:

1. **Relief pairs.** The objective (``planner`` module docstring) is a sum over all-to-alls
   of a maximum. A move lowers it only if it lowers some all-to-all's maximum, and that
   maximum falls only if a circuit is added to the pair that sets it (a circuit pair at the
   maximum) or to an EPS pair of the server that sets it (its egress or ingress at the
   maximum). Only moves that add a circuit to such a *relief pair* can improve, so the
   neighbourhood is cut to them without losing an improving move.
2. **Moves.** A move is one row of a table built once per region size (:func:`move_table`):
   ``+(i, j) −(i, k) −(j, m) +(k, m)``: pair (i, j) gains a circuit, on a free port of i
   (``k`` = none) or on the port of i's circuit to k, and the same at j; the freed far ends
   k and m are joined. A row applies when each end has what it gives and (i, j) or (k, m)
   is a relief pair: array lookups, no Python loop.
3. **Judge.** The candidates of every region are evaluated in one pass and each region
   takes its best candidate if it improves (best improvement); a region without one is at a
   local optimum and leaves the batch.

The objective of symmetric circuits: the combine all-to-all ``Bᵀ`` takes as long as the
dispatch ``B`` (its egress is B's ingress, its circuits the same), so ``T = 4 Σ_l t(B_l, C)``.
A region's search never looks at another region: its plan is the same in any batch.

Two implementations of one search: :func:`local_search` runs the compiled one
(``_search_kernel.c``, built at install where a C compiler is found) unless the setting
``planner_kernel`` (``MFCTL_PLANNER_KERNEL``) says ``numpy``, or it was not built. Both take
the same moves in the same order (ties to the first row of the move table) and differ only
in how a candidate's objective is summed (last bits: a plan may differ where two moves tie to
1e-12). The numpy one is the readable reference; tests hold the two to the same objectives
on real traces. Measured (benchmarks/planner.py, issue 22, load ~12 on 2 cores): a 64-GPU
region's whole ``plan`` in 0.19 ms of CPU compiled against 1.43 ms in numpy; 512 such regions
in 54 ms against 347 ms.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from mfctl.fabric import searchkind

try:
    from mfctl.fabric import _search_kernel as _kernel  # type: ignore[attr-defined]
except ImportError:  # built without a C compiler: the numpy search
    _kernel = None

#: the signs of a move's four updates (:class:`MoveTable` ``pos``): +(i, j) −(i, k) −(j, m) +(k, m)
SIGNS = np.array([1, -1, -1, 1])

#: relative margin: a candidate must be this much better to be taken; a time this close to its maximum is at it
REL_EPS = 1e-9


@functools.lru_cache(maxsize=64)
def pair_ends(n: int) -> tuple[np.ndarray, np.ndarray]:
    """The ends (lower, higher) of the ``P`` pairs of ``n`` servers: ``np.triu_indices(n, 1)``, cached, read-only."""
    iu, ju = np.triu_indices(n, 1)
    iu.setflags(write=False)
    ju.setflags(write=False)
    return iu, ju


@functools.lru_cache(maxsize=64)
def pair_index(n: int) -> np.ndarray:
    """``[n + 1, n + 1]``: the pair number of (a, b), either order; ``P`` (a dump slot) on the
    diagonal and where a or b is ``n`` (none)."""
    iu, ju = pair_ends(n)
    P = len(iu)
    idx = np.full((n + 1, n + 1), P, dtype=np.intp)
    idx[iu, ju] = idx[ju, iu] = np.arange(P)
    idx.setflags(write=False)
    return idx


@functools.lru_cache(maxsize=64)
def pair_incidence(n: int) -> np.ndarray:
    """``[P, n]`` int: 1 where pair p has server a as an end (circuits per pair @ this = ports used)."""
    iu, ju = pair_ends(n)
    inc = np.zeros((len(iu), n), dtype=np.intp)
    inc[np.arange(len(iu)), iu] = inc[np.arange(len(iu)), ju] = 1
    inc.setflags(write=False)
    return inc


@dataclass(frozen=True)
class MoveTable:
    """Every move on ``n`` servers: ``M`` rows (952 for n = 8).

    ``pos`` ``[M, 4]``: the pairs (i, j), (i, k), (j, m), (k, m) of the move's updates
    (:data:`SIGNS`), ``P`` where k or m is none or k = m; ``give_i``, ``give_j`` ``[M]``: what
    i and j give, as an index into a region's ``P + n`` "can give" vector (pair p: it has a
    circuit; ``P + a``: server a has a free port); ``gain``, ``join`` ``[M]``: the pairs (i, j)
    and (k, m) that gain a circuit (``P``: none)."""

    pos: np.ndarray
    give_i: np.ndarray
    give_j: np.ndarray
    gain: np.ndarray
    join: np.ndarray


@functools.lru_cache(maxsize=16)
def move_table(n: int) -> MoveTable:
    """The moves on ``n`` servers (``k, m`` range over the servers other than i and j, and
    none = n). A move with k and m both real and different is the same as the one labelled
    from its other pair, ``(k, m, i, j)``: it is kept once, under the smaller pair."""
    rows = [(i, j, k, m) for i in range(n) for j in range(i + 1, n)
            for k in range(n + 1) if k not in (i, j) for m in range(n + 1) if m not in (i, j)
            if not (k < n and m < n and k != m and (min(k, m), max(k, m)) < (i, j))]
    i, j, k, m = (np.array(c, dtype=np.intp) for c in zip(*rows))
    pidx = pair_index(n)
    P = n * (n - 1) // 2
    give_i = np.where(k < n, pidx[i, k], P + i)
    give_j = np.where(m < n, pidx[j, m], P + j)
    table = MoveTable(pos=np.stack([pidx[i, j], pidx[i, k], pidx[j, m], pidx[k, m]], axis=1),
                      give_i=give_i, give_j=give_j, gain=pidx[i, j], join=pidx[k, m])
    for a in (table.pos, table.give_i, table.give_j, table.gain, table.join):
        a.setflags(write=False)
    return table


@dataclass(frozen=True)
class Region:
    """What the search needs of ``R`` same-shaped regions' traffic and links.

    ``full`` ``[R, L, n²]``: each all-to-all's dispatch bytes, zero diagonal; ``worse``
    ``[R, L, P]``: per pair the larger direction (a circuit's time is set by it);
    ``inv_circuit[c]`` = 1 / (c · r_lane) in s/B (0 for c = 0); ``eps_inv`` ``[n]``: 1 / each
    server's EPS rate; ``pair_of`` ``[n²]``: the pair of each entry of an n × n matrix (the
    dump slot ``P`` on the diagonal), to spread pair circuits onto it."""

    full: np.ndarray
    worse: np.ndarray
    inv_circuit: np.ndarray
    eps_inv: np.ndarray
    pair_of: np.ndarray

    @classmethod
    def of(cls, B: np.ndarray, circuit_Bps: float, eps_Bps: float | np.ndarray, max_circuits: int) -> Region:
        """From dispatch bytes ``B`` ``[R, L, n, n]`` (the diagonal is intra-server and ignored),
        one lane's rate and each server's EPS rate (a number or ``[n]``) in bytes/s per
        direction; ``max_circuits``: the most circuits any pair can get."""
        R, L, n, _ = B.shape
        full = np.array(B, dtype=float)
        full[:, :, np.arange(n), np.arange(n)] = 0.0
        iu, ju = pair_ends(n)
        c = np.arange(1, max(int(max_circuits), 1) + 1, dtype=float)
        return cls(full=full.reshape(R, L, n * n), worse=np.maximum(full[:, :, iu, ju], full[:, :, ju, iu]),
                   inv_circuit=np.concatenate([[0.0], 1.0 / (c * circuit_Bps)]),
                   eps_inv=1.0 / np.broadcast_to(np.asarray(eps_Bps, dtype=float), (n,)),
                   pair_of=pair_index(n)[:n, :n].ravel())


@dataclass
class Times:
    """Per candidate and all-to-all: each pair's circuit time ``circuit`` ``[K, L, P]`` (0 without
    a circuit), the bytes left to the EPS ``eps`` ``[K, L, n, n]``, each server's EPS ``egress``
    and ``ingress`` time ``[K, L, n]``, and the all-to-all's completion time ``per_a2a``
    ``[K, L]`` (the slowest of them); seconds."""

    circuit: np.ndarray
    eps: np.ndarray
    egress: np.ndarray
    ingress: np.ndarray
    per_a2a: np.ndarray

    def objective(self) -> np.ndarray:
        """``[K]``: T = 4 Σ_l t_l (dispatch and combine, forward and backward), seconds."""
        return 4.0 * self.per_a2a.sum(axis=-1)

    def take(self, rows: np.ndarray) -> Times:
        return Times(*(a[rows] for a in self.arrays()))

    def put(self, rows: np.ndarray, other: Times) -> None:
        for mine, theirs in zip(self.arrays(), other.arrays()):
            mine[rows] = theirs

    def arrays(self) -> tuple[np.ndarray, ...]:
        return self.circuit, self.eps, self.egress, self.ingress, self.per_a2a


def times(reg: Region, rows: np.ndarray, C: np.ndarray) -> Times:
    """:class:`Times` of circuits ``C`` ``[K, P + 1]`` (per pair, then a dump slot holding 0)
    for the regions ``rows`` ``[K]`` of ``reg``."""
    K, L, P = len(rows), reg.full.shape[1], reg.worse.shape[-1]
    n = reg.eps_inv.shape[0]
    circuit = reg.worse[rows] * reg.inv_circuit[C[:, :P]][:, None, :]
    eps = (reg.full[rows] * (C[:, reg.pair_of] == 0)[:, None, :]).reshape(K, L, n, n)
    egress, ingress = eps.sum(axis=-1) * reg.eps_inv, eps.sum(axis=-2) * reg.eps_inv
    per_a2a = np.maximum(circuit.max(axis=-1), np.maximum(egress.max(axis=-1), ingress.max(axis=-1)))
    return Times(circuit, eps, egress, ingress, per_a2a)


def relief_pairs(t: Times) -> np.ndarray:
    """``[K, P + 1]`` bool: the pairs whose extra circuit could lower some all-to-all's maximum
    (module docstring, step 1); the dump slot ``P`` is False. An all-to-all that takes no
    time has nothing to relieve."""
    K, L, P = t.circuit.shape
    n = t.egress.shape[-1]
    at_max = np.where(t.per_a2a > 0, t.per_a2a * (1 - REL_EPS), np.inf)[..., None]
    hot_eps = (t.eps > 0) & ((t.egress >= at_max)[..., :, None] | (t.ingress >= at_max)[..., None, :])
    hot = np.asarray((t.circuit >= at_max).any(axis=1))
    pairs = np.asarray(hot_eps.any(axis=1)).reshape(K, n * n)
    iu, ju = pair_ends(n)
    out = np.zeros((K, P + 1), dtype=bool)
    out[:, :P] = hot | pairs[:, iu * n + ju] | pairs[:, ju * n + iu]
    return out


def best_per_region(region: np.ndarray, vals: np.ndarray) -> np.ndarray:
    """Index of each region's lowest value, ties to the first; ``region`` is sorted (one region: an argmin)."""
    if region[0] == region[-1]:
        return np.array([np.argmin(vals)])
    counts = np.bincount(region)
    first = (np.cumsum(counts) - counts)[counts > 0]  # each region's first candidate
    return np.lexsort((vals, region))[first]


def kernel() -> str:
    """Which search :func:`local_search` runs: ``"compiled"`` or ``"numpy"``
    (:func:`mfctl.fabric.searchkind.chosen`: setting ``planner_kernel``)."""
    return searchkind.chosen(_kernel is not None)


def local_search(reg: Region, C0: np.ndarray, ports: np.ndarray, max_rounds: int,
                 stop_below: np.ndarray | None = None, *, how: str | None = None) -> tuple[np.ndarray, np.ndarray, int]:
    """Best-improvement local search of ``R`` regions at once (module docstring).

    ``C0`` ``[R, P]`` start circuits per pair, ``ports`` ``[R, n]``; a region stops at a local
    optimum, after ``max_rounds`` or once its objective is at most ``stop_below[r]`` seconds.
    Returns the circuits ``[R, P]``, their objective ``[R]`` in seconds, and the rounds run
    (the most any region ran). ``how``: ``"compiled"`` or ``"numpy"`` (default: :func:`kernel`)."""
    if (how or kernel()) == "compiled":
        return _compiled_search(reg, C0, ports, max_rounds, stop_below)
    return _numpy_search(reg, C0, ports, max_rounds, stop_below)


def _compiled_search(reg: Region, C0: np.ndarray, ports: np.ndarray, max_rounds: int,
                     stop_below: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, int]:
    """:func:`local_search` by ``_search_kernel.c``: the same inputs, laid out C-contiguous (float64, int64)."""
    if _kernel is None:
        raise ValueError("mfctl.fabric._search_kernel was not built")
    R, P = C0.shape
    n = ports.shape[1]
    L = reg.full.shape[1]
    mv = move_table(n)
    f64 = functools.partial(np.ascontiguousarray, dtype=np.float64)
    i64 = functools.partial(np.ascontiguousarray, dtype=np.int64)
    C = np.array(C0, dtype=np.int64, order="C")
    best = np.empty(R)
    stop = np.full(R, -np.inf) if stop_below is None else f64(np.broadcast_to(stop_below, (R,)))
    rounds = _kernel.local_search(R, L, n, len(mv.pos), int(max_rounds), f64(reg.worse), f64(reg.full),
                                  f64(reg.inv_circuit), f64(reg.eps_inv), i64(reg.pair_of), i64(mv.pos),
                                  i64(mv.give_i), i64(mv.give_j), i64(mv.gain), i64(mv.join), C, i64(ports), stop, best)
    return C.astype(np.intp, copy=False), best, int(rounds)


def _numpy_search(reg: Region, C0: np.ndarray, ports: np.ndarray, max_rounds: int,
                  stop_below: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, int]:
    """:func:`local_search` in numpy: every region's candidates of a round in one vectorised pass."""
    R, P = C0.shape
    n = ports.shape[1]
    mv = move_table(n)
    incidence = pair_incidence(n)
    C = np.zeros((R, P + 1), dtype=np.intp)  # + the dump slot
    C[:, :P] = C0
    cur = times(reg, np.arange(R), C)
    best = cur.objective()
    active = np.arange(R)
    rounds = 0
    while rounds < max_rounds:
        if stop_below is not None:
            active = active[best[active] > stop_below[active]]
        if not len(active):
            break
        rounds += 1
        Ca = C[active, :P]
        free = ports[active] - Ca @ incidence
        give = np.concatenate([Ca > 0, free > 0], axis=1)
        relief = relief_pairs(cur if len(active) == R else cur.take(active))
        region, move = np.nonzero(give[:, mv.give_i] & give[:, mv.give_j] & (relief[:, mv.gain] | relief[:, mv.join]))
        if not len(region):
            break
        cand = C[active[region]]
        cand[np.arange(len(region))[:, None], mv.pos[move]] += SIGNS
        cand[:, P] = 0
        t = times(reg, active[region], cand)
        vals = t.objective()
        pick = best_per_region(region, vals)
        who = active[region[pick]]
        better = vals[pick] < best[who] * (1 - REL_EPS)
        pick, who = pick[better], who[better]
        C[who], best[who] = cand[pick], vals[pick]
        cur.put(who, t.take(pick))
        active = who
    return C[:, :P], best, rounds
