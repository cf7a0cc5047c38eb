"""The policy's batched objective is the what-if step model's region_objective (issue 22: the
controller prices every decision with it; one by one it cost ~200 ms of a 64-GPU region's)."""

import numpy as np
import pytest

from mfctl.fabric.itermodel import region_objective
from mfctl.fabric.planner import LinkRates
from mfctl.fabric.traffic import expert_to_rank, load_routing, rank_matrix, rank_to_server, server_matrix
from mfctl.fabric.workload import Workload
from mfctl.runtime.plan import random_regular
from mfctl.runtime.policy import objective


def real_B(n: int, ep: int, tp: int, iteration: int, layers: int = 8) -> np.ndarray:
    trace = load_routing("mixtral", None)
    wl = Workload(trace, ep=ep, layers=layers, tokens_per_rank=4096, micro_batches=4, seed=3, concentration=0.3,
                  phase_iterations=5)
    mean = wl.tokens(iteration).mean(axis=0)
    er, rs = expert_to_rank(trace.num_experts, ep), rank_to_server(ep, tp, 8)
    return server_matrix(rank_matrix(mean, er, ep), rs, n, 8192.0)


@pytest.mark.parametrize("n, ep, tp, eps", [(4, 8, 4, 12.5e9), (8, 8, 8, 12.5e9), (8, 8, 8, np.linspace(5e9, 20e9, 8))])
def test_the_batched_objective_is_region_objective_on_real_traffic(n, ep, tp, eps):
    rates = LinkRates(circuit_Bps=11.6e9, eps_Bps=eps)
    rng = np.random.default_rng(7)
    Cs = np.stack([random_regular(np.full(n, 3), rng) for _ in range(3)] + [np.zeros((n, n), dtype=int)])
    for it in (1, 6):
        B = real_B(n, ep, tp, it)
        want = region_objective(B, Cs, rates)
        got = objective(B, Cs, rates)
        assert got.shape == (4,) and np.allclose(got, want, rtol=1e-9, atol=0), (got, want)
        assert got[-1] > got[:-1].max()  # no circuits at all is the slowest (everything on the EPS)


def test_no_traffic_between_servers_takes_no_time():
    rates = LinkRates(circuit_Bps=11.6e9, eps_Bps=12.5e9)
    B = np.zeros((2, 4, 4))
    B[:, 1, 1] = 5e9  # within a server only
    assert objective(B, np.zeros((1, 4, 4), dtype=int), rates).tolist() == [0.0]
