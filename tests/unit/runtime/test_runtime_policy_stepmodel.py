"""The reconfiguration policy prices a change with the what-if step model (issue 21): on the
prototype's plan, a change is made when the traffic shifts and none while it stays."""

import numpy as np
import pytest

from mfctl.fabric import itermodel, mapping
from mfctl.inventory import load_inventory
from mfctl.runtime import policy
from mfctl.runtime.plan import initial_cross_connects, plan_run
from mfctl.runtime.playbook import load_playbook
from support import PROTOTYPE, ROOT


@pytest.fixture
def plan():
    p = plan_run(load_playbook(ROOT / "playbooks" / "mixtral-prototype.yaml"), load_inventory(PROTOTYPE))
    initial_cross_connects(p, {})  # random circuits, seed 1
    return p


def hot(plan, n, a, b):
    B = np.full((plan.playbook.model.layers, n, n), 1e6)
    B[:, a, b] = B[:, b, a] = 5e9
    for layer in B:
        np.fill_diagonal(layer, 0)
    return B


def test_a_reconfiguration_when_the_traffic_shifts_none_while_it_stays(plan):
    reg = plan.regions["region0"]
    reg.last_iter_s = 5.6
    n = len(reg.hosts)
    decisions = []
    record = lambda op, **f: decisions.append(f)  # noqa: E731
    reg.predicted = hot(plan, n, 0, 3)
    first = policy.consider(plan, reg, 2, 6.0, record)
    assert first is not None
    # priced with the step model: the gain is its all-to-all time saved over the window
    C_before = np.asarray(decisions[0]["circuits"])
    o = itermodel.region_objective(reg.predicted, np.stack([mapping.circuit_matrix(reg.circuits, reg.hosts), C_before]),
                                   plan.rates)
    assert first.decision.objective_before_s == pytest.approx(o[0]) and first.decision.objective_after_s == pytest.approx(o[1])
    reg.circuits = first.new  # applied
    assert policy.consider(plan, reg, 5, 6.0, record) is None  # the same traffic: nothing to gain
    reg.predicted = hot(plan, n, 1, 2)  # the hot pair moves
    second = policy.consider(plan, reg, 8, 6.0, record)
    assert second is not None and second.decision.predicted_gain_s > second.decision.predicted_cost_s
    C = mapping.circuit_matrix(second.new, reg.hosts)
    assert C[1, 2] > mapping.circuit_matrix(reg.circuits, reg.hosts)[1, 2]


def test_the_step_models_objective_never_exceeds_the_planners_and_is_zero_without_traffic(plan):
    from mfctl.fabric.planner import objective

    reg = plan.regions["region0"]
    n = len(reg.hosts)
    B = hot(plan, n, 0, 3)
    C = mapping.circuit_matrix(reg.circuits, reg.hosts)
    ours, planner = itermodel.region_objective(B, C, plan.rates)[0], objective(B, C, plan.rates)[0]
    assert 0 < ours <= planner * (1 + 1e-6)  # the EPS also carries circuit pairs' overflow
    assert itermodel.region_objective(np.zeros_like(B), C, plan.rates)[0] == 0.0


def test_the_gain_counts_from_when_the_change_is_done_and_none_past_the_last_iteration(plan):
    """The gain counts the iterations after the new circuits are up, the change counted done on the
    safe side (its expected time × DONE_MARGIN, the link-up's p99 over its mean): at 5.6 s an iteration
    and a 6 s change, a decision 2 iterations before the end gains 2 - 6 × 1.116 / 5.6 = 0.80
    iterations' worth; one that would be done after the last iteration gains nothing and is not made
    (the trial's run changed at iteration 24 of 40 at 0.3 s an iteration and a 6.2 s link-up: no
    iteration ran on it)."""
    reg = plan.regions["region0"]
    reg.last_iter_s = 5.6
    n = len(reg.hosts)
    reg.predicted = hot(plan, n, 0, 3)
    iters, mb = plan.playbook.training.iterations, plan.playbook.training.micro_batches
    decisions = []
    record = lambda op, **f: decisions.append(f)  # noqa: E731
    early = policy.consider(plan, reg, 2, 6.0, record)
    saved = (early.decision.objective_before_s - early.decision.objective_after_s) * mb
    assert early.decision.predicted_gain_s == pytest.approx(saved * plan.playbook.policy.window_iterations)
    late = policy.consider(plan, reg, iters - 2, 6.0, record)
    assert late is not None and late.decision.predicted_gain_s == pytest.approx(saved * (2 - 6.0 * policy.DONE_MARGIN / 5.6))
    assert decisions[-1]["iterations_left"] == 2 and decisions[-1]["done_after_iterations"] == pytest.approx(1.2, abs=0.01)
    assert policy.consider(plan, reg, iters - 2, 12.0, record) is None and decisions[-1]["gain_s"] == 0.0
    assert policy.consider(plan, reg, iters - 1, 6.0, record) is None and decisions[-1]["gain_s"] == 0.0


def test_a_change_whose_link_up_outlasts_the_run_is_not_made(plan):
    """The torch job's run: the policy decided at iteration 5 of 40 (0.17 s an iteration, 5.72 s
    expected for the change: done, on the mean, 1.4 iterations before the end), the 6.1 s link-up
    outlasted the 6.8 s job and no iteration ran on the new circuits, yet it was 'applied'. Its cost
    is 0 (training goes on during the change on the circuits it keeps, which carry what the step model
    finds the bottleneck): the gain alone decides, so when the change is done must be judged on the
    safe side — the link-up's p99 (6.33 s / 5.67 s mean), at the region's fastest iteration so far."""
    reg = plan.regions["region0"]
    iters = plan.playbook.training.iterations
    n = len(reg.hosts)
    reg.predicted = hot(plan, n, 0, 3)
    decisions = []
    record = lambda op, **f: decisions.append(f)  # noqa: E731
    reg.last_iter_s = 0.17
    expected = plan.playbook.policy.expected_reconfig_s
    at = iters - 35  # 35 iterations left: 5.95 s of training, the change's 5.72 s (mean) fit, its 6.39 s (p99) do not
    assert policy.consider(plan, reg, at, expected, record) is None
    assert decisions[-1]["gain_s"] == 0.0 and decisions[-1]["window_iterations"] == 0.0
    assert decisions[-1]["iterations_left"] == 35 and decisions[-1]["done_after_iterations"] == pytest.approx(37.6, abs=0.1)
    # the last iteration slower than the region's fastest (a job speeds up after its first ones): the pace is the fastest
    reg.last_iter_s = 0.24
    assert policy.consider(plan, reg, at, expected, record, fastest_iter_s=0.17) is None
    assert decisions[-1]["gain_s"] == 0.0
    # with time to spare the same change is made, its gain counted from when it is done
    made = policy.consider(plan, reg, iters - 60, expected, record, fastest_iter_s=0.17) if iters > 60 else \
        policy.consider(plan, reg, at, expected / 4, record, fastest_iter_s=0.17)
    assert made is not None and made.decision.predicted_gain_s > 0 and made.decision.predicted_cost_s >= 0
