"""``mfctl runs report`` of a run over several OCSes and regions names each OCS's read-back and each
region's reconfigurations and OCS (issue 22: "health and reports show each OCS"; the trial's 2-OCS
report named no OCS)."""

import json

from mfctl.metrics import report
from mfctl.metrics.store import MetricsStore
from mfctl.runtime.summary import RunSummary


def test_the_report_shows_each_ocs_and_region(tmp_path):
    d = tmp_path / "20261202-000000-abcdef"
    st = MetricsStore(d / "metrics.db")
    st.iteration("gpu01", {"iteration": 1, "seconds": 1.0, "tokens": 10})
    st.close()
    recs = [{"epoch": 1, "region": "region0", "ocs": "ocs-a", "outcome": "applied"},
            {"epoch": 2, "region": "region1", "ocs": "ocs-b", "outcome": "applied"},
            {"epoch": 3, "region": "region1", "ocs": "ocs-b", "outcome": "rolled-back"}]
    s = RunSummary.of_iterations(iterations=[{"iteration": 1, "seconds": 1.0, "tokens": 10}], reconfigurations=[],
                                 prediction_errors={}, run_id=d.name, status="ok", playbook="p", inventory="i",
                                 run_dir=str(d))
    s.reconfigurations = recs
    s.ocs = {"endpoint": None, "cross_connects": None, "matches_last_plan": True,
             "by_ocs": {"ocs-a": {"endpoint": "tl1-tcp 127.0.0.1:1", "cross_connects": [[1, 2], [2, 1]],
                                  "matches_last_plan": True},
                        "ocs-b": {"endpoint": "tl1-tcp 127.0.0.1:2", "cross_connects": [], "matches_last_plan": False}}}
    (d / "summary.json").write_text(json.dumps(s.to_dict()))
    page = report._page(RunSummary.from_dict(json.loads((d / "summary.json").read_text())), [])
    assert "<th>OCS ocs-a read-back</th><td>matches the last plan, 2 cross-connects via tl1-tcp 127.0.0.1:1</td>" in page
    assert "<th>OCS ocs-b read-back</th><td>DIFFERS from the last plan, 0 cross-connects via tl1-tcp 127.0.0.1:2</td>" \
        in page
    assert "<th>region region0</th><td>1 reconfiguration(s) on OCS ocs-a, 1 applied</td>" in page
    assert "<th>region region1</th><td>2 reconfiguration(s) on OCS ocs-b, 1 applied</td>" in page
