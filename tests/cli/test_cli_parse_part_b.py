"""Issue 19 part B through the CLI: mfctl parse on the new samples (exit code and message), and
runs import-log --json on logs that start mid-run or read "nan"."""

import json
import subprocess

from support import DATA, mfctl_cmd


def _run(*args, env):
    return subprocess.run(mfctl_cmd(*args), capture_output=True, text=True, env=env)


def test_parse_recognises_an_nccl_debug_log_and_its_retry_exceeded_errors(cli_env):
    r = _run("parse", DATA / "nccl-debug" / "ib-retry-exceeded-status12-vendor129-recv.txt", "--json", env=cli_env)
    doc = json.loads(r.stdout)
    assert r.returncode == 0 and doc["kind"] == "nccl-debug" and doc["detected"] is True
    [e0, *_] = doc["data"]["events"]
    assert (e0["kind"], e0["status"], e0["vendor_err"], e0["origin"]["host"], e0["origin"]["device"]) == (
        "completion_error", 12, 129, "kp-ddp-worker-0", 4)


def test_parse_of_nccl_tests_run_without_mpi_says_so_and_exits_3(cli_env):
    r = _run("parse", DATA / "nccl-tests" / "allreduce-v100-2host-no-mpi-repeated-header.txt", env=cli_env)  # recognised
    assert r.returncode == 3 and "line 4" in r.stderr and "each process ran alone" in r.stderr and "MPI=1" in r.stderr


def test_parse_dcgmi_diag_names_gpu0s_memory_failure(cli_env):
    r = _run("parse", "dcgmi-diag", DATA / "dcgm" / "diag-dcgm331-pass-gpu1-fail-gpu0-warnings-excerpt.txt", "--json",
             env=cli_env)
    d = json.loads(r.stdout)["data"]
    assert r.returncode == 0 and d["per_gpu"]["GPU Memory"] == {"1": "Pass", "0": "Fail"}
    assert len(d["warnings"]["GPU Memory"]) == 1 and d["tests"]["Diagnostic"] == "Fail - All"


def test_parse_devlink_text_and_a_dac(cli_env):
    r = _run("parse", DATA / "devlink" / "port-show-ice-switchdev-4vfs.txt", "--json", env=cli_env)
    doc = json.loads(r.stdout)
    assert r.returncode == 0 and doc["kind"] == "devlink-port-text"
    assert doc["data"]["enp8s0f0np0"]["lanes"] == 8
    r = _run("parse", "ethtool-m", DATA / "ethtool" / "m-sff8636-qsfp28-dac-no-dom-built.txt", "--json", env=cli_env)
    d = json.loads(r.stdout)["data"]
    assert r.returncode == 0 and (d["dom"], d["temperature_c"], d["voltage_v"]) == (False, None, None)


def test_import_log_json_has_no_bare_nan_and_a_mid_run_log_is_not_extrapolated(tmp_path, cli_env):
    log = tmp_path / "nan.log"
    log.write_text((DATA / "train-logs" / "megatron-deepspeed-grad-norm-nan-tflops-mid-run.txt").read_text()
                   .replace("grad norm: nan", "lm loss: nan | grad norm: nan"))
    r = _run("runs", "import-log", log, "--json", env=cli_env)
    assert r.returncode == 0 and "NaN" not in r.stdout
    s = json.loads(r.stdout)
    assert s["iterations"] == 3 and s["tflops_per_gpu_mean"] is not None and "starts at iteration 5426" in s["note"]
    r = _run("runs", "import-log", DATA / "train-logs" / "megatron-llm-mid-run-log-interval-1-cut-inside-field.txt",
             "--json", env=cli_env)
    s = json.loads(r.stdout)
    assert r.returncode == 0 and s["iterations"] == 4 and "line 5" in s["note"]


def test_json_output_writes_nan_and_infinity_as_null(capsys):
    from mfctl.cli import plain

    plain.begin()
    plain.emit_json({"schema": "x/v1", "loss": float("nan"), "rows": [1.5, float("inf"), (float("-inf"),)]})
    out = capsys.readouterr().out
    assert "NaN" not in out and "Infinity" not in out
    assert json.loads(out) == {"schema": "x/v1", "loss": None, "rows": [1.5, None, [None]]}
