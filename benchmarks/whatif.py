#!/usr/bin/env python3
"""The what-if simulator against the MixNet paper (issue 21; SIGCOMM'25 §7.3–7.4, Fig. 12).

For the four models of the paper's normalized-iteration-time data (Mixtral 8x22B, Mixtral 8x7B,
LLaMA-MoE 6.7B, Qwen-MoE) on 1,024 GPUs, at 100/200/400/800 Gbit/s on the fat-tree, MixNet,
rail-optimized and TopoOpt fabrics, the flow model of ``mfctl.fabric.itermodel`` (one set of
physical parameters) normalized per model to its best configuration, as the paper's figure is;
then ours vs the paper per cell, MixNet's perf/$ vs the fat-tree (the paper's Table 4 prices), the
reconfiguration-latency sweep, and whether the paper's orderings hold.

Last line: {"benchmark": "whatif", "error": {"100": {"mean": .., "worst": ..}, "400": {...},
"all": {...}}, "orderings": {...}, "perf_per_dollar": {...}, "fat_tree_3to1_vs_1to1": {...},
"latency_sweep": {latency s: MixNet / fat-tree}}
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mfctl.fabric import reproduce  # noqa: E402


def main() -> int:
    t0 = time.perf_counter()
    ref = None
    shared = Path(__file__).resolve().parents[2] / "shared" / "paper" / "mixnet-normalized-iteration-time.csv"
    if shared.is_file():  # the published CSV itself, when the checkout has it beside
        ref = reproduce.read_reference(shared)
    rep = reproduce.reproduce(reference=ref)
    print(f"{'model':15} {'Gbit/s':>6} {'fabric':15} {'ours':>7} {'paper':>7} {'error':>7}")
    for c in rep.cells:
        paper = "-" if c["paper"] is None else f"{c['paper']:7.3f}"
        err = "-" if c["error"] is None else f"{100 * c['error']:6.1f}%"
        print(f"{c['model']:15} {c['gbps']:>6} {c['fabric']:15} {c['ours']:7.3f} {paper:>7} {err:>7}")
    for g in ("100", "400", "all"):
        s = rep.summary[g]
        print(f"{g:>4}: mean error {100 * s['mean_error']:.1f}%, worst {100 * s['worst_error']:.1f}% ({s['cells']} cells)")
    print("MixNet perf/$ vs fat-tree: " + ", ".join(
        f"{p['model']} {p['gbps']}G {p['mixnet_vs_fat_tree']:.2f}x (paper {p['paper_band'][0]}-{p['paper_band'][1]})"
        for p in rep.perf_per_dollar))
    print("MixNet / fat-tree by reconfiguration latency (Mixtral 8x22B, 400G): " + ", ".join(
        f"{x['latency_s']:g} s {x['relative_to_fat_tree']:.3f}" for x in rep.latency_sweep))
    over = {m: {g: round(by[g]["fat-tree-3to1"] / by[g]["fat-tree"], 3) for g in by} for m, by in rep.iterations.items()}
    print("3:1 fat-tree / 1:1 (paper: up to 1.6x): " + ", ".join(
        f"{m} " + "/".join(f"{v:.2f}" for v in by.values()) for m, by in over.items()) + " at 100/200/400/800G")
    for f in rep.orderings["failures"]:
        print(f"not held: {f}")
    ppd: dict = {}
    for p in rep.perf_per_dollar:
        ppd.setdefault(str(p["gbps"]), {})[p["model"]] = round(p["mixnet_vs_fat_tree"], 3)
    print(json.dumps({
        "benchmark": "whatif", "reference": str(shared) if ref else "embedded (mfctl.fabric.reproduce.REFERENCE)",
        "error": {g: {"mean": round(s["mean_error"], 4), "worst": round(s["worst_error"], 4)} for g, s in rep.summary.items()},
        "orderings": {k: v for k, v in rep.orderings.items() if k != "failures"},
        "perf_per_dollar": ppd, "fat_tree_3to1_vs_1to1": over,
        "latency_sweep": {f"{x['latency_s']:g}": round(x["relative_to_fat_tree"], 3) for x in rep.latency_sweep},
        "seconds": round(time.perf_counter() - t0, 1)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
