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
starts from the greedy result (:mod:`mfctl.fabric.search`, vectorised over many regions at
once). :func:`plan` returns the best under the objective; :func:`plan_regions` plans many.
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

from mfctl.fabric import search

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


def greedy(S: np.ndarray, ports: np.ndarray) -> np.ndarray:
    """The paper's Algorithm 1 on symmetric demand ``S``: repeatedly give one more circuit
    to the pair with the largest ``S_ij / C_ij`` (∞ while ``C_ij = 0``, so every demanded
    pair first gets one circuit, largest demand first) whose endpoints both have a free
    port. Where the paper's pseudo-code stops at the first bottleneck pair without free
    ports, this skips such pairs and continues, as the MixNet simulator does. Ties break
    by lower index. O(P log P) with a heap over the P demanded pairs (plain Python numbers:
    for a region's few dozen pairs numpy's per-element access would cost more than the loop).
    """
    n = S.shape[0]
    demand = np.asarray(S, dtype=float).tolist()
    avail = [int(p) for p in np.asarray(ports).tolist()]
    count = [[0] * n for _ in range(n)]
    # heap of (-(class), -(value), i, j): class 1 = no circuit yet (T = inf), 0 = has circuits
    heap = [(-1, -demand[i][j], i, j) for i in range(n) for j in range(i + 1, n) if demand[i][j] > 0]
    heapq.heapify(heap)
    while heap:
        _, _, i, j = heapq.heappop(heap)
        if avail[i] <= 0 or avail[j] <= 0:
            continue  # an exhausted endpoint never frees up again
        count[i][j] += 1
        avail[i] -= 1
        avail[j] -= 1
        heapq.heappush(heap, (0, -demand[i][j] / count[i][j], i, j))
    C = np.array(count, dtype=int).reshape(n, n)
    return C + C.T


def _certainly_too_many(ports: np.ndarray, limit: int = EXACT_MAX_CANDIDATES) -> bool:
    """Whether a crude bound (Σ_pairs log(min ports + 1) of ~40 × the limit) rules enumeration out before it starts."""
    iu, ju = search.pair_ends(len(ports))
    return float(np.log(np.minimum(ports[iu], ports[ju]) + 1.0).sum()) > np.log(40.0 * limit)


def enumerate_topologies(ports: np.ndarray, limit: int = EXACT_MAX_CANDIDATES) -> np.ndarray | None:
    """Every multigraph with ``deg(i) <= ports[i]`` as ``[K, n, n]`` (read-only: the same
    port counts give the same list, kept for the next call); None if more than ``limit``."""
    return _enumerate(tuple(int(p) for p in np.asarray(ports).tolist()), limit)


@functools.lru_cache(maxsize=8)
def _enumerate(port_counts: tuple[int, ...], limit: int) -> np.ndarray | None:
    ports = np.array(port_counts, dtype=int)
    n = len(ports)
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    if _certainly_too_many(ports, limit):
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
    allc = np.stack(out)
    allc.setflags(write=False)
    return allc


def _to_pairs(C: np.ndarray) -> np.ndarray:
    """Symmetric circuits ``[K, n, n]`` → per pair ``[K, P + 1]`` (the search's layout: the
    last slot is its dump, 0)."""
    iu, ju = search.pair_ends(C.shape[-1])
    out = np.zeros((C.shape[0], len(iu) + 1), dtype=np.intp)
    out[:, :-1] = C[:, iu, ju]
    return out


def _from_pairs(Cp: np.ndarray, n: int) -> np.ndarray:
    """Per pair ``[K, P]`` (or ``[K, P + 1]``) → symmetric ``[K, n, n]`` int."""
    iu, ju = search.pair_ends(n)
    C = np.zeros((Cp.shape[0], n, n), dtype=int)
    C[:, iu, ju] = C[:, ju, iu] = Cp[:, : len(iu)]
    return C


