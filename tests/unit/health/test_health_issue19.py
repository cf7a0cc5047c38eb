"""health on the parsers' new shapes (issue 19): DCGM per-GPU failures, DACs without DOM and CMIS
modules in low power."""

from __future__ import annotations

from unit.health.test_health_checks import Answers

from mfctl import health
from mfctl.inventory import load_inventory
from support import DATA, PROTOTYPE


def test_dcgm_names_gpu0s_memory_failure_from_a_pass_row():
    inv = load_inventory(PROTOTYPE)
    text = (DATA / "dcgm" / "diag-dcgm331-pass-gpu1-fail-gpu0-warnings-excerpt.txt").read_text()
    [hh] = health.sweep(Answers({("dcgmi", "diag"): text}), inv, ["gpu01"], checks=["dcgm"]).targets
    assert [f.component for f in hh.findings] == ["GPU Memory (GPU 0)", "Diagnostic", "Targeted Stress"]
