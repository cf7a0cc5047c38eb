"""Traffic prediction for planning ahead (DESIGN §6, the paper's "Copilot" idea).

- :class:`LastPredictor` — the next iteration looks like the last one;
- :class:`EWMAPredictor` — exponentially weighted average of past iterations;
- :class:`CrossLayerModel` — a later layer's routing from an earlier layer's, through the
  expert-to-expert transition probabilities fitted on the real cross-layer co-occurrence
  counts shipped in ``mfctl/data/routing/*_crosslayer`` (row-normalised counts of tokens
  routed to expert i at layer a and expert j at layer b).

Errors are relative L1: ``|pred − actual|₁ / |actual|₁``.
"""

from __future__ import annotations

import json
from importlib import resources

import numpy as np

CROSSLAYER = {"mixtral": "mixtral_crosslayer", "olmoe": "olmoe_crosslayer"}


def rel_error(pred: np.ndarray, actual: np.ndarray) -> float:
    a = float(np.abs(actual).sum())
    return float(np.abs(np.asarray(pred) - np.asarray(actual)).sum() / a) if a > 0 else 0.0


class LastPredictor:
    name = "last"

    def __init__(self):
        self.value: np.ndarray | None = None

    def predict(self) -> np.ndarray | None:
        return self.value

    def observe(self, x: np.ndarray) -> None:
        self.value = np.asarray(x, dtype=float)


class EWMAPredictor(LastPredictor):
    name = "ewma"

    def __init__(self, alpha: float = 0.5):
        super().__init__()
        self.alpha = alpha

    def observe(self, x: np.ndarray) -> None:
        x = np.asarray(x, dtype=float)
        self.value = x if self.value is None else self.alpha * x + (1 - self.alpha) * self.value


class CrossLayerModel:
    """Expert transition matrices ``P[(a, b)]`` (rows sum to 1) between trace layers."""

    def __init__(self, transitions: dict[tuple[int, int], np.ndarray]):
        self.P = transitions

    @classmethod
    def load(cls, trace: str, domains: list[str] | None = None) -> "CrossLayerModel":
        """Fit on the shipped co-occurrence counts (summed over ``domains``, default all)."""
        if trace not in CROSSLAYER:
            raise ValueError(f"no cross-layer data for {trace!r}; have {sorted(CROSSLAYER)}")
        root = resources.files("mfctl.data").joinpath("routing").joinpath(CROSSLAYER[trace])
        files = sorted((p for p in root.iterdir() if p.name.endswith(".json")), key=lambda p: p.name)
        sums: dict[tuple[int, int], np.ndarray] = {}
        for f in files:
            if domains and f.name[:-5] not in domains:
                continue
            doc = json.loads(f.read_text())
            for (a, b), m in zip(doc["layer_pairs"], doc["matrices"]):
                sums[(a, b)] = sums.get((a, b), 0) + np.asarray(m, dtype=float)
        if not sums:
            raise ValueError(f"no cross-layer matrices for {trace!r} and domains {domains}")
        P = {}
        for k, m in sums.items():
            rows = m.sum(axis=1, keepdims=True)
            P[k] = np.divide(m, rows, out=np.full_like(m, 1.0 / m.shape[1]), where=rows > 0)
        return cls(P)

    def predict_tokens(self, tokens: np.ndarray, a: int, b: int) -> np.ndarray:
        """Expected token counts at layer ``b`` (``[..., E]``) from those observed at layer ``a``."""
        return np.asarray(tokens, dtype=float) @ self.P[(a, b)]
