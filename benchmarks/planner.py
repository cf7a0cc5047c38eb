#!/usr/bin/env python3
"""Planner speed and quality on real routing data (issues 6 and 22, DESIGN §11).

Quality: for every text domain and trace layer of the shipped routing data
  - Mixtral-8x7B (8 experts, top-2), EP 8 x TP 4 -> a 4-server region, 3 OCS lanes each
    (the prototype); optimum by exhaustive search;
  - OLMoE-1B-7B (64 experts, top-8), EP 64 x TP 1 -> an 8-server (64-GPU) region, 6 OCS
    lanes + 2 EPS NICs each (the paper's simulated servers); optimum by MILP (HiGHS),
each layer's dispatch matrix (4096 tokens per EP rank) is planned by the paper's greedy
and by mfctl's planner ('best'); ratio = ours / greedy, gap = ours / optimum - 1.

Speed, all measured (no extrapolation), side by side in one run: 32 GPUs (one prototype
region), 64 GPUs (one OLMoE region), 1,024 and 32,768 GPUs (16 and 512 OLMoE regions, each
region's matrix drawn from a real domain x layer), planned by the paper's greedy and by
mfctl's planner, serially and with ``plan_regions`` over every core (a process pool kept
warm, and a cold one whose start-up is counted). Each figure: median and spread (min-max)
of several repeats, wall ms, plus the serial CPU ms of this process; the load average is
printed with them (the machine is shared).

Last line: one JSON object, {"benchmark": "planner", ...} with every figure.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mfctl.fabric.planner import LinkRates, greedy, ilp, objective, plan, plan_regions  # noqa: E402
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
        for li, layer in enumerate(mix.layers):
            yield ("mixtral", dom, layer, region_matrix(mix.probs[d, li], 8, 4, 4096, 2, 4096, rng), np.full(4, 3), RATES)
    olm = load_routing("olmoe")
    for d, dom in enumerate(olm.domains):
        for li, layer in enumerate(olm.layers):
            yield ("olmoe", dom, layer, region_matrix(olm.probs[d, li], 64, 1, 4096, 8, 2048, rng), np.full(8, 6), RATES_OLMOE)


def timed(fn, repeats: int) -> dict:
    """Wall and CPU (this process) ms of ``fn()``: median, min, max over ``repeats``."""
    wall, cpu = [], []
    for _ in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        fn()
        wall.append((time.perf_counter() - t) * 1000)
        cpu.append((time.process_time() - c) * 1000)
    return {"median": round(statistics.median(wall), 3), "min": round(min(wall), 3), "max": round(max(wall), 3),
            "cpu_median": round(statistics.median(cpu), 3), "repeats": repeats}


def quality() -> tuple[list, float, float]:
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
    return rows, worst_ratio, worst_gap


def main() -> None:
    _, worst_ratio, worst_gap = quality()
    rng = np.random.default_rng(2)
    mix, olm = load_routing("mixtral"), load_routing("olmoe")
    proto = region_matrix(mix.probs[0, 1], 8, 4, 4096, 2, 4096, rng)
    nd, nl = olm.probs.shape[:2]
    olmo = [region_matrix(olm.probs[k % nd, (k // nd) % nl], 64, 1, 4096, 8, 2048, rng) for k in range(512)]
    p8, p4 = np.full(8, 6), np.full(4, 3)
    sizes = {"32": [(proto, p4, RATES)], "64": [(olmo[0], p8, RATES_OLMOE)],
             "1024": [(b, p8, RATES_OLMOE) for b in olmo[:16]], "32768": [(b, p8, RATES_OLMOE) for b in olmo]}
    reps = {"32": 30, "64": 30, "1024": 5, "32768": 3}
    workers = os.cpu_count() or 1
    greedy_ms, serial_ms, parallel_ms = {}, {}, {}
    with ProcessPoolExecutor(max_workers=workers) as pool:
        list(pool.map(abs, range(4 * workers)))  # the workers are up (and import mfctl on the first region)
        plan_regions([sizes["64"][0][:2]] * workers, RATES_OLMOE, executor=pool)
        for n, regions in sizes.items():
            rates = regions[0][2]
            sym = []
            for B, ports, _ in regions:
                S = B + B.T
                np.fill_diagonal(S, 0)
                sym.append((S, ports))
            greedy_ms[n] = timed(lambda sym=sym: [greedy(S, ports) for S, ports in sym], reps[n])
            serial_ms[n] = timed(lambda regions=regions, rates=rates: [plan(B, ports, rates) for B, ports, _ in regions], reps[n])
            if len(regions) > 1:
                parallel_ms[n] = timed(
                    lambda regions=regions, rates=rates: plan_regions([r[:2] for r in regions], rates, executor=pool), reps[n])
    cold = timed(lambda: plan_regions([r[:2] for r in sizes["32768"]], RATES_OLMOE, workers=workers), reps["32768"])
    # quality at scale, and the parallel path's plans are the serial ones
    big = [r[:2] for r in sizes["32768"]]
    par = plan_regions(big, RATES_OLMOE, workers=workers)
    ser = [plan(B, ports, RATES_OLMOE) for B, ports in big]
    same = all((a.circuits == b.circuits).all() for a, b in zip(par, ser))
    scale_ratio = max(p.objective_s / p.greedy_objective_s for p in ser)
    load = [round(x, 2) for x in os.getloadavg()]

    def cell(d: dict | None) -> str:
        return "—" if d is None else f"{d['median']:.2f} ({d['min']:.2f}–{d['max']:.2f})"

    print()
    print(f"load average {load[0]} / {load[1]} / {load[2]} on {workers} cores; wall ms, median (min–max); "
          "cpu = this process's CPU ms, median")
    print(f"{'GPUs':>6} | {'regions':>7} | {'paper greedy':>22} | {'mfctl serial':>24} | {'cpu':>8} | "
          f"{'mfctl, ' + str(workers) + ' processes':>24} | target")
    targets = {"32": "—", "64": "1 ms", "1024": "—", "32768": "1 s"}
    for n, regions in sizes.items():
        print(f"{n:>6} | {len(regions):>7} | {cell(greedy_ms[n]):>22} | {cell(serial_ms[n]):>24} | "
              f"{serial_ms[n]['cpu_median']:>8.2f} | {cell(parallel_ms.get(n)):>24} | {targets[n]}")
    print(f"32,768 GPUs on a cold pool (start-up counted): {cell(cold)} ms; parallel plans equal the serial ones: "
          f"{same}; worst ours/greedy over the 512 regions: {scale_ratio:.4f}")
    best_32k = min(parallel_ms["32768"]["median"], serial_ms["32768"]["median"])
    print(json.dumps({"benchmark": "planner", "cores": workers, "load_average": load,
                      "greedy_ms": greedy_ms, "plan_ms": serial_ms, "parallel_ms": parallel_ms,
                      "parallel_cold_32768_ms": cold, "parallel_equals_serial": same,
                      "worst_ratio_to_greedy": round(worst_ratio, 4), "worst_gap_to_optimum": round(worst_gap, 4),
                      "worst_ratio_to_greedy_32768": round(scale_ratio, 4),
                      "target_64_le_1ms": serial_ms["64"]["median"] <= 1.0, "target_32768_le_1s": best_32k <= 1000.0}))


if __name__ == "__main__":
    main()
