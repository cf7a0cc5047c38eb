"""``mfctl metrics export``: the ``timings`` table (a real job's measured all-to-all and GEMM times) in
CSV and JSON, and a run recorded before that table existed exports it empty, not as an error."""

import csv
import io
import sqlite3

from mfctl.metrics import export
from mfctl.metrics.store import MetricsStore


def _run(tmp_path, with_timings=True):
    d = tmp_path / "run"
    st = MetricsStore(d / "metrics.db")
    st.iteration("gpu01", {"iteration": 1, "seconds": 0.5, "tokens": 1024})
    if with_timings:
        assert st.timings("gpu01", 1, [{"task": "alltoall", "n": 65536, "unit": "byte", "seconds": 0.002},
                                       {"task": "gemm", "n": 2.0e9, "unit": "flop", "seconds": 0.03}]) == 2
    st.close()
    return d


def test_timings_exported_as_csv_and_json(tmp_path):
    d = _run(tmp_path)
    rows = list(csv.DictReader(io.StringIO(export.to_csv(d, "timings"))))
    assert [(r["host"], r["task"], float(r["n"]), r["unit"], float(r["seconds"])) for r in rows] == [
        ("gpu01", "alltoall", 65536.0, "byte", 0.002), ("gpu01", "gemm", 2.0e9, "flop", 0.03)]
    doc = export.to_json(d)
    assert [t["task"] for t in doc["timings"]] == ["alltoall", "gemm"] and doc["iterations"][0]["seconds"] == 0.5


def test_a_run_from_before_the_timings_table_exports_it_empty(tmp_path):
    d = _run(tmp_path, with_timings=False)
    db = sqlite3.connect(d / "metrics.db")
    db.execute("DROP TABLE timings")  # as a metrics.db written before issue 20
    db.commit()
    db.close()
    assert export.to_csv(d, "timings").splitlines() == ["iteration,host,task,n,unit,seconds,wall_unix"]
    doc = export.to_json(d)
    assert doc["timings"] == [] and len(doc["iterations"]) == 1
