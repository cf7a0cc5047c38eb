"""Circuit planning for one region (mFabric, DESIGN §6).

Input: per-layer directed server × server dispatch bytes ``B[l, i, j]`` and the number of
OCS lanes (ports) per server. Output: a symmetric integer matrix ``C[i, j]`` of duplex
circuits with ``sum_j C[i, j] <= ports[i]``.

Objective (one for every method, so plans are comparable): the estimated completion time
of the region's expert-parallel all-to-alls, in seconds::

    T(C) = 2 * sum_l [ t(B_l, C) + t(B_lᵀ, C) ]        (dispatch + combine, fwd + bwd)
    t(B, C) = max( max_{C_ij>0} B_ij / (C_ij * r_circ),            circuits, per direction
                   max_i  sum_{j: C_ij=0} B_ij / r_eps_i,          EPS egress
                   max_j  sum_{i: C_ij=0} B_ij / r_eps_j )         EPS ingress

Pairs without a circuit use the electrical switch (EPS). ``r_circ`` is one lane's rate and
``r_eps`` a server's EPS NIC rate, both in bytes/s per direction.

Methods: the paper's greedy (Algorithm 1, "skip exhausted endpoints, continue" as in the
MixNet simulator), exhaustive search when the region is small, and a local search that
starts from the greedy result. :func:`plan` returns the best under the objective.
"""

from __future__ import annotations

import functools
import heapq
import os
import time
from collections.abc import Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass, field

import numpy as np

EXACT_MAX_CANDIDATES = 50_000


@dataclass
class LinkRates:
    """Rates in bytes/s per direction. Defaults: 100G NIC ≈ 11.5 GB/s goodput (DESIGN §8)."""

    circuit_Bps: float = 11.5e9
    eps_Bps: float | np.ndarray = 11.5e9


#: RoCEv2 goodput / line rate: 100 Gbit/s → ~11.5 GB/s (DESIGN §8)
GOODPUT = 0.92


def link_rates(lane_gbps: float, eps_gbps: float) -> LinkRates:
    """Rates from line rates in Gbit/s: one OCS lane (a circuit) and a server's EPS NICs together."""
    return LinkRates(circuit_Bps=lane_gbps * 1e9 / 8 * GOODPUT, eps_Bps=eps_gbps * 1e9 / 8 * GOODPUT)


def a2a_time(B: np.ndarray, C: np.ndarray, rates: LinkRates) -> np.ndarray:
    """Inter-server time of all-to-alls ``B`` ``[L, n, n]`` under candidates ``C`` ``[K, n, n]``.

    Returns ``[K, L]`` seconds (latency α not included). The diagonal of B is intra-server.
    """
    B = np.asarray(B, dtype=float)
    if B.ndim == 2:
        B = B[None]
    C = np.asarray(C, dtype=float)
    if C.ndim == 2:
        C = C[None]
    n = B.shape[-1]
    off = ~np.eye(n, dtype=bool)
    Bx = B[None, :, :, :]
    Cx = C[:, None, :, :]
    circ = Cx > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        t_circ = np.where(circ, Bx / np.where(circ, Cx, 1.0), 0.0) / rates.circuit_Bps
    t_circ = t_circ.max(axis=(-1, -2))
    eps_bytes = np.where(~circ & off, Bx, 0.0)
    eps = np.broadcast_to(np.asarray(rates.eps_Bps, dtype=float), (n,))
    egress = (eps_bytes.sum(axis=-1) / eps).max(axis=-1)
    ingress = (eps_bytes.sum(axis=-2) / eps).max(axis=-1)
    return np.maximum(t_circ, np.maximum(egress, ingress))


def objective(B: np.ndarray, C: np.ndarray, rates: LinkRates) -> np.ndarray:
    """Planner objective T(C) (module docstring), seconds; ``[K]`` for ``[K, n, n]`` candidates."""
    B = np.asarray(B, dtype=float)
    if B.ndim == 2:
        B = B[None]
    t = a2a_time(B, C, rates) + a2a_time(np.swapaxes(B, -1, -2), C, rates)
    return 2.0 * t.sum(axis=-1)


