#!/usr/bin/env python3
"""Planner speed and quality on real routing data (issues 6 and 22, DESIGN §11).

Quality: for every text domain and trace layer of the shipped routing data
  - Mixtral-8x7B (8 experts, top-2), EP 8 x TP 4 -> a 4-server (32-GPU) region, 3 OCS lanes
    each (the prototype); optimum by exhaustive search;
  - OLMoE-1B-7B (64 experts, top-8), EP 64 x TP 1 -> an 8-server (64-GPU) region, 6 OCS
    lanes + 2 EPS NICs each (the paper's simulated servers); optimum by MILP (HiGHS),
each layer's dispatch matrix (4096 tokens per EP rank) is planned by the paper's greedy
and by mfctl's planner ('best'); ratio = ours / greedy, gap = ours / optimum - 1.

Speed, all measured in this run (no extrapolation), the paper's greedy and mfctl side by
side: 32 GPUs (one prototype region), 64 GPUs (one OLMoE region), 1,024 and 32,768 GPUs (16
and 512 OLMoE regions, each region's matrix drawn from a real domain x layer). One region is
planned by ``plan``; a cluster by ``plan_regions``, in this process (``workers=1``: its
regions searched as one vectorised batch) and over every core (one batch per process, on a
warm process pool, and on a cold one whose start-up is counted); and beside it the same
search in numpy (setting planner_kernel=numpy: what runs where the compiled search,
mfctl/fabric/_search_kernel.c, was not built), with whether its plans equal the compiled
one's. Each figure is the median
(and min-max) of several repeats: CPU ms of this process (steady under load; meaningless for
the pool, whose work is in other processes) and wall ms. The load average is printed at the
start and the end: the machine is shared.

Last line: one JSON object, {"benchmark": "planner", ...} with every figure.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mfctl.fabric import search  # noqa: E402
from mfctl.fabric.planner import LinkRates, greedy, ilp, objective, plan, plan_regions  # noqa: E402
from mfctl.fabric.traffic import expert_to_rank, load_routing, rank_matrix, rank_to_server, server_matrix  # noqa: E402

GOODPUT = 0.92
RATES = LinkRates(circuit_Bps=100e9 / 8 * GOODPUT, eps_Bps=100e9 / 8 * GOODPUT)
RATES_OLMOE = LinkRates(circuit_Bps=100e9 / 8 * GOODPUT, eps_Bps=2 * 100e9 / 8 * GOODPUT)
PROTO_PORTS, OLMOE_PORTS = np.full(4, 3), np.full(8, 6)
TARGETS = {"32": None, "64": 1.0, "1024": None, "32768": 1000.0}  # ms (issue 22)


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
            yield ("mixtral", dom, layer, region_matrix(mix.probs[d, li], 8, 4, 4096, 2, 4096, rng), PROTO_PORTS, RATES)
    olm = load_routing("olmoe")
    for d, dom in enumerate(olm.domains):
        for li, layer in enumerate(olm.layers):
            yield ("olmoe", dom, layer, region_matrix(olm.probs[d, li], 64, 1, 4096, 8, 2048, rng), OLMOE_PORTS, RATES_OLMOE)


def timed(fn, repeats: int) -> dict:
    """CPU (this process) and wall ms of ``fn()``: median, min, max over ``repeats`` (after one warm-up call)."""
    fn()
    wall, cpu = [], []
    for _ in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        fn()
        wall.append((time.perf_counter() - t) * 1000)
        cpu.append((time.process_time() - c) * 1000)
    return {"cpu_ms": round(statistics.median(cpu), 3), "cpu_min_ms": round(min(cpu), 3),
            "wall_ms": round(statistics.median(wall), 3), "wall_min_ms": round(min(wall), 3),
            "wall_max_ms": round(max(wall), 3), "repeats": repeats}


@contextlib.contextmanager
def numpy_search():
    """Plans in this process by the numpy search (setting planner_kernel), as where the compiled one was not built."""
    before = os.environ.get("MFCTL_PLANNER_KERNEL")
    os.environ["MFCTL_PLANNER_KERNEL"] = "numpy"
    try:
        yield
    finally:
        os.environ.pop("MFCTL_PLANNER_KERNEL") if before is None else os.environ.update(MFCTL_PLANNER_KERNEL=before)


def optimum(B: np.ndarray, ports: np.ndarray, rates: LinkRates) -> float:
    """The optimum objective: exhaustive search where it fits, else the MILP (NaN if it gives up)."""
    p = plan(B, ports, rates, method="exact")
    if p.method == "exact":
        return p.objective_s
    C = ilp(B, ports, rates, time_limit_s=120)
    return float(objective(B, C, rates)[0]) if C is not None else float("nan")


def greedy_objective(B: np.ndarray, ports: np.ndarray, rates: LinkRates) -> float:
    S = B + B.T
    np.fill_diagonal(S, 0)
    return float(objective(B, greedy(S, ports), rates)[0])


def quality() -> list[tuple]:
    rows = []
    for model, dom, layer, B, ports, rates in cases():
        g, p = greedy_objective(B, ports, rates), plan(B, ports, rates)
        rows.append((model, dom, layer, g, p.objective_s, optimum(B, ports, rates), p.method))
    print(f"{'model':<8} {'domain':<10} {'layer':>5} | {'greedy ms':>9} | {'mfctl ms':>8} | {'optimum ms':>10} | "
          f"{'ours/greedy':>11} | {'gap to opt':>10} | method")
    print("-" * 98)
    for model, dom, layer, g, o, opt, m in rows:
        print(f"{model:<8} {dom:<10} {layer:>5} | {g * 1e3:>9.3f} | {o * 1e3:>8.3f} | {opt * 1e3:>10.3f} | "
              f"{o / g:>11.4f} | {100 * (o / opt - 1):>9.2f}% | {m}")
    return rows


def main() -> None:
    load_start = [round(x, 2) for x in os.getloadavg()]
    rows = quality()
    ratios = [o / g for *_, g, o, opt, m in rows]
    gaps = [o / opt - 1 for *_, g, o, opt, m in rows if opt == opt]

    rng = np.random.default_rng(2)
    mix, olm = load_routing("mixtral"), load_routing("olmoe")
    nd, nl = olm.probs.shape[:2]
    proto = region_matrix(mix.probs[0, 1], 8, 4, 4096, 2, 4096, rng)
    olmo = [region_matrix(olm.probs[k % nd, (k // nd) % nl], 64, 1, 4096, 8, 2048, rng) for k in range(512)]
    sizes = {"32": ([proto], PROTO_PORTS, RATES), "64": (olmo[:1], OLMOE_PORTS, RATES_OLMOE),
             "1024": (olmo[:16], OLMOE_PORTS, RATES_OLMOE), "32768": (olmo, OLMOE_PORTS, RATES_OLMOE)}
    reps = {"32": 50, "64": 50, "1024": 7, "32768": 5}
    cores = os.cpu_count() or 1
    res: dict[str, dict] = {}
    with ProcessPoolExecutor(max_workers=cores) as pool:
        list(pool.map(abs, range(4 * cores)))  # the workers are up
        plan_regions([(olmo[0], OLMOE_PORTS)] * cores, RATES_OLMOE, executor=pool)  # and have imported mfctl
        for n, (Bs, ports, rates) in sizes.items():
            sym = [B + B.T - 2 * np.diag(np.diag(B)) for B in Bs]
            regions = [(B, ports) for B in Bs]
            r: dict = {"regions": len(Bs),
                       "greedy": timed(lambda sym=sym, ports=ports: [greedy(S, ports) for S in sym], reps[n])}
            if len(Bs) == 1:
                r["mfctl"] = timed(lambda B=Bs[0], ports=ports, rates=rates: plan(B, ports, rates), reps[n])
            else:
                r["mfctl"] = timed(lambda regions=regions, rates=rates: plan_regions(regions, rates, workers=1), reps[n])
                r["mfctl_all_cores"] = timed(
                    lambda regions=regions, rates=rates: plan_regions(regions, rates, executor=pool), reps[n])
            plans = plan_regions(regions, rates, workers=1)
            with numpy_search():  # the same search in numpy (the fallback where the kernel was not built), in this process
                r["mfctl_numpy"] = timed(lambda regions=regions, rates=rates: plan_regions(regions, rates, workers=1), reps[n])
                r["numpy_plans_equal"] = all(
                    (a.circuits == b.circuits).all() and math.isclose(a.objective_s, b.objective_s, rel_tol=1e-12)
                    for a, b in zip(plan_regions(regions, rates, workers=1), plans))
            r["mfctl_cpu_ms_per_region"] = round(r["mfctl"]["cpu_ms"] / len(Bs), 3)
            r["numpy_cpu_ms_per_region"] = round(r["mfctl_numpy"]["cpu_ms"] / len(Bs), 3)
            r["ratio_to_greedy_worst"] = round(max(p.objective_s / p.greedy_objective_s for p in plans), 4)
            r["ratio_to_greedy_mean"] = round(float(np.mean([p.objective_s / p.greedy_objective_s for p in plans])), 4)
            if len(Bs) <= 16:  # the optimum: exhaustive or one MILP per region (~1 s each; 512 would take minutes)
                r["gap_to_optimum_worst"] = round(max(p.objective_s / optimum(B, ports, rates) - 1
                                                      for p, B in zip(plans, Bs)), 4)
            res[n] = r
    big = [(B, OLMOE_PORTS) for B in olmo]
    res["32768"]["mfctl_cold_pool"] = timed(lambda: plan_regions(big, RATES_OLMOE, workers=cores), 3)
    same = all((a.circuits == b.circuits).all() and a.objective_s == b.objective_s
               for a, b in zip(plan_regions(big, RATES_OLMOE, workers=cores), [plan(B, p, RATES_OLMOE) for B, p in big]))
    load_end = [round(x, 2) for x in os.getloadavg()]

    def cell(d: dict | None, key: str = "cpu") -> str:
        if d is None:
            return "—"
        return f"{d[key + '_ms']:.2f}" if key == "cpu" else f"{d['wall_ms']:.2f} ({d['wall_min_ms']:.2f}–{d['wall_max_ms']:.2f})"

    print()
    print(f"load average {load_start} at the start, {load_end} at the end; {cores} cores; ms, median of repeats; "
          "cpu = this process's CPU, wall = median (min–max)")
    print(f"search: {search.kernel()} (numpy: the same search in numpy, this process)")
    print(f"{'GPUs':>6} | {'regions':>7} | {'greedy cpu':>10} | {'mfctl cpu':>9} | {'numpy cpu':>9} | {'per region':>10} | "
          f"{'mfctl wall':>24} | "
          f"{'mfctl wall, ' + str(cores) + ' cores':>24} | {'ours/greedy worst':>17} | {'gap to opt worst':>16} | target")
    for n, r in res.items():
        gap = f"{100 * r['gap_to_optimum_worst']:.2f}%" if "gap_to_optimum_worst" in r else "—"
        target = "—" if TARGETS[n] is None else f"≤ {TARGETS[n]:g} ms"
        print(f"{n:>6} | {r['regions']:>7} | {cell(r['greedy']):>10} | {cell(r['mfctl']):>9} | {cell(r['mfctl_numpy']):>9} | "
              f"{r['mfctl_cpu_ms_per_region']:>10.3f} | {cell(r['mfctl'], 'wall'):>24} | "
              f"{cell(r.get('mfctl_all_cores'), 'wall'):>24} | {r['ratio_to_greedy_worst']:>17.4f} | {gap:>16} | {target}")
    cold = res["32768"]["mfctl_cold_pool"]
    print(f"32,768 GPUs on a cold pool of {cores} processes (start-up counted): wall {cell(cold, 'wall')} ms; "
          f"plans on every core equal plan()'s, region by region: {same}")
    print(f"real traces: ours/greedy worst {max(ratios):.4f}, gap to the optimum worst {100 * max(gaps):.2f}% "
          f"(mean {100 * float(np.mean(gaps)):.2f}%) over {len(rows)} regions")
    t32k = min(res["32768"]["mfctl_all_cores"]["wall_ms"], res["32768"]["mfctl"]["wall_ms"])
    print(json.dumps({"benchmark": "planner", "cores": cores, "load_average_start": load_start, "load_average_end": load_end,
                      "sizes": res, "parallel_equals_serial": same,
                      "worst_ratio_to_greedy": round(max(ratios), 4), "worst_gap_to_optimum": round(max(gaps), 4),
                      "mean_gap_to_optimum": round(float(np.mean(gaps)), 5),
                      "search": search.kernel(), "plan_64_cpu_ms": res["64"]["mfctl"]["cpu_ms"],
                      "plan_64_numpy_cpu_ms": res["64"]["mfctl_numpy"]["cpu_ms"], "plan_32768_wall_ms": t32k,
                      "plan_32768_numpy_wall_ms": res["32768"]["mfctl_numpy"]["wall_ms"],
                      "target_64_le_1ms": res["64"]["mfctl"]["cpu_ms"] <= 1.0, "target_32768_le_1s": t32k <= 1000.0}))


if __name__ == "__main__":
    main()
