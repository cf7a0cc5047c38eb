"""``mfctl profile --run``: a fit whose times spread widely about α + β·n is stored with a warning saying so
(the trial's MoE job: all-to-all fit error 69 %, stored without a word)."""

import numpy as np

from mfctl.bench.profile import POOR_FIT, profile_of_run
from mfctl.metrics.store import MetricsStore


def _run(tmp_path, seconds):
    d = tmp_path / "20261202-000000-abcdef"
    st = MetricsStore(d / "metrics.db")
    st.start_run(d.name, "p.yaml", "i.yaml", 1.0)
    n = np.geomspace(1e3, 1e7, len(seconds))
    st.timings("gpu01", 1, [{"task": "alltoall", "n": float(x), "unit": "byte", "seconds": float(s)}
                            for x, s in zip(n, seconds)])
    st.close()
    return d


def test_a_poor_fit_is_stored_with_a_warning_and_a_good_one_without(tmp_path):
    n = np.geomspace(1e3, 1e7, 24)
    good = profile_of_run(_run(tmp_path / "a", 1e-4 + n / 1e9), "inv")
    assert good["warnings"] == [] and good["fits"][0]["rel_rms_error"] < 0.01
    rng = np.random.default_rng(1)
    noisy = (1e-4 + n / 1e9) * rng.choice([0.2, 1.0, 5.0], size=n.size)
    poor = profile_of_run(_run(tmp_path / "b", noisy), "inv")
    assert poor["fits"][0]["rel_rms_error"] > POOR_FIT
    assert any("gpu01 alltoall: fit error" in w and "mfctl schedule prices with it all the same" in w
               for w in poor["warnings"]), poor["warnings"]


def test_a_rate_no_hardware_has_is_a_warning(tmp_path):
    n = np.geomspace(1e3, 1e7, 24)
    flat = profile_of_run(_run(tmp_path / "c", 1e-4 + n / 1e17), "inv")  # 100 PB/s: the times do not grow
    assert any("gpu01 alltoall:" in w and "is faster than any hardware" in w for w in flat["warnings"]), flat["warnings"]
