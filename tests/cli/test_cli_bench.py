"""``mfctl bench nccl`` on a broken testbed and with bad sizes (issue 17 item 2)."""

import json
import subprocess

import pytest

from mfctl import mockctl
from support import PROTOTYPE, mfctl_cmd


@pytest.mark.parametrize("value, msg", [
    ("lots", "--max-bytes must be a size such as 64K, 256M or 1G (bytes, binary units), got 'lots'"),
    ("0", "--max-bytes must be from 1 byte to 16G, got '0'"),
    ("-5", "got '-5'"),
    ("17G", "--max-bytes must be from 1 byte to 16G, got '17G'"),
    ("512K", "--max-bytes must be at least 1M (the sweep starts at 1M), got '512K'"),
])
def test_a_bad_max_bytes_is_a_usage_error_before_anything_is_reached(value, msg, cli_env):
    r = subprocess.run(mfctl_cmd("bench", "nccl", "-i", PROTOTYPE, "--max-bytes", value), capture_output=True,
                       text=True, env=cli_env, timeout=60)
    assert r.returncode == 2 and msg in r.stderr and "Traceback" not in r.stderr


def test_a_host_refusing_ssh_is_exit_4_and_a_lost_gpu_exit_1_never_a_benchmark(tmp_path, cli_env):
    def bench(*inject):
        st = mockctl.start(PROTOTYPE, tmp_path / "mock", time_scale=100, inject=list(inject))
        try:
            return subprocess.run(mfctl_cmd("bench", "nccl", "-i", st["inventory"], "--json"), capture_output=True,
                                  text=True, env=cli_env, timeout=120)
        finally:
            mockctl.stop(tmp_path / "mock")

    r = bench("gpu03:ssh=refuse", "gpu02:gpu3=xid79")
    err = json.loads(r.stdout)["error"]
    assert r.returncode == 4 == err["exit_code"] and "rows" not in json.loads(r.stdout)
    assert err["message"].startswith("cannot benchmark: gpu03: SSH to 127.0.0.1:") and "gpu02" not in err["message"]
    r = bench("gpu02:gpu3=xid79")
    err = json.loads(r.stdout)["error"]
    assert r.returncode == 1, err
    assert err["message"].startswith("cannot benchmark: gpu02 shows 7 of 8 GPUs (GPU 0000:4E:00.0: GPU is lost.")
    assert err["message"].endswith("GPU is lost.  Reboot the system to recover this GPU)")
    assert not list((tmp_path / "state" / "bench").glob("*.json"))  # nothing stored as if it were a result


def test_one_host_is_refused_it_measures_nvlink_not_the_fabric(cli_env):
    r = subprocess.run(mfctl_cmd("bench", "nccl", "-i", PROTOTYPE, "--hosts", "gpu01"), capture_output=True, text=True,
                       env=cli_env, timeout=120, stdin=subprocess.DEVNULL)
    assert r.returncode == 2 and "names one host (gpu01): nccl-tests across the fabric needs at least 2 hosts" in r.stderr
