#!/usr/bin/env python3
"""Planner speed and quality on real routing data (issue 6, DESIGN §11).

Quality: for every text domain and trace layer of the shipped routing data
  - Mixtral-8x7B (8 experts, top-2), EP 8 x TP 4 -> a 4-server region, 3 OCS lanes each
    (the prototype); optimum by exhaustive search;
  - OLMoE-1B-7B (64 experts, top-8), EP 64 x TP 1 -> an 8-server (64-GPU) region, 6 OCS
    lanes + 2 EPS NICs each (the paper's simulated servers); optimum by MILP (HiGHS),
each layer's dispatch matrix (4096 tokens per EP rank) is planned by the paper's greedy
and by mfctl's planner ('best'); ratio = ours / greedy, gap = ours / optimum - 1.

Speed: a cluster is planned region by region (a region is one EP group). Plan time for
32 GPUs (one prototype region), 64 GPUs (one OLMoE region), 1,024 and 32,768 GPUs (16 and
512 OLMoE regions), single core, median of repeats.

Last line: {"benchmark": "planner", "plan_ms": {...}, "worst_ratio_to_greedy": ..., "worst_gap_to_optimum": ...}
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mfctl.fabric.planner import LinkRates, greedy, ilp, objective, plan  # noqa: E402
from mfctl.fabric.traffic import expert_to_rank, load_routing, rank_matrix, rank_to_server, server_matrix  # noqa: E402

GOODPUT = 0.92
RATES = LinkRates(circuit_Bps=100e9 / 8 * GOODPUT, eps_Bps=100e9 / 8 * GOODPUT)
RATES_OLMOE = LinkRates(circuit_Bps=100e9 / 8 * GOODPUT, eps_Bps=2 * 100e9 / 8 * GOODPUT)


def region_matrix(probs: np.ndarray, ep: int, tp: int, tokens: int, top_k: int, hidden: int, rng) -> np.ndarray:
    """One layer's dispatch bytes: each EP rank routes ``tokens`` tokens by the real expert shares."""
    E = len(probs)
    t = rng.multinomial(tokens * top_k, probs, size=ep).astype(float)
    rs = rank_to_server(ep, tp, 8)
    return server_matrix(rank_matrix(t, expert_to_rank(E, ep), ep), rs, int(rs.max()) + 1, hidden * 2)


def cases():
    rng = np.random.default_rng(1)
    mix = load_routing("mixtral")
    for d, dom in enumerate(mix.domains):
        for l, layer in enumerate(mix.layers):
            yield ("mixtral", dom, layer, region_matrix(mix.probs[d, l], 8, 4, 4096, 2, 4096, rng), np.full(4, 3), RATES)
    olm = load_routing("olmoe")
    for d, dom in enumerate(olm.domains):
        for l, layer in enumerate(olm.layers):
            yield ("olmoe", dom, layer, region_matrix(olm.probs[d, l], 64, 1, 4096, 8, 2048, rng), np.full(8, 6), RATES_OLMOE)


def timed(fn, repeats: int) -> float:
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t) * 1000)
    return statistics.median(ts)


def main() -> None:
    rows = []
    for model, dom, layer, B, ports, rates in cases():
        S = B + B.T
        np.fill_diagonal(S, 0)
        g = float(objective(B, greedy(S, ports), rates)[0])
        p = plan(B, ports, rates)
        if p.method == "exact":
            opt = p.objective_s
        else:
            C = ilp(B, ports, rates, time_limit_s=120)
            opt = float(objective(B, C, rates)[0]) if C is not None else float("nan")
        rows.append((model, dom, layer, g, p.objective_s, opt, p.method))
    print(f"{'model':<8} {'domain':<10} {'layer':>5} | {'greedy ms':>9} | {'mfctl ms':>8} | {'optimum ms':>10} | "
          f"{'ours/greedy':>11} | {'gap to opt':>10} | method")
    print("-" * 98)
    for model, dom, layer, g, o, opt, m in rows:
        print(f"{model:<8} {dom:<10} {layer:>5} | {g * 1e3:>9.3f} | {o * 1e3:>8.3f} | {opt * 1e3:>10.3f} | "
              f"{o / g:>11.4f} | {100 * (o / opt - 1):>9.2f}% | {m}")
    worst_ratio = max(o / g for *_, g, o, opt, m in rows)
    worst_gap = max(o / opt - 1 for *_, g, o, opt, m in rows if opt == opt)
    # speed, region by region
    rng = np.random.default_rng(2)
    mix, olm = load_routing("mixtral"), load_routing("olmoe")
    proto = region_matrix(mix.probs[0, 1], 8, 4, 4096, 2, 4096, rng)
    olmo = [region_matrix(olm.probs[k % 6, k % 3], 64, 1, 4096, 8, 2048, rng) for k in range(16)]
    plan_ms = {
        "32": timed(lambda: plan(proto, np.full(4, 3), RATES), 20),
        "64": timed(lambda: plan(olmo[0], np.full(8, 6), RATES_OLMOE), 20),
        "1024": timed(lambda: [plan(b, np.full(8, 6), RATES_OLMOE) for b in olmo], 3),
    }
    plan_ms["32768"] = plan_ms["1024"] * 32  # 512 regions = 32 x the 16 regions of 1,024 GPUs
    greedy_ms = timed(lambda: greedy(olmo[0] + olmo[0].T, np.full(8, 6)), 50)
    print()
    print(f"{'GPUs':>6} | {'regions':>7} | {'plan ms (mfctl best)':>20} | target")
    for n, regions, target in (("32", 1, "—"), ("64", 1, "1 ms"), ("1024", 16, "100 ms"), ("32768", 512, "—")):
        print(f"{n:>6} | {regions:>7} | {plan_ms[n]:>20.2f} | {target}")
    print(f"(paper's greedy alone on a 64-GPU region: {greedy_ms:.3f} ms; 32,768 GPUs extrapolated from 1,024: "
          "regions are independent)")
    print(json.dumps({"benchmark": "planner", "plan_ms": {k: round(v, 3) for k, v in plan_ms.items()},
                      "worst_ratio_to_greedy": round(worst_ratio, 4), "worst_gap_to_optimum": round(worst_gap, 4)}))


if __name__ == "__main__":
    main()
