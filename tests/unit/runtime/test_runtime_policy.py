"""The reconfiguration policy (mfctl.runtime.policy) on the prototype's plan, no testbed."""

import numpy as np
import pytest

from mfctl.fabric import mapping
from mfctl.inventory import load_inventory
from mfctl.runtime import policy
from mfctl.runtime.plan import initial_cross_connects, plan_run
from mfctl.runtime.playbook import load_playbook
from mfctl.runtime.reconfig import Proposal, Reconfiguration
from support import PROTOTYPE, ROOT


@pytest.fixture
def plan():
    p = plan_run(load_playbook(ROOT / "playbooks" / "mixtral-prototype.yaml"), load_inventory(PROTOTYPE))
    initial_cross_connects(p, {})  # random circuits, seed 1
    return p


def test_due_waits_for_an_iteration_time_and_the_minimum_interval(plan):
    reg = plan.regions["region0"]
    assert not policy.due(plan, reg, 2)  # no iteration time yet
    reg.last_iter_s = 5.6
    assert policy.due(plan, reg, 2)
    reg.last_reconfig_iter = 2
    assert not policy.due(plan, reg, 4) and policy.due(plan, reg, 5)  # min_interval_iterations: 3
    assert not policy.due(plan, reg, 39)  # one iteration left of 40


def test_the_expected_cost_is_the_runs_own_once_it_has_one(plan):
    assert policy.expected_reconfig_s(plan, []) == plan.playbook.policy.expected_reconfig_s
    r = Reconfiguration.start(Proposal(epoch=1, region="region0", hosts=[], lanes={}, iteration=2, old=[], new=[],
                                       planned=np.zeros((4, 4)), ocs_before={}, region_ports=set()))
    r.t_switch_ms, r.t_linkup_ms, r.t_drain_ms, r.t_resume_ms = 50.0, 5650.0, 100.0, 200.0
    assert policy.expected_reconfig_s(plan, [r, r]) == pytest.approx(6.0)


def test_skewed_traffic_is_worth_re_wiring_and_the_decision_is_journalled(plan):
    reg = plan.regions["region0"]
    reg.last_iter_s = 5.6
    n = len(reg.hosts)
    B = np.full((plan.playbook.model.layers, n, n), 1e6)
    B[:, 0, 3] = B[:, 3, 0] = 5e9  # gpu01 ↔ gpu04 carries almost everything
    for layer in B:
        np.fill_diagonal(layer, 0)
    reg.predicted = B
    journal = []
    cand = policy.consider(plan, reg, 2, 6.0, lambda op, **f: journal.append((op, f)))
    assert cand is not None and [op for op, _ in journal] == ["policy.decision"]
    d = cand.decision
    assert d.predicted_gain_s > d.predicted_cost_s >= 0 and d.objective_after_s < d.objective_before_s
    assert journal[0][1]["gain_s"] == d.predicted_gain_s and d.method
    C = mapping.circuit_matrix(cand.new, reg.hosts)
    assert C.tolist() == cand.planned.tolist() and C[0, 3] > mapping.circuit_matrix(reg.circuits, reg.hosts)[0, 3]
    assert (C.sum(axis=1) <= reg.ports).all()


def test_the_current_circuits_planned_again_are_no_change(plan):
    reg = plan.regions["region0"]
    reg.last_iter_s = 5.6
    reg.predicted = np.zeros((plan.playbook.model.layers, 4, 4))  # no traffic: nothing is better
    journal = []
    assert policy.consider(plan, reg, 2, 6.0, lambda op, **f: journal.append(op)) is None
