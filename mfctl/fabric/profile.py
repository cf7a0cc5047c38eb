"""FSMoE-style profiling: fit ``t = α + β·n`` per task (all-to-all, all-reduce, GEMM).

``α`` is a fixed cost (s), ``β`` a cost per unit of work (s per byte, or s per FLOP); the
fit is least squares on the relative error (rows weighted by 1/t, so small and large sizes
count alike), with the relative RMS error of the fit reported (FSMoE, arXiv 2501.10714, §4: linear models per task)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Fit:
    task: str
    alpha_s: float
    beta_s_per_unit: float
    unit: str  # "byte" or "flop"
    rel_rms_error: float
    points: int
    n_max: float | None = None  #: the largest size measured (units of ``unit``): beyond it the fit extrapolates

    @property
    def rate(self) -> float:
        """Units per second at large sizes (bytes/s or FLOP/s)."""
        return 1.0 / self.beta_s_per_unit if self.beta_s_per_unit > 0 else float("inf")

    def predict(self, n: float) -> float:
        return self.alpha_s + self.beta_s_per_unit * n

    def to_dict(self) -> dict:
        return {"task": self.task, "alpha_s": self.alpha_s, "beta_s_per_unit": self.beta_s_per_unit, "unit": self.unit,
                "rate_per_s": self.rate, "rel_rms_error": self.rel_rms_error, "points": self.points, "n_max": self.n_max}


def fit_linear(task: str, n: np.ndarray, t: np.ndarray, unit: str) -> Fit:
    """Least-squares ``t = α + β n``; raises ValueError with fewer than 2 distinct sizes."""
    n = np.asarray(n, dtype=float)
    t = np.asarray(t, dtype=float)
    keep = np.isfinite(n) & np.isfinite(t)
    n, t = n[keep], t[keep]
    if len(np.unique(n)) < 2:
        raise ValueError(f"{task}: need measurements at 2 or more sizes, got {len(np.unique(n))}")
    # weighted by 1/t: minimise the *relative* error, so small messages (α) count as much as large ones (β)
    A = np.stack([np.ones_like(n), n], axis=1) / t[:, None]
    (alpha, beta), *_ = np.linalg.lstsq(A, np.ones_like(t), rcond=None)
    pred = alpha + beta * n
    err = float(np.sqrt(np.mean(((pred - t) / t) ** 2)))
    return Fit(task, float(max(alpha, 0.0)), float(beta), unit, err, int(len(n)), float(n.max()))


#: the tasks a profile fits and the unit of their ``n`` (``mfctl profile``'s sweeps; a job's
#: ``timings``: :mod:`mfctl.integrations.torch_timing` records ``alltoall`` and ``gemm``)
TASK_UNITS = {"alltoall": "byte", "all_reduce": "byte", "gemm": "flop"}
#: a measured sample's bounds: ``n`` up to 1e18 (an exabyte, an exaFLOP: no one call does more) and
#: ``seconds`` in (0, 3600] (0 cannot be fitted on a relative scale; no one call takes an hour)
MAX_N = 1e18
MAX_SECONDS = 3600.0
#: samples are reduced to one point per size bin of 1/BINS_PER_OCTAVE octave (9 % wide at 8)
BINS_PER_OCTAVE = 8


def clean_timings(entries, limit: int) -> tuple[list[tuple[str, float, str, float]], dict[str, int]]:
    """The valid samples among ``entries`` (a job's ``timings``: ``[{"task", "n", "unit",
    "seconds"}, ...]``) as ``(task, n, unit, seconds)``, at most ``limit`` of them (the first), and
    the count of entries dropped by reason. Valid: a mapping whose ``task`` is a key of
    :data:`TASK_UNITS` with that ``unit``, ``n`` a real number in [0, :data:`MAX_N`] and
    ``seconds`` one in (0, :data:`MAX_SECONDS`] (bools, NaN and infinities are not). Never raises:
    ``entries`` that is not a list is one ``"not a list"``."""
    dropped: dict[str, int] = {}

    def drop(why: str, k: int = 1) -> None:
        dropped[why] = dropped.get(why, 0) + k

    if not isinstance(entries, list):
        drop("not a list")
        return [], dropped
    if len(entries) > limit:
        drop(f"over {limit} in one message", len(entries) - limit)
    rows = []
    for e in entries[:limit]:
        if not isinstance(e, dict):
            drop("not an object")
            continue
        task, unit, n, s = e.get("task"), e.get("unit"), _real(e.get("n")), _real(e.get("seconds"))
        if not isinstance(task, str) or task not in TASK_UNITS:
            drop("unknown task")
        elif unit != TASK_UNITS[task]:
            drop("wrong unit")
        elif n is None or not 0 <= n <= MAX_N:
            drop("n not a number in [0, 1e18]")
        elif s is None or not 0 < s <= MAX_SECONDS:
            drop("seconds not a number in (0, 3600]")
        else:
            rows.append((task, n, unit, s))
    return rows, dropped


def _real(x) -> float | None:
    """``x`` as a finite float, or None: for a bool, a non-number, NaN, an infinity, and an int too
    large for a float (JSON's integers have no bound: ``float(10**400)`` raises OverflowError)."""
    import math

    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    if isinstance(x, int) and abs(x) > 2**64:
        return None
    return float(x) if math.isfinite(x) else None


def fastest_per_bin(n: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One point per size bin (:data:`BINS_PER_OCTAVE` bins per octave of ``n``; ``n = 0`` a bin of
    its own): the bin's fastest sample, its own ``(n, t)``. A shared host's other processes only
    ever add time to a call (preemption, cache and memory contention), so the fastest of like
    calls is the cost of the call itself — timeit's rule (docs.python.org/3/library/timeit.html:
    "the lowest value gives a lower bound for how fast your machine can run the given code
    snippet"); nccl-tests likewise reports one time per size. Points are in order of ``n``."""
    n = np.asarray(n, dtype=float)
    t = np.asarray(t, dtype=float)
    with np.errstate(divide="ignore"):
        key = np.where(n > 0, np.round(BINS_PER_OCTAVE * np.log2(np.where(n > 0, n, 1))), -np.inf)
    order = np.lexsort((t, key))  # by bin, fastest first within a bin
    first = np.ones(len(order), dtype=bool)
    first[1:] = key[order][1:] != key[order][:-1]
    pick = order[first]
    return n[pick], t[pick]


def fit_samples(task: str, n: np.ndarray, t: np.ndarray, unit: str) -> Fit:
    """:func:`fit_linear` on the :func:`fastest_per_bin` points of a job's raw samples (its
    ``points`` are the bins, its ``rel_rms_error`` the residual on them). Raises ValueError with
    fewer than 2 bins."""
    pn, pt = fastest_per_bin(n, t)
    return fit_linear(task, pn, pt, unit)