def _server_times(B: np.ndarray, C: np.ndarray, rates: LinkRates) -> np.ndarray:
    """Per candidate, the sum over all-to-alls and servers of each server's own completion
    time — a smooth companion of the objective that still rewards relieving non-bottlenecks.
    ``B`` ``[L, n, n]`` (both directions included by the caller), ``C`` ``[K, n, n]`` → ``[K]``."""
    n = B.shape[-1]
    off = ~np.eye(n, dtype=bool)
    Bx = B[None]
    Cx = C[:, None].astype(float)
    circ = Cx > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        tc = np.where(circ, Bx / np.where(circ, Cx, 1.0), 0.0) / rates.circuit_Bps
    eps = np.broadcast_to(np.asarray(rates.eps_Bps, float), (n,))
    te = np.where(~circ & off, Bx, 0.0).sum(axis=-1) / eps
    return np.maximum(tc.max(axis=-1), te).sum(axis=(-1, -2))


def objective_greedy(B: np.ndarray, ports: np.ndarray, rates: LinkRates) -> np.ndarray:
    """Add one circuit at a time, each time the one that lowers the objective most (ties
    broken by the per-server completion times). Same O(n·α) steps as the paper's greedy,
    but judged by the objective instead of demand ÷ circuits. Not in :func:`plan`'s path since
    issue 22: as a start for the local search it bought ≤ 1 % of objective for ~2/3 of the plan time."""
    B = np.asarray(B, dtype=float)
    if B.ndim == 2:
        B = B[None]
    Bb = np.concatenate([B, np.swapaxes(B, -1, -2)])
    n = B.shape[-1]
    ports = np.asarray(ports, dtype=int)
    C = np.zeros((n, n), dtype=int)
    iu, ju = np.triu_indices(n, 1)
    while True:
        free = ports - C.sum(axis=1)
        ok = (free[iu] > 0) & (free[ju] > 0)
        if not ok.any():
            return C
        ci, cj = iu[ok], ju[ok]
        cands = np.repeat(C[None], len(ci), axis=0)
        cands[np.arange(len(ci)), ci, cj] += 1
        cands[np.arange(len(ci)), cj, ci] += 1
        obj = objective(B, cands, rates)
        sec = _server_times(Bb, cands, rates)
        k = int(np.lexsort((sec, np.round(obj, 12)))[0])
        C = cands[k]


def greedy(S: np.ndarray, ports: np.ndarray) -> np.ndarray:
    """The paper's Algorithm 1 on symmetric demand ``S``: repeatedly give one more circuit
    to the pair with the largest ``S_ij / C_ij`` (∞ while ``C_ij = 0``, so every demanded
    pair first gets one circuit, largest demand first) whose endpoints both have a free
    port. Where the paper's pseudo-code stops at the first bottleneck pair without free
    ports, this skips such pairs and continues, as the MixNet simulator does. Ties break
    by lower index. O(P log P) with a heap over the P demanded pairs.
    """
    n = S.shape[0]
    C = np.zeros((n, n), dtype=int)
    avail = np.array(ports, dtype=int).copy()
    iu, ju = np.triu_indices(n, 1)
    d = S[iu, ju]
    keep = d > 0
    iu, ju, d = iu[keep], ju[keep], d[keep]
    # heap of (-(class), -(value), i, j): class 1 = no circuit yet (T = inf), 0 = has circuits
    heap = [(-1, -float(v), int(i), int(j)) for v, i, j in zip(d, iu, ju)]
    heapq.heapify(heap)
    while heap:
        cls, negv, i, j = heapq.heappop(heap)
        if avail[i] <= 0 or avail[j] <= 0:
            continue  # an exhausted endpoint never frees up again
        C[i, j] += 1
        C[j, i] += 1
        avail[i] -= 1
        avail[j] -= 1
        heapq.heappush(heap, (0, -float(S[i, j]) / C[i, j], i, j))
    return C


