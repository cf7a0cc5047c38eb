"""Reproduce the MixNet paper's iteration-time comparison (SIGCOMM'25 §7.3–7.4, Fig. 12/13) with
the flow model of :mod:`mfctl.fabric.itermodel` (``mfctl simulate --reproduce-paper``,
``benchmarks/whatif.py``).

Reference: the paper's own normalized iteration times, ``data/normalized_performance.csv`` of the
project website (``mixnet-project/mixnet-project.github.io`` commit 7d4b679; the copy in
``../shared/paper/mixnet-normalized-iteration-time.csv``), 4 models × {100, 400} Gbit/s × 4
fabrics, each model normalized to its best configuration over all link speeds (100, 200, 400,
800) and fabrics. Ours is normalized the same way, over the same 16 configurations.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from mfctl.fabric import itermodel as im

#: The reference's column for each of our fabric names.
REF_FABRICS = {"fat-tree": "fattree", "mixnet": "mixnet", "rail-optimized": "rail-optimized", "topoopt": "topoopt"}
#: The reference's model names.
REF_MODELS = {"mixtral-8x22b": "Mixtral 8*22B", "mixtral-8x7b": "Mixtral 8*7B", "llama-moe": "Llama-MoE",
              "qwen-moe": "Qwen-MoE"}
SPEEDS = (100, 200, 400, 800)
REF_SPEEDS = (100, 400)

#: The reference values (normalized iteration time, lower is better), as published (see module doc).
REFERENCE: dict[tuple[str, int], dict[str, float]] = {
    ("mixtral-8x22b", 100): {"fat-tree": 1.374348, "mixnet": 1.454171, "rail-optimized": 1.360568, "topoopt": 2.696523},
    ("mixtral-8x22b", 400): {"fat-tree": 1.081699, "mixnet": 1.113841, "rail-optimized": 1.095727, "topoopt": 1.575201},
    ("mixtral-8x7b", 100): {"fat-tree": 1.209814, "mixnet": 1.248770, "rail-optimized": 1.189018, "topoopt": 2.273174},
    ("mixtral-8x7b", 400): {"fat-tree": 1.030224, "mixnet": 1.030947, "rail-optimized": 1.013105, "topoopt": 1.268447},
    ("llama-moe", 100): {"fat-tree": 3.932362, "mixnet": 5.009859, "rail-optimized": 5.313843, "topoopt": 9.530616},
    ("llama-moe", 400): {"fat-tree": 1.346175, "mixnet": 1.599193, "rail-optimized": 1.675353, "topoopt": 3.980508},
    ("qwen-moe", 100): {"fat-tree": 5.094186, "mixnet": 6.173744, "rail-optimized": 6.110422, "topoopt": 7.774868},
    ("qwen-moe", 400): {"fat-tree": 1.563194, "mixnet": 1.764374, "rail-optimized": 1.830233, "topoopt": 2.801891},
}

#: The paper's performance-per-dollar bands for MixNet vs the fat-tree (§7.4; 200/800G from App. D.5).
PERF_PER_DOLLAR_BANDS = {100: (1.2, 1.5), 200: (1.4, 1.8), 400: (1.9, 2.3), 800: (2.0, 2.4)}

#: Our fabric name → the cost model's (:func:`mfctl.fabric.whatif.network_cost`).
COST_NAMES = {"fat-tree": "fat-tree", "fat-tree-3to1": "fat-tree-3to1", "rail-optimized": "rail-optimized",
              "topoopt": "static-optical", "mixnet": "mfabric"}


def read_reference(path: str | Path) -> dict[tuple[str, int], dict[str, float]]:
    """The reference CSV (``Model,Bandwidth,fattree,mixnet,rail-optimized,topoopt``) as :data:`REFERENCE`
    is keyed. Raises ValueError for an unknown model or a missing column."""
    back = {v: k for k, v in REF_MODELS.items()}
    out: dict[tuple[str, int], dict[str, float]] = {}
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            if row.get("Model") not in back:
                raise ValueError(f"{path}: unknown model {row.get('Model')!r}")
            try:
                out[(back[row["Model"]], int(float(row["Bandwidth"])))] = {
                    ours: float(row[col]) for ours, col in REF_FABRICS.items()}
            except KeyError as e:
                raise ValueError(f"{path}: no column {e}") from None
    return out


@dataclass
class Reproduction:
    """Ours vs the paper: cells, summary, orderings, perf/$ and the latency sweep."""

    cells: list[dict]
    summary: dict
    orderings: dict
    perf_per_dollar: list[dict]
    latency_sweep: list[dict]
    iterations: dict  # model → speed → fabric → iteration s (absolute)

    def to_dict(self) -> dict:
        return {"cells": self.cells, "summary": self.summary, "orderings": self.orderings,
                "perf_per_dollar": self.perf_per_dollar, "latency_sweep": self.latency_sweep,
                "iterations": self.iterations}


def latency_sweep(ph: im.Physics, latencies_s: list[float], model: str = "mixtral-8x22b", gbps: int = 400) -> list[dict]:
    """MixNet's iteration time relative to the fat-tree by reconfiguration latency (paper App. D.7:
    Mixtral 8x22B, 400G)."""
    m = im.MODELS[model]
    ft = im.step(m, "fat-tree", gbps, ph).iteration_s
    return [{"latency_s": L, "relative_to_fat_tree": im.step(m, "mixnet", gbps, im.with_latency(ph, L)).iteration_s / ft}
            for L in latencies_s]


SWEEP_S = [1e-6, 1e-3, 0.025, 0.1, 0.3, 1.0, 3.0, 10.0]


def reproduce(ph: im.Physics | None = None, reference: dict | None = None) -> Reproduction:
    """Run every model at every link speed on every fabric; compare with ``reference`` (default:
    :data:`REFERENCE`). The default run is computed once per process."""
    if ph is None and reference is None:
        return _default()
    return _reproduce(ph or im.Physics(), reference or REFERENCE)


@lru_cache(maxsize=1)
def _default() -> Reproduction:
    return _reproduce(im.Physics(), REFERENCE)


def _reproduce(ph: im.Physics, ref: dict) -> Reproduction:
    from mfctl.fabric.whatif import network_cost

    cells, ppd, iters = [], [], {}
    held = {"topoopt_slower_than_mixnet": True, "mixnet_within_0_30pct_of_fat_tree": True,
            "mixnet_gap_closes_with_speed": True, "faster_links_never_slower": True,
            "perf_per_dollar_in_paper_bands": True}
    fails: list[str] = []
    servers = ph.gpus // im.GPUS_PER_SERVER
    for key in REF_MODELS:
        m = im.MODELS[key]
        t = {g: {f: im.step(m, f, g, ph).iteration_s for f in im.FABRICS} for g in SPEEDS}
        iters[key] = {str(g): v for g, v in t.items()}
        best = min(t[g][f] for g in SPEEDS for f in REF_FABRICS)
        gaps = []
        for g in SPEEDS:
            if t[g]["topoopt"] <= t[g]["mixnet"]:
                held["topoopt_slower_than_mixnet"] = False
                fails.append(f"{key} {g}G: TopoOpt not slower than MixNet")
            gap = t[g]["mixnet"] / t[g]["fat-tree"] - 1
            gaps.append(gap)
            if not -0.005 <= gap <= 0.30:
                held["mixnet_within_0_30pct_of_fat_tree"] = False
                fails.append(f"{key} {g}G: MixNet {100 * gap:+.0f}% vs the fat-tree")
            for f in REF_FABRICS:
                ours = t[g][f] / best
                paper = ref.get((key, g), {}).get(f)
                cells.append({"model": key, "gbps": g, "fabric": f, "ours": ours, "paper": paper,
                              "error": None if paper is None else abs(ours - paper) / paper})
            cost = {f: network_cost(COST_NAMES[f], servers, g, ph.alpha) for f in im.FABRICS}
            rel = (t[g]["fat-tree"] / t[g]["mixnet"]) * (cost["fat-tree"] / cost["mixnet"])
            lo, hi = PERF_PER_DOLLAR_BANDS[g]
            ok = lo - 0.05 <= rel <= hi + 0.05
            ppd.append({"model": key, "gbps": g, "mixnet_vs_fat_tree": rel, "paper_band": [lo, hi], "in_band": ok,
                        "cost_usd": cost})
            if g in REF_SPEEDS and not ok:
                held["perf_per_dollar_in_paper_bands"] = False
                fails.append(f"{key} {g}G: perf/$ {rel:.2f}x outside {lo}-{hi}")
        if not all(a >= b - 1e-9 for a, b in zip(gaps, gaps[1:])) and gaps[-1] > gaps[0]:
            held["mixnet_gap_closes_with_speed"] = False
            fails.append(f"{key}: MixNet's gap to the fat-tree does not close with speed")
        for f in im.FABRICS:
            seq = [t[g][f] for g in SPEEDS]
            if any(b > a * (1 + 1e-9) for a, b in zip(seq, seq[1:])):
                held["faster_links_never_slower"] = False
                fails.append(f"{key} {f}: a faster link is slower")
    summary: dict = {}
    for g in REF_SPEEDS:
        errs = [c["error"] for c in cells if c["gbps"] == g and c["error"] is not None]
        summary[str(g)] = {"mean_error": float(np.mean(errs)), "worst_error": float(np.max(errs)), "cells": len(errs)}
    allerr = [c["error"] for c in cells if c["error"] is not None]
    summary["all"] = {"mean_error": float(np.mean(allerr)), "worst_error": float(np.max(allerr)), "cells": len(allerr)}
    held["failures"] = fails  # type: ignore[assignment]
    return Reproduction(cells=cells, summary=summary, orderings=held, perf_per_dollar=ppd,
                        latency_sweep=latency_sweep(ph, SWEEP_S), iterations=iters)


def plot(rep: Reproduction, path: str) -> None:
    """A PNG like the paper's Fig. 12: per model, normalized iteration time by fabric and link
    speed (bars: ours; markers: the paper's 100 and 400 Gbit/s), and the latency sweep."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(REF_MODELS)
    fig, axes = plt.subplots(1, len(models) + 1, figsize=(4.2 * (len(models) + 1), 3.8))
    fabs = list(REF_FABRICS)
    colors = ["#4c72b0", "#55a868", "#c44e52", "#8172b2"]
    x = np.arange(len(SPEEDS))
    w = 0.8 / len(fabs)
    for ax, key in zip(axes, models):
        for k, f in enumerate(fabs):
            ours = [next(c["ours"] for c in rep.cells if c["model"] == key and c["gbps"] == g and c["fabric"] == f)
                    for g in SPEEDS]
            ax.bar(x + (k - 1.5) * w, ours, w, color=colors[k], label=f)
            pts = [(i, c["paper"]) for i, g in enumerate(SPEEDS) for c in rep.cells
                   if c["model"] == key and c["gbps"] == g and c["fabric"] == f and c["paper"] is not None]
            if pts:
                ax.plot([i + (k - 1.5) * w for i, _ in pts], [p for _, p in pts], "k_", ms=10, mew=2)
        ax.set_xticks(x, [f"{g}G" for g in SPEEDS])
        ax.set_title(im.MODELS[key].name)
        ax.set_ylabel("normalized iteration time")
    axes[0].legend(fontsize=7, title="bars: ours, -: paper", title_fontsize=7)
    sw = rep.latency_sweep
    axes[-1].semilogx([s["latency_s"] for s in sw], [s["relative_to_fat_tree"] for s in sw], marker="o")
    axes[-1].set_xlabel("reconfiguration latency (s)")
    axes[-1].set_ylabel("MixNet / fat-tree (Mixtral 8x22B, 400G)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
