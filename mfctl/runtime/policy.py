"""The run's reconfiguration policy (DESIGN §6): score the traffic predictions, and decide whether
re-wiring a region pays for itself.

Per region: every predictor's guess of an iteration's dispatch bytes is scored against what came
(:func:`score_predictions`, relative error); the policy's predictor (``policy.predictor``) then
gives the next prediction, and :func:`consider` plans circuits for it with minimum change. A
change is proposed when the predicted gain over the window (``policy.window_iterations``
iterations, testbed s, counted from when the change is expected to be done and cut at the run's
last iteration) minus the expected cost of reconfiguring exceeds ``policy.min_gain_s``.
When the change is done is judged on the safe side (:func:`done_after`): its expected time × the
link-up's p99 over its mean (:data:`DONE_MARGIN`), in iterations of the region's fastest so far
(a job speeds up after its first iterations: the mean time and the last iteration put the end of
a 6.1 s link-up decided at iteration 5 of 40 before the run's end, which came first). A change
that would not be done before the last iteration gains nothing and is not made: its cost can be
0 — training goes on during the change, on the circuits it keeps, and when those carry what the
step model finds the bottleneck as before (the torch job: 3.8 ms of modelled all-to-all in a 0.2 s
iteration), nothing is lost meanwhile — so the gain alone must be there.
Gain and cost are priced with the what-if step model's all-to-all time
(:func:`mfctl.fabric.itermodel.region_objective`: circuits and EPS together, as in ``mfctl simulate``).
The cost is the expected reconfiguration time (the mean of the run's so far, else
``policy.expected_reconfig_s``) times the share of an iteration lost while only the kept
circuits carry traffic.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from mfctl.fabric import mapping
from mfctl.fabric.planner import LinkRates
from mfctl.fabric.planner import plan as plan_circuits
from mfctl.fabric.predict import EWMAPredictor, LastPredictor, rel_error
from mfctl.runtime.plan import RegionState, RunPlan
from mfctl.runtime.reconfig import Decision, Reconfiguration

log = logging.getLogger(__name__)

BISECTION_STEPS = 60  # as mfctl.fabric.itermodel.mixnet_time's
#: a change is counted done at its expected time × this: NIC link-up's p99 over its mean, 6.33 / 5.67 s
#: (paper App. C; the mock's link-up draws from the same)
DONE_MARGIN = 6.33 / 5.67


def objective(B: np.ndarray, C: np.ndarray, rates: LinkRates) -> np.ndarray:
    """:func:`mfctl.fabric.itermodel.region_objective` — the step model's 4 all-to-alls per layer,
    ``2 Σ_l [t(B_l) + t(B_lᵀ)]`` s, each ``t`` :func:`~mfctl.fabric.itermodel.mixnet_time` (circuits
    and EPS together, the smallest feasible time by bisection) — for candidates ``C`` ``[K, n, n]``
    and dispatch bytes ``B`` ``[L, n, n]``, ``[K]``; the same bisection run on every (candidate,
    layer, direction) at once: ~5 ms for 3 candidates of a 64-GPU region where one by one it takes
    ~200 ms (the controller prices every decision with it; tests/unit/runtime/test_policy_objective.py
    holds it equal to region_objective)."""
    B = np.asarray(B, dtype=float)
    B = B[None] if B.ndim == 2 else B
    C = np.asarray(C)
    C = C[None] if C.ndim == 2 else C
    n = B.shape[-1]
    off = ~np.eye(n, dtype=bool)
    D = np.where(off, np.concatenate([B, np.swapaxes(B, 1, 2)]), 0.0)[None]  # [1, 2L, n, n]: B_l, then B_lᵀ
    cap = (C.astype(float) * rates.circuit_Bps)[:, None]  # [K, 1, n, n]
    eps = np.broadcast_to(np.asarray(rates.eps_Bps, dtype=float), (n,))
    total = D.sum(axis=(2, 3))  # [1, 2L]
    lo = np.zeros((C.shape[0], D.shape[1]))
    hi = np.broadcast_to(total / max(float(eps.min()), 1e-9) + 1e-12, lo.shape).copy()
    for _ in range(BISECTION_STEPS):
        mid = (lo + hi) / 2
        rest = np.maximum(0.0, D - cap * mid[..., None, None])
        budget = eps * mid[..., None]  # [K, 2L, n]
        ok = (rest.sum(axis=3) <= budget).all(axis=2) & (rest.sum(axis=2) <= budget).all(axis=2)
        hi = np.where(ok, mid, hi)
        lo = np.where(ok, lo, mid)
    t = np.where(total > 0, hi, 0.0)  # a matrix with nothing between servers takes no time
    return 2.0 * t.sum(axis=1)


@dataclass
class Candidate:
    """A change worth making: the ``new`` circuits (mapped to lanes), the planner's matrix, why."""

    new: list[mapping.Circuit]
    planned: np.ndarray
    decision: Decision