def enumerate_topologies(ports: np.ndarray, limit: int = EXACT_MAX_CANDIDATES) -> np.ndarray | None:
    """Every multigraph with ``deg(i) <= ports[i]`` as ``[K, n, n]``; None if more than ``limit``."""
    ports = np.asarray(ports, dtype=int)
    n = len(ports)
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    iu, ju = _pairs(n)
    log_bound = float(np.log(np.minimum(ports[iu], ports[ju]) + 1.0).sum())
    if log_bound > np.log(40.0 * limit):  # certainly too many: do not even start
        return None
    out: list[np.ndarray] = []
    deg = np.zeros(n, dtype=int)
    cur = np.zeros((n, n), dtype=int)

    def rec(k: int) -> bool:
        if len(out) > limit:
            return False
        if k == len(pairs):
            out.append(cur.copy())
            return True
        i, j = pairs[k]
        cap = min(ports[i] - deg[i], ports[j] - deg[j])
        for c in range(cap + 1):
            cur[i, j] = cur[j, i] = c
            deg[i] += c
            deg[j] += c
            ok = rec(k + 1)
            deg[i] -= c
            deg[j] -= c
            if not ok:
                cur[i, j] = cur[j, i] = 0
                return False
        cur[i, j] = cur[j, i] = 0
        return True

    if not rec(0):
        return None
    return np.stack(out)


def _bottlenecks(S2: np.ndarray, C: np.ndarray, rates: LinkRates, top: int = 3) -> list[tuple[int, int]]:
    """Server pairs that set the completion time: the slowest circuit pairs, and for the
    servers whose EPS egress/ingress is slowest, their largest EPS partners. ``S2`` is
    ``Σ_l (B_l + B_lᵀ)`` with a zero diagonal (both directions of every all-to-all)."""
    n = C.shape[0]
    circ = C > 0
    tc = np.divide(S2, C, out=np.zeros(S2.shape), where=circ) / rates.circuit_Bps
    eps_b = np.where(circ, 0.0, S2)
    eps_t = eps_b.sum(axis=1) / np.broadcast_to(np.asarray(rates.eps_Bps, float), (n,))
    out: list[tuple[int, int]] = []
    for flat in np.argsort(tc, axis=None)[::-1][: 2 * top].tolist():
        i, j = divmod(flat, n)
        if i < j and tc[i, j] > 0:
            out.append((i, j))
    for i in np.argsort(eps_t)[::-1][:top].tolist():
        for j in np.argsort(eps_b[i])[::-1][:top].tolist():
            if eps_b[i, j] > 0:
                out.append((min(i, j), max(i, j)))
    return list(dict.fromkeys(out))


def _add_circuits(D: np.ndarray, i: int, j: int, k: int) -> None:
    """Add ``k`` circuits (negative: remove) between servers i and j of the symmetric matrix D, in place."""
    D[i, j] += k
    D[j, i] += k


def _with_circuit(C: np.ndarray, i: int, j: int) -> np.ndarray:
    """A copy of the circuit matrix C with one more circuit between servers i and j."""
    D = C.copy()
    _add_circuits(D, i, j, 1)
    return D


def _prepare(B: np.ndarray, rates: LinkRates) -> tuple[np.ndarray, np.ndarray]:
    """``B`` ``[L, n, n]`` with its intra-server diagonal zeroed, and 1 / each server's EPS rate."""
    Bo = np.array(B, dtype=float)
    idx = np.arange(Bo.shape[-1])
    Bo[:, idx, idx] = 0.0
    return Bo, 1.0 / np.broadcast_to(np.asarray(rates.eps_Bps, float), (Bo.shape[-1],))


