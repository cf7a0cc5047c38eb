"""The controller's reconfiguration policy, priced with the what-if step model
(``mfctl.fabric.itermodel.region_objective``, issue 21), on the mock testbed through the real CLI:
no reconfiguration while the traffic is what the circuits were planned for, one when it is not.

On the prototype (4 servers × 3 lanes, Mixtral's routing) circuits planned for the traces' average
stay within the planner's 2 % of the best for every domain mixture, however concentrated (measured:
no candidate at all), so "shifted" traffic here is traffic the start topology was not planned for:
random circuits, as the MixNet simulator starts (``random_connect()``), under a changing mixture.
The unit test beside the policy (tests/unit/runtime/test_runtime_policy_stepmodel.py) moves a hot
pair on the prototype's plan."""

import json
import subprocess

import pytest
import yaml

from support import DATA, mfctl_cmd

SHORT = DATA / "playbooks" / "short.yaml"


def _playbook(tmp_path, training: dict, initial: str):
    doc = yaml.safe_load(SHORT.read_text())
    doc["inventory"] = str((SHORT.parent / doc["inventory"]).resolve())
    doc["training"].update({"iterations": 16, **training})
    doc["topology"]["initial"] = initial
    p = tmp_path / "pb.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


@pytest.mark.parametrize("training, initial, shifts", [
    # circuits planned for the traces' average; every micro-batch a uniform mix of the domains, never changing
    ({"phase_iterations": 1000, "domain_concentration": 1000.0}, "planned", False),
    # random circuits; one or two domains at a time, another mixture every 4 iterations
    ({"phase_iterations": 4, "domain_concentration": 0.02}, "random", True),
], ids=["steady", "shifting"])
def test_a_reconfiguration_when_the_traffic_shifts_none_while_it_stays(tmp_path, cli_env, training, initial, shifts):
    r = subprocess.run(mfctl_cmd("run", _playbook(tmp_path, training, initial), "--json"), capture_output=True, text=True,
                       env=cli_env, timeout=180, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    s = json.loads(r.stdout)
    assert s["status"] == "ok" and s["iterations"] == 16
    journal = [json.loads(line) for line in (tmp_path / "runs" / s["run_id"] / "journal.jsonl").read_text().splitlines()]
    decisions = [e for e in journal if e.get("op") == "policy.decision"]
    if shifts:
        assert len(s["reconfigurations"]) >= 1, decisions
        # each one priced by the step model: its predicted gain over the window beat its cost
        for rc in s["reconfigurations"]:
            assert rc["outcome"] == "applied" and rc["predicted_gain_s"] > rc["predicted_cost_s"] >= 0
            assert rc["objective_after_s"] < rc["objective_before_s"]
        assert len(decisions) >= len(s["reconfigurations"])
    else:
        # planned when due, and kept: no candidate's gain paid for its cost
        assert s["reconfigurations"] == [], decisions
        assert all(d["gain_s"] - d["cost_s"] <= 0 for d in decisions), decisions
