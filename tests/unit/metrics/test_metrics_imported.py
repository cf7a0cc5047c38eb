"""A real Megatron log turned into a run (mfctl.metrics.imported), read back through RunSummary."""

import json
import sqlite3

import pytest

from mfctl.errors import ConfigError
from mfctl.metrics.imported import import_log
from mfctl.runtime.summary import RunSummary
from support import DATA

LOG = DATA / "train-logs" / "megatron-core-moe-64e-top1-ep4-8gpu.txt"


def test_a_megatron_log_becomes_a_run(tmp_path):
    s = import_log(LOG, tmp_path, seq_len=4096)
    # 15 lines logged every 20 iterations; no 'consumed tokens': global batch x 4096
    assert (s.iterations, s.logged_lines, s.iterations_planned, s.tokens) == (300, 15, 40000, 78643200)
    assert s.tflops_per_gpu_mean == 29.9 and s.iteration_time_s["max"] == 1.639 and s.skipped_iterations == 0
    assert s.tokens_per_s == pytest.approx(78643200 / 207.354) and "tokens assume 4096 tokens per sample" in s.note
    d = tmp_path / s.run_id
    assert RunSummary.from_dict(json.loads((d / "summary.json").read_text())).to_dict() == s.to_dict()
    db = sqlite3.connect(d / "metrics.db")
    assert db.execute("SELECT COUNT(*), MIN(host) FROM iterations").fetchone() == (15, "log")
    assert db.execute("SELECT status, exit_code, inventory FROM run").fetchone() == ("ok", 0, "(training log)")


def test_a_log_that_is_not_one_is_a_config_error(tmp_path):
    bad = tmp_path / "empty.log"
    bad.write_text("nothing to see\n")
    with pytest.raises(ConfigError, match="expected Megatron 'iteration N/ M |'"):  # the parser's word, file named
        import_log(bad, tmp_path / "runs")
    assert not (tmp_path / "runs").exists()  # nothing written
    with pytest.raises(ConfigError, match="cannot read"):
        import_log(tmp_path / "missing.log", tmp_path / "runs")


def test_a_run_directory_being_imported_or_deleted_is_not_listed(tmp_path):
    from mfctl.runtime.rundir import run_dirs

    for name in (".importing-20250101-000000-log0000", ".deleting-20250101-000000-abcd-1", "20250101-000000-log0001"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.db").write_bytes(b"")
    assert [p.name for p in run_dirs(tmp_path)] == ["20250101-000000-log0001"]