def _objective_sym(Bo: np.ndarray, C: np.ndarray, rates: LinkRates, eps_inv: np.ndarray) -> np.ndarray:
    """:func:`objective` for *symmetric* candidates ``C`` ``[K, n, n]``, ``Bo`` from :func:`_prepare`.

    With C symmetric, the combine all-to-all ``Bᵀ`` takes exactly as long as the dispatch
    ``B`` (its egress is B's ingress and vice versa, its circuits are the same), so
    T = 4 Σ_l t(B_l, C): half the work of :func:`objective`, in a dozen array operations
    on ``[K, L, n²]`` (1 / C_ij looked up, not divided)."""
    K, n, _ = C.shape
    L = Bo.shape[0]
    Cf = np.asarray(C, dtype=np.intp).reshape(K, 1, n * n)
    inv = np.concatenate([[0.0], 1.0 / np.arange(1, int(Cf.max(initial=0)) + 1)])[Cf]  # 0 where no circuit
    Bf = Bo.reshape(1, L, n * n)
    t_circ = (Bf * inv).max(axis=-1) / rates.circuit_Bps
    eps_b = (Bf * (Cf == 0)).reshape(K, L, n, n)
    egress = (eps_b.sum(axis=-1) * eps_inv).max(axis=-1)
    ingress = (eps_b.sum(axis=-2) * eps_inv).max(axis=-1)
    return 4.0 * np.maximum(t_circ, np.maximum(egress, ingress)).sum(axis=-1)


#: sign of each of a move's eight updates (see :func:`_moves`)
_MOVE_SIGNS = np.array([1, 1, -1, -1, -1, -1, 1, 1])


def _moves(C: np.ndarray, free: np.ndarray, pairs: list[tuple[int, int]]) -> np.ndarray:
    """The local search's neighbourhood of ``C`` as ``[K, n, n]``: each bottleneck pair (i, j)
    gets one more circuit, on free ports or on ports taken from one circuit (i, k) and one
    (j, m) (whose freed far ends k, m are then joined); and every pair with a free port at
    both ends gets one more circuit.

    Every move is four symmetric updates +(i, j) −(i, k) −(j, m) +(k, m) on C padded with a
    dummy server n: "no k" (i has a free port) is k = n, whose updates land in the padding;
    k = m puts its +1 on the diagonal, which is cleared. One indexed add builds them all."""
    n = C.shape[0]
    ii, jj, kk, mm = [], [], [], []
    if pairs:
        pi, pj = np.array(pairs).T
        P = len(pi)
        # options of each end a (i, then j) of each pair: take a port from a's partner k (k < n,
        # not the other end b), or "none" (k = n) if a has a free port
        a, b = np.concatenate([pi, pj]), np.concatenate([pj, pi])
        full = free[a] <= 0
        opt = np.zeros((2 * P, n + 1), dtype=bool)
        opt[:, :n] = (C[a] > 0) & full[:, None]
        rows = np.arange(2 * P)
        opt[rows, a] = opt[rows, b] = False
        opt[:, n] = ~full
        p, k, m = np.nonzero(opt[:P, :, None] & opt[P:, None, :])
        ii, jj, kk, mm = [pi[p]], [pj[p]], [k], [m]
    iu, ju = _pairs(n)
    ok = (free[iu] > 0) & (free[ju] > 0)  # fill any ports left free
    ii.append(iu[ok])
    jj.append(ju[ok])
    none = np.full(int(ok.sum()), n)
    kk.append(none)
    mm.append(none)
    i, j, k, m = (np.concatenate(x) for x in (ii, jj, kk, mm))
    N = n + 1
    flat = np.stack([i, j, i, k, j, m, k, m], axis=1) * N + np.stack([j, i, k, i, m, j, m, k], axis=1)
    D = np.zeros((len(i), N, N), dtype=C.dtype)
    D[:, :n, :n] = C
    D.reshape(len(i), N * N)[np.arange(len(i))[:, None], flat] += _MOVE_SIGNS
    D = D[:, :n, :n]
    D[:, np.arange(n), np.arange(n)] = 0
    return D


