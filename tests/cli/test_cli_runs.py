"""mfctl runs: a training log imported as a run (its parser: tests/golden/train-log)."""

import json
import subprocess

import pytest

from support import DATA, mfctl_cmd


def test_import_a_training_log_as_a_run(tmp_path, cli_env):
    log = DATA / "train-logs" / "megatron-core-moe-64e-top1-ep4-8gpu.txt"
    r = subprocess.run(mfctl_cmd("runs", "import-log", log, "--json"), capture_output=True, text=True, env=cli_env)
    s = json.loads(r.stdout)
    # 15 logged lines, one every 20 iterations: 300 iterations; no 'consumed tokens' → 64 x 4096 per iteration
    assert r.returncode == 0 and s["iterations"] == 300 and s["logged_lines"] == 15
    assert s["iteration_time_s"]["max"] == pytest.approx(1.639) and s["tokens"] == 300 * 64 * 4096
    assert "--seq-len" in s["note"]
    ds_log = DATA / "train-logs" / "deepspeed-moe-gpt125m-64experts-ep4-4gpu.txt"
    ds = json.loads(subprocess.run(mfctl_cmd("runs", "import-log", ds_log, "--json"), capture_output=True, text=True,
                                   env=cli_env).stdout)
    assert ds["iterations"] == 180 and ds["tokens"] == 180 * 524288  # consumed tokens: 524,288 per iteration
    bad = tmp_path / "bad.log"
    bad.write_text("nothing here\n")
    assert subprocess.run(mfctl_cmd("runs", "import-log", bad), capture_output=True, env=cli_env).returncode == 3
    r = subprocess.run(mfctl_cmd("metrics", "export", s["run_id"], "--format", "json"), capture_output=True, text=True,
                       env=cli_env)
    assert len(json.loads(r.stdout)["iterations"]) == 15


def test_import_of_a_log_with_an_iteration_number_over_int64_is_exit_3_and_writes_no_run(tmp_path, cli_env):
    log = tmp_path / "big.log"
    log.write_text(" iteration 99999999999999999999999/ 99999999999999999999999 | elapsed time per iteration (ms): "
                   "5 | global batch size: 8 |\n")
    r = subprocess.run(mfctl_cmd("runs", "import-log", log, "--json"), capture_output=True, text=True, env=cli_env)
    assert r.returncode == 3 and "Traceback" not in r.stderr
    err = json.loads(r.stdout)["error"]  # --json: the error is the object on stdout
    assert err["problems"][0]["path"] == str(log) and err["problems"][0]["line"] == 1
    assert err["message"].startswith(f"{log}:1: megatron log: output line 1: expected iteration numbers")
    assert not (tmp_path / "runs").exists() or list((tmp_path / "runs").iterdir()) == []
    listed = subprocess.run(mfctl_cmd("runs", "list", "--json"), capture_output=True, text=True, env=cli_env)
    assert "crashed" not in listed.stdout


def test_import_warns_of_lines_whose_elapsed_time_is_nan(tmp_path, cli_env):
    log = tmp_path / "nan.log"
    log.write_text(" iteration 1/ 10 | elapsed time per iteration (ms): 100 | global batch size: 8 |\n"
                   " iteration 2/ 10 | elapsed time per iteration (ms): nan | global batch size: 8 |\n")
    r = subprocess.run(mfctl_cmd("runs", "import-log", log, "--json"), capture_output=True, text=True, env=cli_env)
    assert r.returncode == 0 and json.loads(r.stdout)["lines_not_counted"] == [2]
    assert f"warning: {log}: line 2 not counted: elapsed time per iteration not a finite number" in r.stderr