@dataclass
class _Batch:
    """``R`` same-shaped regions (``B`` ``[R, L, n, n]``, ``ports`` ``[R, n]``) as the search sees
    them, with the paper's greedy plan of each and its objective, and the EPS-only objective."""

    region: search.Region
    ports: np.ndarray
    greedy: np.ndarray  # [R, P + 1]
    greedy_obj: np.ndarray  # [R] s
    eps_obj: np.ndarray  # [R] s

    @classmethod
    def of(cls, B: np.ndarray, ports: np.ndarray, rates: LinkRates, max_circuits: int = 0) -> _Batch:
        S = B.sum(axis=1)
        S = S + np.swapaxes(S, 1, 2)
        idx = np.arange(S.shape[-1])
        S[:, idx, idx] = 0.0
        Cg = np.stack([greedy(s, p) for s, p in zip(S, ports)])
        region = search.Region.of(B, rates.circuit_Bps, rates.eps_Bps, max(int(ports.max(initial=1)), max_circuits))
        R = len(B)
        greedy_pairs = _to_pairs(Cg)
        # the greedy plans and no circuits at all, judged in one pass
        both = search.times(region, np.tile(np.arange(R), 2), np.concatenate([greedy_pairs, np.zeros_like(greedy_pairs)]))
        obj = both.objective()
        return cls(region, ports, greedy_pairs, obj[:R], obj[R:])

    def objective(self, C: np.ndarray, row: int = 0) -> np.ndarray:
        """``[K]`` objective (s) of symmetric candidates ``C`` ``[K, n, n]`` for region ``row``:
        the same value as :func:`objective`, in a fraction of its work."""
        return search.times(self.region, np.full(len(C), row), _to_pairs(C)).objective()

    def search(self, start: np.ndarray | None = None, stop_below: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The local search of every region from ``start`` ``[R, P + 1]`` (default: the greedy
        plans): the circuits ``[R, n, n]`` and their objective ``[R]`` in seconds."""
        n = self.ports.shape[1]
        start = self.greedy if start is None else start
        C, obj, _ = search.local_search(self.region, start[:, :-1], self.ports, 4 * n * int(self.ports.max(initial=1)),
                                        stop_below=stop_below)
        return _from_pairs(C, n), obj


def local_search(B: np.ndarray, C0: np.ndarray, ports: np.ndarray, rates: LinkRates,
                 stop_below: float | None = None) -> np.ndarray:
    """Improve ``C0`` ``[n, n]`` for dispatch bytes ``B`` (``[L, n, n]`` or ``[n, n]``) by the
    best-improvement local search of :mod:`mfctl.fabric.search`; stops at a local optimum or
    once the objective is at most ``stop_below`` seconds."""
    B = np.asarray(B, dtype=float)
    B = B[None] if B.ndim == 2 else B
    C0 = np.asarray(C0, dtype=int)
    batch = _Batch.of(B[None], np.asarray(ports, dtype=int)[None], rates, int(C0.max(initial=0)))
    C, _ = batch.search(_to_pairs(C0[None]), None if stop_below is None else np.array([stop_below]))
    return C[0]


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
    cur = None if current is None else np.asarray(current, dtype=int)
    batch = _Batch.of(B[None], ports[None], rates, 0 if cur is None else int(cur.max(initial=0)))
    fast_obj = batch.objective  # every plan is symmetric: the fast path of objective()
    Cg = _from_pairs(batch.greedy, n)[0]
    g_obj, eps_obj = float(batch.greedy_obj[0]), float(batch.eps_obj[0])
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
        Cl, lo = batch.search()
        if lo[0] < best_obj * (1 - 1e-12):
            best_C, best_obj = Cl[0], float(lo[0])
        used = "local"
    extra: dict = {}
    if cur is not None:
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
            Crs, _ = batch.search(_to_pairs(cur[None]), np.array([limit]))
            Cr = Crs[0]
            ro = float(objective(B, Cr, rates)[0])
            if ro <= limit:
                options.append((changed_circuits(Cr, cur), ro, Cr, "min-change"))
        options.sort(key=lambda o: (o[0], o[1]))
        changes, obj, C, how = options[0]
        extra = {"best_objective_s": best_obj, "changed_circuits": changes, "current_objective_s": cur_obj}
        best_C, best_obj, used = C, obj, how
    return Plan(circuits=np.array(best_C, dtype=int), method=used, objective_s=best_obj, greedy_objective_s=g_obj,
                eps_only_objective_s=eps_obj, candidates=ncand, elapsed_ms=(time.perf_counter() - t0) * 1000, extra=extra)


def _plan_local(jobs: list[tuple[np.ndarray, np.ndarray]], rates: LinkRates) -> list[Plan]:
    """:func:`plan` (``method="local"``) of same-shaped regions ``(B [L, n, n], ports [n])``,
    all searched in one batch; each plan's ``elapsed_ms`` is the batch's time ÷ its regions."""
    t0 = time.perf_counter()
    batch = _Batch.of(np.stack([B for B, _ in jobs]), np.stack([p for _, p in jobs]), rates)
    C, obj = batch.search()  # never above the greedy start: the search takes only strictly better moves
    took = (time.perf_counter() - t0) * 1000 / len(jobs)
    return [Plan(circuits=c, method="local", objective_s=float(o), greedy_objective_s=float(g), eps_only_objective_s=float(e),
                 candidates=1, elapsed_ms=took) for c, o, g, e in zip(C, obj, batch.greedy_obj, batch.eps_obj)]


def _plan_chunk(args: tuple) -> list[Plan]:
    """Plans of consecutive regions ``(B, ports)``, as :func:`plan` gives them: regions that need
    the local search are searched together, one batch per shape; the rest one by one (a
    picklable top-level function for the process pool)."""
    jobs, rates, method = args
    if method not in ("best", "local"):
        return [plan(B, ports, rates, method=method) for B, ports in jobs]
    out: list[Plan | None] = [None] * len(jobs)
    shapes: dict[tuple, list[int]] = {}
    for k, (B, ports) in enumerate(jobs):
        if B.shape[-1] != len(ports):
            raise ValueError(f"region {k}: {len(ports)} port counts for a {B.shape[-1]}-server matrix")
        if method == "best" and not _certainly_too_many(ports):
            out[k] = plan(B, ports, rates, method=method)  # small: exhaustive search
        else:
            shapes.setdefault(B.shape, []).append(k)
    for ks in shapes.values():
        for k, p in zip(ks, _plan_local([jobs[k] for k in ks], rates)):
            out[k] = p
    return [p for p in out if p is not None]


#: without a pool of the caller's, fewer regions are planned in this process, by search kind: starting a fresh
#: pool (fork, 2 workers) cost ~0.3-0.5 s on the 2-core sandbox, more than planning 512 same-shaped 8-server
#: regions here (compiled: ~0.07 s CPU; numpy: 0.4-0.7 s wall; benchmarks/planner.py, issue 22)
FRESH_POOL_MIN_REGIONS = {"compiled": 8192, "numpy": 1024}


def plan_regions(regions: Sequence[tuple[np.ndarray, np.ndarray]], rates: LinkRates | None = None, *,
                 method: str = "best", workers: int | None = None, executor: Executor | None = None) -> list[Plan]:
    """Plan many independent regions (``(B, ports)`` each, as :func:`plan`), in order; the
    plans are :func:`plan`'s.

    Same-shaped regions that need the local search are searched together (:mod:`mfctl.fabric.search`:
    one call of the compiled search, or one vectorised numpy pass per round over all of them,
    which for many small regions beats numpy calls per region by far). With ``workers`` > 1 the regions are split
    into one consecutive chunk per worker, each planned on a process of ``executor`` if given
    (keep one pool alive across iterations to skip its start-up), else of a fresh process
    pool; ``workers=1`` plans in this process. Default: every core (``os.cpu_count()``) on an
    ``executor``, or without one from :data:`FRESH_POOL_MIN_REGIONS` regions (by search kind); fewer are planned
    in this process, as a fresh pool's start-up costs more than it saves. Circuits and
    objectives are :func:`plan`'s, whichever way."""
    if method not in METHODS:
        raise ValueError(f"unknown planning method {method!r}; one of {METHODS}")
    rates = rates or LinkRates()
    jobs = []
    for B, p in regions:
        B = np.asarray(B, dtype=float)
        jobs.append((B[None] if B.ndim == 2 else B, np.asarray(p, dtype=int)))
    if workers is None:
        big = len(jobs) >= FRESH_POOL_MIN_REGIONS[search.kernel()]
        workers = (os.cpu_count() or 1) if executor is not None or big else 1
    if executor is None and (workers <= 1 or len(jobs) <= 1):
        return _plan_chunk((jobs, rates, method))
    k = min(workers, len(jobs))
    chunks = [(jobs[c * len(jobs) // k:(c + 1) * len(jobs) // k], rates, method) for c in range(k)]
    if executor is not None:
        return [p for chunk in executor.map(_plan_chunk, chunks) for p in chunk]
    with ProcessPoolExecutor(max_workers=k) as pool:
        return [p for chunk in pool.map(_plan_chunk, chunks) for p in chunk]