@functools.lru_cache(maxsize=64)
def _pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.triu_indices(n, 1)``, cached (read-only)."""
    iu, ju = np.triu_indices(n, 1)
    iu.setflags(write=False)
    ju.setflags(write=False)
    return iu, ju


def local_search(B: np.ndarray, C0: np.ndarray, ports: np.ndarray, rates: LinkRates, max_rounds: int | None = None,
                 stop_below: float | None = None) -> np.ndarray:
    """Improve ``C0`` by best-improvement moves aimed at the bottleneck pairs (:func:`_moves`),
    each round's whole neighbourhood judged in one vectorised evaluation. Stops at a local
    optimum, after ``max_rounds``, or once the objective is at most ``stop_below``."""
    B = np.asarray(B, dtype=float)
    if B.ndim == 2:
        B = B[None]
    Bo, eps_inv = _prepare(B, rates)
    S2 = (Bo + np.swapaxes(Bo, -1, -2)).sum(axis=0)
    C = np.array(C0, dtype=int).copy()
    n = C.shape[0]
    ports = np.asarray(ports, dtype=int)
    best = float(_objective_sym(Bo, C[None], rates, eps_inv)[0])
    rounds = max_rounds if max_rounds is not None else 4 * n * int(ports.max(initial=1))
    for _ in range(rounds):
        if stop_below is not None and best <= stop_below:
            break
        cands = _moves(C, ports - C.sum(axis=1), _bottlenecks(S2, C, rates))
        if not len(cands):
            break
        vals = _objective_sym(Bo, cands, rates, eps_inv)
        k = int(np.argmin(vals))
        if vals[k] >= best * (1 - 1e-9):
            break
        best, C = float(vals[k]), cands[k]
    return C


def ilp(B: np.ndarray, ports: np.ndarray, rates: LinkRates, time_limit_s: float = 60.0) -> np.ndarray | None:
    """The exact optimum of the objective as a MILP (scipy.optimize.milp / HiGHS).

    Binary ``x[p, k]`` = pair p gets k circuits (k = 0 … min(ports)); continuous ``T[l]`` =
    completion time of all-to-all l (each layer's dispatch and combine). Minimise
    ``2 Σ T[l]`` subject to one k per pair, ports per server, ``T[l] ≥`` every circuit
    pair's time ``B/(k r)`` and every server's EPS egress/ingress time. Returns None when
    the solver does not prove optimality within the time limit.
    """
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import lil_matrix

    B = np.asarray(B, dtype=float)
    if B.ndim == 2:
        B = B[None]
    Bs = np.concatenate([B, np.swapaxes(B, -1, -2)])  # dispatch and combine
    L, n, _ = Bs.shape
    ports = np.asarray(ports, dtype=int)
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    ks = [list(range(0, int(min(ports[i], ports[j])) + 1)) for i, j in pairs]
    xi: dict[tuple[int, int], int] = {}
    for p, kk in enumerate(ks):
        for k in kk:
            xi[(p, k)] = len(xi)
    nx = len(xi)
    nv = nx + L
    eps = np.broadcast_to(np.asarray(rates.eps_Bps, float), (n,))
    lo: list[float] = []
    hi: list[float] = []
    A = lil_matrix((len(pairs) + n + L * (2 * len(pairs) + 2 * n), nv))
    r = 0
    for p, kk in enumerate(ks):  # exactly one k per pair
        for k in kk:
            A[r, xi[(p, k)]] = 1
        lo.append(1)
        hi.append(1)
        r += 1
    for i in range(n):  # ports per server
        for p, (a, b) in enumerate(pairs):
            if i in (a, b):
                for k in ks[p][1:]:
                    A[r, xi[(p, k)]] = k
        lo.append(0)
        hi.append(ports[i])
        r += 1
    for layer in range(L):
        for p, (i, j) in enumerate(pairs):
            for a, b in ((i, j), (j, i)):  # T[layer] - sum_k t_k x[p,k] >= 0
                A[r, nx + layer] = 1
                for k in ks[p][1:]:
                    A[r, xi[(p, k)]] = -Bs[layer, a, b] / (k * rates.circuit_Bps)
                lo.append(0)
                hi.append(np.inf)
                r += 1
        for i in range(n):
            for direction in (0, 1):  # egress, ingress over the EPS
                A[r, nx + layer] = 1
                for p, (a, b) in enumerate(pairs):
                    if i in (a, b):
                        other = b if a == i else a
                        byt = Bs[layer, i, other] if direction == 0 else Bs[layer, other, i]
                        A[r, xi[(p, 0)]] -= byt / eps[i]
                lo.append(0)
                hi.append(np.inf)
                r += 1
    c = np.zeros(nv)
    c[nx:] = 2.0
    integrality = np.concatenate([np.ones(nx), np.zeros(L)])
    bounds = Bounds(np.zeros(nv), np.concatenate([np.ones(nx), np.full(L, np.inf)]))
    res = milp(c, constraints=LinearConstraint(A.tocsr()[:r], lo, hi), integrality=integrality, bounds=bounds,
               options={"time_limit": time_limit_s})
    if res.status != 0 or res.x is None:
        return None
    C = np.zeros((n, n), dtype=int)
    for (p, k), v in xi.items():
        if res.x[v] > 0.5 and k > 0:
            i, j = pairs[p]
            C[i, j] = C[j, i] = k
    return C


@dataclass
class Plan:
    """A region's circuits and how they were chosen. Times in seconds."""

    circuits: np.ndarray  # [n, n] symmetric int
    method: str
    objective_s: float
    greedy_objective_s: float
    eps_only_objective_s: float
    candidates: int = 0
    elapsed_ms: float = 0.0
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"circuits": self.circuits.tolist(), "method": self.method, "objective_s": self.objective_s,
                "greedy_objective_s": self.greedy_objective_s, "eps_only_objective_s": self.eps_only_objective_s,
                "candidates": self.candidates, "elapsed_ms": round(self.elapsed_ms, 3), **self.extra}


