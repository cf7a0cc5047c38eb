"""mfctl.bench.nccl: what an all-to-all should reach on the current circuits."""

import pytest

from mfctl.bench.nccl import expected_busbw_gbs
from mfctl.fabric.planner import GOODPUT, link_rates


def test_expected_bus_bandwidth_is_circuits_plus_the_eps_at_goodput():
    rates = link_rates(100.0, 100.0)  # one 100G lane per circuit, one 100G EPS NIC
    assert expected_busbw_gbs("alltoall_perf", 2, rates) == pytest.approx(3 * 12.5 * GOODPUT)
    assert expected_busbw_gbs("alltoall_perf", 0, rates) == pytest.approx(12.5 * GOODPUT)
    assert expected_busbw_gbs("all_reduce_perf", 2, rates) is None