def score_predictions(plan: RunPlan, reg: RegionState, iteration: int, B: np.ndarray, tokens: dict,
                      record: Callable[[int, str, str, float], None]) -> np.ndarray | None:
    """Score every predictor's guess for this iteration's ``B`` (dispatch bytes ``[L, n, n]``),
    let them see it, and return the policy predictor's next prediction. ``record(iteration,
    region, predictor, rel_error)`` gets each score. The cross-layer model predicts trace layer
    b from layer a of the same iteration (``tokens``: layer → EP-rank × expert counts)."""
    pb = plan.playbook
    if not reg.predictors:
        reg.predictors = {"last": LastPredictor(), "ewma": EWMAPredictor(pb.policy.ewma_alpha)}
    for name, pr in reg.predictors.items():
        guess = pr.predict()
        if guess is not None and guess.shape == B.shape:
            record(iteration, reg.name, name, rel_error(guess, B))
        pr.observe(B)
    if plan.crosslayer is not None and tokens:
        n = len(reg.hosts)
        for (a, b) in plan.crosslayer.P:
            if str(a) in tokens and str(b) in tokens:
                try:
                    ta, tb = np.asarray(tokens[str(a)], dtype=float), np.asarray(tokens[str(b)], dtype=float)
                    err = rel_error(plan.server_tokens(plan.crosslayer.predict_tokens(ta, a, b), n),
                                    plan.server_tokens(tb, n))
                except (TypeError, ValueError, IndexError) as e:  # not EP ranks × experts counts: not scored
                    log.info("iteration %d (%s): cross-layer tokens %s→%s not scored: %s", iteration, reg.name, a, b, e)
                    continue
                record(iteration, reg.name, f"crosslayer-{a}-{b}", err)
    return reg.predictors[pb.policy.predictor].predict()


def due(plan: RunPlan, reg: RegionState, iteration: int) -> bool:
    """Whether the region may be reconfigured at ``iteration``: ``policy.min_interval_iterations``
    since the last time, more than one iteration left, and one iteration's time known."""
    pol, left = plan.playbook.policy, plan.playbook.training.iterations - iteration
    if reg.last_reconfig_iter and iteration - reg.last_reconfig_iter < pol.min_interval_iterations:
        return False
    return left > 1 and reg.last_iter_s is not None


def expected_reconfig_s(plan: RunPlan, done: list[Reconfiguration]) -> float:
    """The expected time of one reconfiguration (s): the mean of ``done``, else the playbook's."""
    if not done:
        return plan.playbook.policy.expected_reconfig_s
    return float(np.mean([r.t_total_s for r in done]))


def done_after(expected_s: float, iter_s: float) -> float:
    """Iterations trained before a change decided now is done, on the safe side: ``expected_s`` ×
    :data:`DONE_MARGIN`, over ``iter_s`` (the region's fastest iteration so far)."""
    return expected_s * DONE_MARGIN / max(iter_s, 1e-9)


def consider(plan: RunPlan, reg: RegionState, iteration: int, expected_s: float,
             journal: Callable[..., object], *, fastest_iter_s: float | None = None) -> Candidate | None:
    """Plan the region for its prediction with minimum change (keep the current circuits unless
    something is better by more than ``policy.min_improvement``, then change as few as possible);
    journal the decision (``policy.decision``) and return the change when its gain exceeds its
    cost by ``policy.min_gain_s``, else None."""
    pb, pol = plan.playbook, plan.playbook.policy
    t0 = time.perf_counter()
    B, last_iter_s = reg.predicted, reg.last_iter_s
    assert B is not None and last_iter_s is not None  # (due() and a prediction come first)
    C_cur = mapping.circuit_matrix(reg.circuits, reg.hosts)
    p = plan_circuits(B, reg.ports, plan.rates, method=pb.topology.planner, current=C_cur, tolerance=pol.min_improvement)
    if np.array_equal(p.circuits, C_cur):
        return None
    new = mapping.map_circuits(p.circuits, reg.hosts, reg.lanes, reg.circuits)
    C_keep = mapping.circuit_matrix([c for c in new if c in reg.circuits], reg.hosts)
    mb = pb.training.micro_batches
    o_cur, o_new, o_keep = (float(x) for x in objective(B, np.stack([C_cur, p.circuits, C_keep]), plan.rates))
    # the new circuits carry traffic only once the change is done (done_after: on the safe side): the
    # iterations trained meanwhile gain nothing, and a change that would end after the run's last gains nothing
    left = pb.training.iterations - iteration
    during = done_after(expected_s, min(last_iter_s, fastest_iter_s or last_iter_s))
    after = max(0.0, left - during)
    window = min(pol.window_iterations, after)
    slowdown = max(0.0, (o_keep - o_cur) * mb) / max(last_iter_s, 1e-9)
    cost = expected_s * slowdown / (1 + slowdown)
    gain = (o_cur - o_new) * mb * window
    t_plan = (time.perf_counter() - t0) * 1000
    journal("policy.decision", region=reg.name, iteration=iteration, gain_s=gain, cost_s=cost,
            objective_now_s=o_cur, objective_plan_s=o_new, method=p.method, circuits=p.circuits.tolist(),
            iterations_left=left, done_after_iterations=round(during, 2), window_iterations=round(window, 2))
    if gain - cost <= pol.min_gain_s:
        return None
    return Candidate(new=new, planned=p.circuits, decision=Decision(
        method=p.method, predicted_gain_s=gain, predicted_cost_s=cost, objective_before_s=o_cur,
        objective_after_s=o_new, t_plan_ms=t_plan))