def changed_circuits(A: np.ndarray, C: np.ndarray) -> int:
    """How many circuits differ between two topologies (added + removed)."""
    return int(np.abs(np.asarray(A) - np.asarray(C)).sum() // 2)


METHODS = ("greedy", "exact", "local", "ilp", "best")


def plan(B: np.ndarray, ports, rates: LinkRates | None = None, *, method: str = "best",
         current: np.ndarray | None = None, tolerance: float = 0.0) -> Plan:
    """Plan circuits for per-layer dispatch bytes ``B`` (``[L, n, n]`` or ``[n, n]``).

    ``method``: ``greedy`` (paper), ``exact`` (exhaustive; local search when the region has
    too many topologies), ``local`` (local search from the paper's greedy),
    ``ilp`` (MILP optimum; local search if the solver gives up) or ``best`` (exact when
    small, else local). Minimum-change mode: with ``current`` and ``tolerance`` τ, any
    topology within (1 + τ) of the best objective is acceptable, and the one changing the
    fewest circuits from ``current`` is returned (``current`` itself if it qualifies) —
    every changed circuit costs seconds of link bring-up.
    """
    if method not in METHODS:
        raise ValueError(f"unknown planning method {method!r}; one of {METHODS}")
    t0 = time.perf_counter()
    rates = rates or LinkRates()
    B = np.asarray(B, dtype=float)
    if B.ndim == 2:
        B = B[None]
    ports = np.asarray(ports, dtype=int)
    n = B.shape[-1]
    if len(ports) != n:
        raise ValueError(f"{len(ports)} port counts for a {n}-server matrix")
    S = B.sum(axis=0)
    S = S + S.T
    np.fill_diagonal(S, 0.0)
    Cg = greedy(S, ports)
    Bo, eps_inv = _prepare(B, rates)

    def fast_obj(Cs: np.ndarray) -> np.ndarray:  # every plan is symmetric: the fast path of objective()
        return _objective_sym(Bo, Cs, rates, eps_inv)

    g_obj, eps_obj = (float(v) for v in fast_obj(np.stack([Cg, np.zeros((n, n), dtype=int)])))
    best_C, best_obj, used, ncand = Cg, g_obj, "greedy", 1
    allc = vals = None
    if method in ("exact", "best"):
        allc = enumerate_topologies(ports)
        if allc is not None:
            vals = fast_obj(allc)
            # among (near-)ties prefer the topology that lights more circuits
            near = np.flatnonzero(vals <= vals.min() * (1 + 1e-9))
            k = int(near[np.argmax(allc[near].sum(axis=(1, 2)))])
            ncand = len(allc)
            if vals[k] < best_obj * (1 - 1e-12):
                best_C, best_obj = allc[k], float(vals[k])
            used = "exact"
    if method == "ilp":
        Ci = ilp(B, ports, rates)
        if Ci is not None:
            io = float(fast_obj(Ci[None])[0])
            if io < best_obj * (1 - 1e-12):
                best_C, best_obj = Ci, io
            used = "ilp"
    if method == "local" or (method in ("best", "exact", "ilp") and used not in ("exact", "ilp")):
        Cl = local_search(B, Cg, ports, rates)
        lo = float(fast_obj(Cl[None])[0])
        if lo < best_obj * (1 - 1e-12):
            best_C, best_obj = Cl, lo
        used = "local"
    extra: dict = {}
    if current is not None:
        cur = np.asarray(current, dtype=int)
        limit = best_obj * (1 + tolerance)
        cur_obj = float(objective(B, cur, rates)[0])
        options = [(changed_circuits(best_C, cur), best_obj, best_C, used)]
        if cur_obj <= limit:
            options.append((0, cur_obj, cur, "keep"))
        elif allc is not None and vals is not None:  # (vals are allc's)
            ok = np.flatnonzero(vals <= limit)
            ch = np.abs(allc[ok] - cur[None]).sum(axis=(1, 2)) // 2
            k = int(ok[np.argmin(ch)])
            options.append((int(ch.min()), float(vals[k]), allc[k], "min-change"))
        else:
            Cr = local_search(B, cur, ports, rates, stop_below=limit)
            ro = float(objective(B, Cr, rates)[0])
            if ro <= limit:
                options.append((changed_circuits(Cr, cur), ro, Cr, "min-change"))
        options.sort(key=lambda o: (o[0], o[1]))
        changes, obj, C, how = options[0]
        extra = {"best_objective_s": best_obj, "changed_circuits": changes, "current_objective_s": cur_obj}
        best_C, best_obj, used = C, obj, how
    return Plan(circuits=np.asarray(best_C, dtype=int), method=used, objective_s=best_obj, greedy_objective_s=g_obj,
                eps_only_objective_s=eps_obj, candidates=ncand, elapsed_ms=(time.perf_counter() - t0) * 1000, extra=extra)


def _plan_one(args: tuple) -> Plan:
    """:func:`plan` of one region (a picklable top-level function for the process pool)."""
    B, ports, rates, method = args
    return plan(B, ports, rates, method=method)


def plan_regions(regions: Sequence[tuple[np.ndarray, np.ndarray]], rates: LinkRates | None = None, *,
                 method: str = "best", workers: int | None = None, executor: Executor | None = None) -> list[Plan]:
    """Plan many independent regions (``(B, ports)`` each, as :func:`plan`), in order.

    Regions share nothing, so they are planned in parallel: on ``executor`` if given (keep
    one process pool alive across iterations to avoid its start-up), else on a fresh
    process pool of ``workers`` processes (default: every core, ``os.cpu_count()``);
    ``workers=1`` plans serially in this process. The plans are the same either way."""
    rates = rates or LinkRates()
    jobs = [(np.asarray(B, dtype=float), np.asarray(p, dtype=int), rates, method) for B, p in regions]
    workers = workers or os.cpu_count() or 1
    if executor is None and (workers <= 1 or len(jobs) <= 1):
        return [_plan_one(j) for j in jobs]
    chunk = max(1, len(jobs) // (4 * workers))
    if executor is not None:
        return list(executor.map(_plan_one, jobs, chunksize=chunk))
    with ProcessPoolExecutor(max_workers=min(workers, len(jobs))) as pool:
        return list(pool.map(_plan_one, jobs, chunksize=chunk))
