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
