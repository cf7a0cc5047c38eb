"""A job's raw samples to fit points: one per 1/8-octave size bin, its fastest sample (its own n and t)."""

import numpy as np
import pytest

from mfctl.fabric.profile import fastest_per_bin, fit_samples


def test_each_bin_keeps_its_fastest_sample_with_its_own_size():
    n = np.array([1000, 1000, 1010, 2000, 0, 0, 1100])  # 1000 and 1010 share a bin (8·log2 = 79.7, 79.8); 1100 not (80.8)
    t = np.array([3.0, 1.0, 2.0, 5.0, 0.5, 0.4, 9.0])
    pn, pt = fastest_per_bin(n, t)
    assert pn.tolist() == [0, 1000, 1100, 2000] and pt.tolist() == [0.4, 1.0, 9.0, 5.0]


def test_a_fit_of_slowed_samples_follows_their_fastest():
    # a line (α 100 µs, 1 GB/s) measured 5 times per size, 4 of them slowed 1.5-4x by a neighbour
    rng = np.random.default_rng(0)
    sizes = np.repeat(2.0 ** np.arange(10, 23, 2), 5)
    true = 100e-6 + sizes / 1e9
    slowed = true * np.where(np.arange(len(sizes)) % 5 == 0, 1.0, rng.uniform(1.5, 4.0, len(sizes)))
    f = fit_samples("alltoall", sizes, slowed, "byte")
    assert f.points == 7 and f.rel_rms_error < 1e-9
    assert f.alpha_s == pytest.approx(100e-6) and f.rate == pytest.approx(1e9)
    with pytest.raises(ValueError, match="2 or more sizes"):
        fit_samples("alltoall", np.array([1000.0, 1010.0]), np.array([1.0, 2.0]), "byte")  # one bin
