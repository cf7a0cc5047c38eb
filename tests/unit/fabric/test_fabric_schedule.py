"""mfctl.fabric.schedule: FSMoE pipeline degrees and gradient partitions, pure."""

import numpy as np
import pytest

from mfctl.context import Context
from mfctl.fabric.schedule import DEGREES, PARTITIONS, mean_layer_tokens, plan_schedule
from mfctl.fabric.stepmodel import StepSpec
from mfctl.inventory import load_inventory
from mfctl.runtime.playbook import load_playbook
from support import PROTOTYPE, ROOT


@pytest.fixture(scope="module")
def setup():
    inv = load_inventory(PROTOTYPE)
    return load_playbook(ROOT / "playbooks" / "mixtral-prototype.yaml"), inv, Context(inv).link_rates()


def test_every_choice_is_tried_and_the_best_includes_the_best_partitioning(setup):
    pb, inv, rates = setup
    s = plan_schedule(pb, inv, rates)
    assert [(c["pipeline_degree"], c["bp_pipeline_degree"]) for c in s.choices] == [(f, b) for f in DEGREES for b in DEGREES]
    assert [p["partitions"] for p in s.gradient_partitions] == list(PARTITIONS) and not s.profiled
    exposed = {p["partitions"]: p["exposed_allreduce_s"] for p in s.gradient_partitions}
    assert s.best_partitions == min(exposed, key=exposed.get) and s.grad_bytes == pytest.approx(2**30, rel=0.01)
    assert s.best == min(s.choices, key=lambda c: c["iteration_s"])
    assert s.command("pb.yaml") == (f"mfctl run pb.yaml --pipeline-degree {s.best['pipeline_degree']} "
                                    f"--bp-pipeline-degree {s.best['bp_pipeline_degree']} --grad-partitions {s.best_partitions}")


def test_profiled_costs_change_the_prediction(setup):
    pb, inv, rates = setup
    base = plan_schedule(pb, inv, rates)
    peak = plan_schedule(pb, inv, rates, {"gemm": {"rate_per_s": StepSpec.peak_flops * 2}})  # η capped at 1
    assert peak.profiled and peak.best["iteration_s"] < base.best["iteration_s"]
    slow_ar = plan_schedule(pb, inv, rates, {"all_reduce": {"alpha_s": 0.01}})
    for slow, fast in zip(slow_ar.gradient_partitions, base.gradient_partitions):  # a fixed cost per partition
        assert slow["exposed_allreduce_s"] > fast["exposed_allreduce_s"]


def test_mean_layer_tokens_spread_each_ranks_tokens_by_the_mean_routing():
    class Trace:
        probs = np.array([[[0.5, 0.5], [0.9, 0.1]], [[0.5, 0.5], [0.7, 0.3]]])  # 2 micro-batches x 2 layers x 2 experts
        top_k = 2

        def trace_layer_for(self, layer):
            return layer % 2

    layers = mean_layer_tokens(Trace(), 3, 100, ep=4)
    assert len(layers) == 3 and layers[0].shape == (4, 2)
    assert layers[1][0].tolist() == pytest.approx([160.0, 40.0]) and layers[2][3].tolist() == pytest.approx([100.0, 100.0])
