"""Timings without torch: what gemm records and returns, the drain's format and order, the
reservoir's bound and spread, the bad values refused — and that importing it never imports torch.
(all_to_all_single on a real gloo job: tests/integration/test_profile_real_timings.py.)"""

import subprocess
import sys

import numpy as np
import pytest

from mfctl.integrations.torch_timing import Timings


def test_gemm_returns_the_result_and_records_flop_and_wall_seconds():
    import time

    t = Timings()
    assert t.gemm(lambda a, b: (time.sleep(0.01), a * b)[1], 6, 7, flops=2 * 64 * 128 * 256) == 42
    (s,) = t.drain()
    assert s["task"] == "gemm" and s["unit"] == "flop" and s["n"] == 4194304 and isinstance(s["n"], int)
    assert 0.01 <= s["seconds"] < 5  # wall clock around the call: the 10 ms sleep is in it
    assert t.drain() == []  # a drain starts afresh


def test_the_reservoir_keeps_at_most_max_samples_spread_over_every_call_in_call_order():
    t = Timings(max_samples=64, seed=3)
    for i in range(10_000):
        t.record("alltoall", i, 1e-3)
        if i < 10:
            t.record("gemm", 1000 + i, 2e-3)
    d = t.drain()
    a2a = [s["n"] for s in d if s["task"] == "alltoall"]
    assert len(a2a) == 64 and [s["n"] for s in d if s["task"] == "gemm"] == list(range(1000, 1010))
    assert a2a == sorted(a2a)  # call order
    # every call alike (algorithm R): the kept ones spread over the 10,000, not the first 64
    assert np.mean(a2a) == pytest.approx(5000, abs=1000) and max(a2a) > 9000 and min(a2a) < 1000
    assert Timings(max_samples=64, seed=3).max_samples == 64


@pytest.mark.parametrize("bad", [("alltoall", float("nan"), 1.0), ("alltoall", 1, -1.0), ("gemm", -5, 1.0),
                                 ("allgather", 1, 1.0), ("gemm", float("inf"), 1.0)])
def test_bad_values_are_refused(bad):
    with pytest.raises(ValueError):
        Timings().record(*bad)


def test_bad_arguments_are_refused():
    for m in (0, -1, True, 2.5):
        with pytest.raises(ValueError):
            Timings(max_samples=m)
    with pytest.raises(ValueError):
        Timings().gemm(lambda: None, flops=float("nan"))


def test_importing_it_does_not_import_torch():
    code = "import sys, mfctl, mfctl.integrations.torch_timing; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"
