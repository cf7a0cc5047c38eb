"""mfctl schedule in process (CliRunner): FSMoE choices from the model, with and without a profile."""

import json

import pytest
from typer.testing import CliRunner

from mfctl.cli.app import build
from support import PROTOTYPE, ROOT

PLAYBOOK = ROOT / "playbooks" / "mixtral-prototype.yaml"


def invoke(*args):
    return CliRunner().invoke(build(), [str(a) for a in args])


def test_schedule_without_a_profile_matches_the_service():
    from mfctl.context import Context
    from mfctl.fabric.schedule import plan_schedule
    from mfctl.inventory import load_inventory
    from mfctl.runtime.playbook import load_playbook

    r = invoke("schedule", PLAYBOOK, "--json")
    out = json.loads(r.stdout)
    assert r.exit_code == 0 and out["schema"] == "mfctl.schedule/v1" and out["profile"] is None
    assert len(out["choices"]) == 16 and out["best"] == min(out["choices"], key=lambda c: c["iteration_s"])
    assert [p["partitions"] for p in out["gradient_partitions"]] == [1, 2, 4, 8, 16]
    assert out["command"].endswith(f"--grad-partitions {out['best_partitions']}")
    inv = load_inventory(PROTOTYPE)
    s = plan_schedule(load_playbook(PLAYBOOK), inv, Context(inv).link_rates())
    assert out["best"] == pytest.approx(s.best) and out["best_partitions"] == s.best_partitions == 16
    # the gradient all-reduce of 1 GiB per GPU over the EPS, 1 → 16 partitions: 1120.5 → 70.4 ms exposed
    exposed = [p["exposed_allreduce_s"] for p in out["gradient_partitions"]]
    assert exposed[0] == pytest.approx(1.1205, abs=1e-3) and exposed[-1] == pytest.approx(0.0704, abs=1e-3)


def test_a_stored_profile_changes_the_costs(tmp_path):
    from mfctl.bench.profile import profile_path

    base = json.loads(invoke("schedule", PLAYBOOK, "--json").stdout)
    fits = [{"task": "alltoall", "alpha_s": 35e-6, "rate_per_s": 95e9, "unit": "byte"},
            {"task": "gemm", "alpha_s": 1e-6, "rate_per_s": 312e12, "unit": "flop"}]  # η = 1: faster experts
    p = profile_path("mfabric-prototype")
    p.write_text(json.dumps({"schema": "mfctl.profile/v1", "fits": fits}))
    out = json.loads(invoke("schedule", PLAYBOOK, "--json").stdout)
    assert out["profile"] == str(p)
    assert out["best"]["iteration_s"] < base["best"]["iteration_s"]
    assert invoke("schedule", tmp_path / "none.yaml").exit_code == 3
