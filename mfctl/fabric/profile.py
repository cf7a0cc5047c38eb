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

    @property
    def rate(self) -> float:
        """Units per second at large sizes (bytes/s or FLOP/s)."""
        return 1.0 / self.beta_s_per_unit if self.beta_s_per_unit > 0 else float("inf")

    def predict(self, n: float) -> float:
        return self.alpha_s + self.beta_s_per_unit * n

    def to_dict(self) -> dict:
        return {"task": self.task, "alpha_s": self.alpha_s, "beta_s_per_unit": self.beta_s_per_unit, "unit": self.unit,
                "rate_per_s": self.rate, "rel_rms_error": self.rel_rms_error, "points": self.points}


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
    return Fit(task, float(max(alpha, 0.0)), float(beta), unit, err, int(len(n)))
