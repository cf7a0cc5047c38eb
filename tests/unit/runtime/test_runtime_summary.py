"""RunSummary: the one owner of mfctl.run.summary/v1 (mfctl.runtime.summary)."""

import json

import numpy as np
import pytest

from mfctl.runtime.reconfig import Decision, Failure, Proposal, Reconfiguration
from mfctl.runtime.summary import SCHEMA, TRAINING_LOG, RunSummary

RUN_KEYS = ["schema", "run_id", "status", "error", "playbook", "inventory", "run_dir", "time_scale", "launcher",
            "slurm_job", "fsmoe", "iterations", "iterations_planned", "iteration_time_s", "tokens_per_s",
            "iteration_time_by_epoch_s", "tokens", "simulated_train_s", "wall_train_s", "ep_inter_server_bytes",
            "ep_bytes_on_circuits", "ep_share_on_circuits", "reconfigurations", "warnings", "prediction_rel_error",
            "health", "initial_topology"]


def _it(i, secs, epoch, paused=False):
    return {"iteration": i, "seconds": secs, "tokens": 1000, "epoch": epoch, "paused": paused,
            "inter_bytes": 4e9, "ocs_bytes": 3e9}


def _rec(epoch, outcome="applied", failures=()):
    p = Proposal(epoch=epoch, region="r0", hosts=[], lanes={}, iteration=2, old=[], new=[], planned=np.zeros((2, 2)),
                 ocs_before={}, region_ports=set(), decision=Decision(method="best", predicted_gain_s=1.23456))
    r = Reconfiguration.start(p)
    r.outcome, r.failures = outcome, list(failures)
    r.t_switch_ms, r.t_linkup_ms, r.t_drain_ms, r.t_resume_ms = 40.0 + epoch, 5600.0, 200.0, 300.0
    return r


def _run(**kw):
    base = dict(run_id="20260101-000000-abcdef", status="ok", playbook="short", inventory="proto", run_dir="/r",
                time_scale=20.0, launcher="sim", slurm_job=None, iterations_planned=4, health={"hosts": 4, "ok": 4,
                "sweep_s": 0.123456}, initial_topology={"mode": "random"}, wall_train_s=1.234567,
                iterations=[_it(1, 2.0, 0), _it(2, 3.0, 0, paused=True), _it(3, 1.0, 1), _it(4, 1.5, 1)],
                reconfigurations=[_rec(1)], prediction_errors={"ewma": [0.1, 0.2], "last": [0.3]})
    base.update(kw)
    return RunSummary.of_iterations(**base)


def test_a_runs_figures():
    s = _run()
    d = s.to_dict()
    assert list(d)[:len(RUN_KEYS)] == RUN_KEYS and d["schema"] == SCHEMA
    assert d["iterations"] == 4 and d["tokens"] == 4000 and d["simulated_train_s"] == 7.5
    assert d["iteration_time_s"] == {"mean": 1.875, "p50": 1.75, "min": 1.0, "max": 3.0}
    assert d["tokens_per_s"] == round(4000 / 7.5, 4)
    assert d["iteration_time_by_epoch_s"] == {"0": 2.0, "1": 1.25}  # the paused iteration left out
    assert d["ep_share_on_circuits"] == 0.75 and d["ep_inter_server_bytes"] == 16e9
    assert d["prediction_rel_error"] == {"ewma": 0.15, "last": 0.3}
    assert d["wall_train_s"] == 1.2346 and d["health"]["sweep_s"] == 0.1235
    assert d["reconfiguration_means"] == {"t_switch_ms": 41.0, "t_linkup_ms": 5600.0, "t_runtime_ms": 500.0}
    assert d["reconfigurations"][0]["predicted_gain_s"] == 1.2346 and d["reconfigurations"][0]["method"] == "best"
    assert "ocs" not in d and "reconfigurations_failed" not in d and "exit_code" not in d
    json.dumps(d)


def test_failed_reconfigurations_are_listed_with_what_they_left():
    d = _run(reconfigurations=[_rec(1), _rec(2, "partial", [Failure("apply", "TL1Deny: no")])]).to_dict()
    assert d["reconfigurations_failed"] == [{"epoch": 2, "region": "r0", "outcome": "partial",
                                             "error": "TL1Deny: no", "ocs_needs_recovery": True,
                                             "never_resumed": False}]


def test_a_run_without_iterations():
    d = _run(iterations=[], reconfigurations=[], prediction_errors={}).to_dict()
    assert d["iteration_time_s"] is None and d["tokens_per_s"] is None and d["ep_share_on_circuits"] is None
    assert d["iteration_time_by_epoch_s"] == {} and "reconfiguration_means" not in d


def test_round_trips_and_keeps_a_newer_mfctls_keys():
    ocs = {"endpoint": "tcp:x", "cross_connects": [], "matches_last_plan": True, "circuits": {}}
    d = _run(ocs=ocs).to_dict() | {"from_the_future": [1]}
    assert list(d)[-3:] == ["ocs", "reconfiguration_means", "from_the_future"]
    s = RunSummary.from_dict(json.loads(json.dumps(d)))
    assert s.ocs["endpoint"] == "tcp:x" and s.extra == {"from_the_future": [1]}
    assert list(s.to_dict()) == list(d) and s.to_dict() == d


def test_a_training_log_has_its_own_keys():
    s = RunSummary(run_id="x", status="ok", playbook="train.log", inventory=TRAINING_LOG, run_dir="/r", iterations=10,
                   logged_lines=2, note="n", tflops_per_gpu_mean=150.0, skipped_iterations=0)
    d = s.to_dict()
    assert s.is_training_log and "launcher" not in d and "warnings" not in d and "initial_topology" not in d
    assert d["logged_lines"] == 2 and d["note"] == "n" and d["health"] == {"hosts": 0, "ok": 0, "sweep_s": 0.0}
    assert RunSummary.from_dict(d).to_dict() == d


@pytest.mark.parametrize("bad", [[], "x", {"status": "ok"}, {"run_id": 3}, {"run_id": "x", "schema": "other/v1"}])
def test_what_is_not_a_summary_is_refused(bad):
    with pytest.raises(ValueError):
        RunSummary.from_dict(bad)


def test_an_older_summary_reads_with_defaults():
    s = RunSummary.from_dict({"run_id": "old", "status": "ok", "reconfigurations": None})
    assert s.reconfigurations == [] and s.warnings == [] and s.health["hosts"] == 0 and s.playbook == "?"


def test_a_reconfigurations_record_flattens_its_decision():
    r = _rec(3)
    d = r.to_dict()
    assert (d["reason"], d["method"], d["t_plan_ms"], d["t_runtime_ms"]) == ("predicted gain > cost", "best", 0.0, 500.0)
    assert r.t_total_s == pytest.approx((43.0 + 5600 + 200 + 300) / 1000)
