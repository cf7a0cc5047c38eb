"""The run summary and the report say what their figures are (issue 17 item 20): the traffic
prediction row names its measure and points to docs/metrics.md, the FSMoE row says what a
pipeline degree is, the report's prediction plot is called an error plot, and the health plot is
one lane per host with dots coloured by status — not offset lines over a single "0" tick."""

import html
import json
import re
from pathlib import Path

from typer.testing import CliRunner

from mfctl.cli.app import build
from mfctl.metrics import report
from mfctl.metrics.store import MetricsStore
from mfctl.runtime.summary import RunSummary
from support import ROOT

RUN = "20261201-120000-abcdef"


def _run(runs: Path, health=(("gpu01", "ok", []), ("gpu02", "ok", []))) -> Path:
    d = runs / RUN
    st = MetricsStore(d / "metrics.db")
    st.start_run(RUN, "pb.yaml", "inv.yaml", 20.0)
    its = [{"iteration": i, "seconds": 5.0, "tokens": 1000, "epoch": 0, "paused": False, "inter_bytes": 1e9,
            "ocs_bytes": 5e8} for i in range(1, 4)]
    for m in its:
        st.iteration("gpu01", m)
        st.prediction(m["iteration"], "region0", "ewma", 0.012)
        st.prediction(m["iteration"], "region0", "crosslayer-0-7", 0.034)
    for host, status, findings in health:
        st.health(host, status, findings)
    s = RunSummary.of_iterations(iterations=its, reconfigurations=[],
                                 prediction_errors={"ewma": [0.012] * 3, "crosslayer-0-7": [0.034] * 3},
                                 run_id=RUN, status="ok", playbook="pb", inventory="inv", run_dir=str(d),
                                 time_scale=20.0, iterations_planned=3,
                                 fsmoe={"pipeline_degree": 0, "bp_pipeline_degree": 2, "grad_partitions": 4})
    st.end_run(RUN, "ok", 0, s)
    st.close()
    (d / "summary.json").write_text(s.to_json())
    return d


def test_the_summary_explains_its_jargon_and_points_to_the_docs(tmp_path):
    _run(tmp_path / "runs")
    r = CliRunner().invoke(build(), ["runs", "show", RUN], env={"COLUMNS": "400"})
    assert r.exit_code == 0, r.output
    rows = {m[0]: m[1] for m in re.findall(r"│ (\S[^│]*?) +│ (\S[^│]*?) +│", r.stdout)}
    assert rows["traffic prediction"] == ("mean error of each predictor of the EP traffic: crosslayer-0-7 3.4%, "
                                          "ewma 1.2% (docs/metrics.md)")
    assert rows["FSMoE schedule"] == ("pipeline degree r (each MoE layer's all-to-all and expert compute overlapped in "
                                      "r chunks): forward best per layer, backward 2; gradient all-reduce in 4 "
                                      "partitions (docs/metrics.md)")
    assert "rel. error" not in r.stdout and "fwd" not in r.stdout
    doc = (ROOT / "docs" / "metrics.md").read_text()
    assert "## The run summary, read row by row" in doc and "`crosslayer-A-B`" in doc and "pipeline degree *r*" in doc


def test_the_report_names_the_prediction_plot_an_error_plot(tmp_path):
    d = _run(tmp_path / "runs")
    r = CliRunner().invoke(build(), ["runs", "report", RUN])
    assert r.exit_code == 0, r.output
    page = (d / "report.html").read_text()
    captions = [html.unescape(c) for c in re.findall(r"<figcaption>([^<]+)</figcaption>", page)]
    assert any(c.startswith("Traffic prediction error: relative error of each predictor") for c in captions), captions
    assert "predicted vs. actual" not in page
    assert any(c.startswith("Health over the run: each host's samples, coloured by status") for c in captions)


def test_the_health_plot_has_a_lane_per_host_and_a_legend_of_statuses(monkeypatch):
    figs = []
    monkeypatch.setattr(report, "_png", lambda fig: figs.append(fig) or "data:")
    t = 1_800_000_000.0
    finding = json.dumps([{"check": "gpu", "severity": "critical"}, {"check": "nic", "severity": "warning"}])
    rows = [("gpu01", "ok", "[]", t), ("gpu02", "ok", "[]", t + 0.1), ("gpu01", "ok", "[]", t + 10),
            ("gpu02", "critical", finding, t + 10.2)]
    report._plot_health(rows)
    (ax,) = figs[0].axes
    assert [x.get_text() for x in ax.get_yticklabels()] == ["gpu01", "gpu02"]  # hosts, not counts
    assert [x.get_text() for x in ax.get_legend().get_texts()] == ["ok", "critical", "N above a dot: findings"]
    assert [a.get_text() for a in ax.texts] == ["2"]  # the one sample with findings says how many
    dots = [c.get_offsets().tolist()[0] for c in ax.collections]
    assert [y for _, y in dots] == [0, 0, 1, 1]  # every dot on its host's lane: no offsets
    assert [c.get_facecolor()[0].tolist()[:3] for c in ax.collections][-1] == list(
        __import__("matplotlib.colors", fromlist=["to_rgb"]).to_rgb(report.HEALTH_COLOURS["critical"]))
    figs.clear()
    report._plot_health([("gpu01", "ok", "[]", t), ("gpu01", "ok", "[]", t + 5)])  # nothing found: no count legend
    assert [x.get_text() for x in figs[0].axes[0].get_legend().get_texts()] == ["ok"]
