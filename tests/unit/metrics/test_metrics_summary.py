"""The metrics store, the runs index and the Prometheus export read the run summary through
RunSummary (mfctl.metrics.store, mfctl.metrics.export)."""

import json
import sqlite3

from mfctl.metrics.export import prometheus_text
from mfctl.metrics.store import MetricsStore, index_run
from mfctl.runtime.summary import RunSummary


def _summary(run_dir):
    return RunSummary(run_id="20260101-000000-aaaaaa", status="failed", error="boom", playbook="short",
                      inventory="proto-mock-1", run_dir=str(run_dir), time_scale=50.0, iterations=3,
                      tokens_per_s=1234.5, reconfigurations=[{"epoch": 1}, {"epoch": 2}])


def test_the_store_keeps_summary_json_and_the_index_its_figures(tmp_path):
    run = tmp_path / "runs" / "r1"
    s = _summary(run)
    store = MetricsStore(run / "metrics.db")
    store.start_run(s.run_id, "pb.yaml", "/x/inventory.yaml", 50.0)
    store.iteration("gpu01", {"iteration": 1, "seconds": 2.0, "tokens": 10, "epoch": 0})
    store.end_run(s.run_id, "failed", 1, s)
    (row,) = store.query("SELECT status, exit_code, summary_json FROM run")
    store.close()
    assert row[:2] == ("failed", 1) and json.loads(row[2]) == s.to_dict()
    index_run(tmp_path / "runs", s)
    db = sqlite3.connect(tmp_path / "runs" / "index.sqlite")
    assert db.execute("SELECT run_id, playbook, inventory, status, iterations, tokens_per_s, reconfigurations, run_dir "
                      "FROM runs").fetchall() == [(s.run_id, "short", "proto-mock-1", "failed", 3, 1234.5, 2, str(run))]
    # the export names the inventory as the summary does (a mock's file is always inventory.yaml)
    (run / "summary.json").write_text(json.dumps(s.to_dict()))
    assert 'inventory="proto-mock-1"' in prometheus_text(run)
    (run / "summary.json").write_text("[]")  # not a summary: the file's name instead
    assert 'inventory="inventory.yaml"' in prometheus_text(run)


def test_prometheus_reconfiguration_series_carry_region_and_ocs_and_pass_promtool(tmp_path):
    """Issue 22: with several regions over several OCSes each region's reconfigurations and its last
    reconfiguration's phases are series of their own, labelled ``region`` and ``ocs`` (the OCS from
    the summary's records); ``promtool check metrics`` (Debian package prometheus) accepts the text."""
    import shutil
    import subprocess

    import pytest
    from prometheus_client.parser import text_string_to_metric_families

    run = tmp_path / "runs" / "r2"
    recs = [{"epoch": 1, "region": "region0", "ocs": "ocs-a", "t_switch_ms": 42.0, "t_linkup_ms": 5670.0,
             "t_runtime_ms": 10.0},
            {"epoch": 2, "region": "region1", "ocs": "ocs-b", "t_switch_ms": 46.8, "t_linkup_ms": 6330.0,
             "t_runtime_ms": 12.0},
            {"epoch": 3, "region": "region0", "ocs": "ocs-a", "t_switch_ms": 41.4, "t_linkup_ms": 5500.0,
             "t_runtime_ms": 11.0}]
    s = RunSummary(run_id="20260101-000000-bbbbbb", status="ok", playbook="two", inventory="mfabric-2ocs",
                   run_dir=str(run), time_scale=20.0, iterations=3, reconfigurations=recs)
    store = MetricsStore(run / "metrics.db")
    store.start_run(s.run_id, "pb.yaml", "/x/inventory.yaml", 20.0)
    for r in recs:
        store.reconfiguration(r)
    store.end_run(s.run_id, "ok", 0, s)
    store.close()
    (run / "summary.json").write_text(json.dumps(s.to_dict()))
    text = prometheus_text(run)
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    counts = {(x.labels["region"], x.labels["ocs"]): x.value for x in fams["mfctl_reconfigurations"].samples}
    assert counts == {("region0", "ocs-a"): 2.0, ("region1", "ocs-b"): 1.0}
    phases = {(x.labels["phase"], x.labels["region"], x.labels["ocs"]): x.value
              for x in fams["mfctl_reconfiguration_phase_seconds"].samples}
    assert phases == pytest.approx({("switch", "region0", "ocs-a"): 0.0414, ("linkup", "region0", "ocs-a"): 5.5,
                      ("runtime", "region0", "ocs-a"): 0.011, ("switch", "region1", "ocs-b"): 0.0468,
                      ("linkup", "region1", "ocs-b"): 6.33, ("runtime", "region1", "ocs-b"): 0.012})
    assert 'mfctl_reconfigurations_total{ocs="ocs-b",region="region1"} 1.0' in text
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package prometheus): the labels were checked, the "
                    "exposition format was not")
    r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
