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

import itertools
import time
from dataclasses import dataclass, field

import numpy as np

EXACT_MAX_CANDIDATES = 50_000


@dataclass
class LinkRates:
    """Rates in bytes/s per direction. Defaults: 100G NIC ≈ 11.5 GB/s goodput (DESIGN §8)."""

    circuit_Bps: float = 11.5e9
    eps_Bps: float | np.ndarray = 11.5e9


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
    to the pair with the largest ``S_ij / C_ij`` (∞ while ``C_ij = 0``) whose endpoints both
    have a free port; exhausted endpoints are skipped. Ties break by lower index.
    """
    n = S.shape[0]
    C = np.zeros((n, n), dtype=int)
    avail = np.array(ports, dtype=int).copy()
    iu = [(i, j) for i in range(n) for j in range(i + 1, n) if S[i, j] > 0]
    while True:
        best, key = None, None
        for i, j in iu:
            if avail[i] <= 0 or avail[j] <= 0:
                continue
            k = (1, S[i, j]) if C[i, j] == 0 else (0, S[i, j] / C[i, j])
            if key is None or k > key:
                best, key = (i, j), k
        if best is None:
            return C
        i, j = best
        C[i, j] += 1
        C[j, i] += 1
        avail[i] -= 1
        avail[j] -= 1


def enumerate_topologies(ports: np.ndarray, limit: int = EXACT_MAX_CANDIDATES) -> np.ndarray | None:
    """Every multigraph with ``deg(i) <= ports[i]`` as ``[K, n, n]``; None if more than ``limit``."""
    n = len(ports)
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
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


def local_search(B: np.ndarray, C0: np.ndarray, ports: np.ndarray, rates: LinkRates, max_rounds: int = 50) -> np.ndarray:
    """Improve ``C0`` by best-improvement moves: add a circuit on free ports, move one end of
    a circuit to a server with a free port, or remove one or two circuits and add one
    between servers whose ports are then free (this covers swapping circuit ends)."""
    C = C0.copy()
    n = C.shape[0]
    best = float(objective(B, C, rates)[0])
    for _ in range(max_rounds):
        cands = []
        free = np.asarray(ports) - C.sum(axis=1)
        for i, j in itertools.combinations(range(n), 2):
            if free[i] > 0 and free[j] > 0:
                D = C.copy(); D[i, j] += 1; D[j, i] += 1; cands.append(D)
        edges = [(i, j) for i, j in itertools.combinations(range(n), 2) if C[i, j] > 0]
        for i, j in edges:
            for a, b in ((i, j), (j, i)):
                for k in range(n):
                    if k in (a, b) or free[k] <= 0:
                        continue
                    D = C.copy(); D[a, b] -= 1; D[b, a] -= 1; D[a, k] += 1; D[k, a] += 1; cands.append(D)
        # remove one or two circuits, then add one circuit between servers with free ports
        removals = [[e] for e in edges] + [[e, f] for e, f in itertools.combinations(edges, 2)]
        for rem in removals:
            D0 = C.copy()
            for i, j in rem:
                D0[i, j] -= 1
                D0[j, i] -= 1
            free0 = np.asarray(ports) - D0.sum(axis=1)
            for p, q in itertools.combinations(range(n), 2):
                if free0[p] > 0 and free0[q] > 0 and (p, q) not in rem:
                    D = D0.copy(); D[p, q] += 1; D[q, p] += 1; cands.append(D)
        if not cands:
            break
        vals = objective(B, np.stack(cands), rates)
        k = int(np.argmin(vals))
        if vals[k] >= best * (1 - 1e-9):
            break
        best, C = float(vals[k]), cands[k]
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
                "candidates": self.candidates, "elapsed_ms": round(self.elapsed_ms, 3)}


def plan(B: np.ndarray, ports, rates: LinkRates | None = None, *, method: str = "best") -> Plan:
    """Plan circuits for per-layer dispatch bytes ``B`` (``[L, n, n]`` or ``[n, n]``).

    ``method``: ``greedy`` (paper), ``exact`` (exhaustive; falls back to local search when
    the region has more than EXACT_MAX_CANDIDATES topologies), ``local`` or ``best``
    (greedy, then exact if small else local search; keeps the best).
    """
    t0 = time.perf_counter()
    rates = rates or LinkRates()
    B = np.asarray(B, dtype=float)
    if B.ndim == 2:
        B = B[None]
    ports = np.asarray(ports, dtype=int)
    n = B.shape[-1]
    S = B.sum(axis=0)
    S = S + S.T
    np.fill_diagonal(S, 0.0)
    Cg = greedy(S, ports)
    g_obj = float(objective(B, Cg, rates)[0])
    eps_obj = float(objective(B, np.zeros((n, n), dtype=int), rates)[0])
    best_C, best_obj, used, ncand = Cg, g_obj, "greedy", 1
    if method in ("exact", "best"):
        allc = enumerate_topologies(ports)
        if allc is not None:
            vals = objective(B, allc, rates)
            # among (near-)ties prefer the topology that lights more circuits
            near = np.flatnonzero(vals <= vals.min() * (1 + 1e-9))
            k = int(near[np.argmax(allc[near].sum(axis=(1, 2)))])
            ncand = len(allc)
            if vals[k] < best_obj * (1 - 1e-12):
                best_C, best_obj = allc[k], float(vals[k])
            used = "exact"
        elif method == "exact":
            method = "local"
    if method == "local" or (method == "best" and used != "exact"):
        Cl = local_search(B, Cg, ports, rates)
        lo = float(objective(B, Cl, rates)[0])
        if lo < best_obj * (1 - 1e-12):
            best_C, best_obj = Cl, lo
        used = "local"
    elif method not in ("greedy", "exact", "best"):
        raise ValueError(f"unknown planning method {method!r}")
    return Plan(circuits=best_C.astype(int), method=used, objective_s=best_obj, greedy_objective_s=g_obj,
                eps_only_objective_s=eps_obj, candidates=ncand, elapsed_ms=(time.perf_counter() - t0) * 1000)
