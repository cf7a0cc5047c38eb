"""Launch rendering (ssh, slurm), the Megatron hook against a real controller socket,
profile fits, schedule."""

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from mfctl.fabric.profile import fit_linear
from mfctl.inventory import load_inventory
from mfctl.runtime.playbook import load_playbook
from mfctl.runtime.render import render_hosts, render_slurm
from support import ROOT, mfctl_cmd

TORCHRUN = ROOT / "playbooks" / "mixtral-torchrun.yaml"


def test_ssh_torchrun_rendering():
    pb = load_playbook(TORCHRUN)
    inv = load_inventory(pb.inventory_path())
    hosts = render_hosts(pb, inv, "192.0.2.9:7000", "secret-token")
    assert [h.host for h in hosts] == ["gpu01", "gpu02", "gpu03", "gpu04"]
    h = hosts[2]
    assert h.argv[:10] == ["torchrun", "--nnodes", "4", "--nproc-per-node", "8", "--node-rank", "2",
                           "--master-addr", "192.0.2.11", "--master-port"]
    assert h.argv[-6:] == ["--pipeline-degree", "2", "--bp-pipeline-degree", "4", "--grad-partitions", "8"]
    assert h.env["NCCL_IB_HCA"] == "mlx5_0,mlx5_1,mlx5_2,mlx5_3" and h.env["NCCL_SOCKET_IFNAME"] == "eno1"
    lanes = {lane.netdev for n in inv.host("gpu03").nics for lane in n.lanes}
    assert h.env["NCCL_SOCKET_IFNAME"] not in lanes  # never an optical lane (it goes dark when re-wired)
    assert (h.env["NCCL_IB_GID_INDEX"], h.env["NCCL_IB_TC"], h.env["NCCL_IB_TIMEOUT"]) == ("3", "106", "22")
    assert h.env["MFCTL_CONTROLLER"] == "192.0.2.9:7000"
    assert "secret-token" not in h.command_line() and "secret-token" in " ".join(h.full_argv())


def test_slurm_rendering_and_cli_dry_run(cli_env):
    pb = load_playbook(TORCHRUN)
    pb.runtime.launcher = "slurm"
    script = render_slurm(pb, load_inventory(pb.inventory_path()), "192.0.2.9:7000", "s3cr3t-n0nce", "run1")
    assert "#SBATCH --nodes=4" in script and "--rdzv-backend c10d" in script and '"${head_addr:-$head}:29500"' in script
    assert "s3cr3t-n0nce" not in script and "export NCCL_SOCKET_IFNAME=eno1" in script
    assert "#SBATCH --output=mfctl-runs/mfctl-run1-%j.out" in script
    assert "scontrol -o show node \"$head\"" in script  # the rendezvous at the head's NodeAddr
    assert "srun --label --kill-on-bad-exit=1 sh -c" in script and "mfctl-task torchrun --nnodes 4" in script
    assert script.rstrip().endswith(
        "/opt/megatron/pretrain_gpt.py --mfctl-hook examples.megatron_hook --pipeline-degree 2 --bp-pipeline-degree 4 "
        "--grad-partitions 8")
    pb.runtime.script_mode = "module"
    assert ("--rdzv-id run1 --rdzv-conf join_timeout=25,read_timeout=25 -m /opt/megatron/pretrain_gpt.py"
            in render_slurm(pb, load_inventory(pb.inventory_path()), "192.0.2.9:7000", "t", "run1"))
    r = subprocess.run(mfctl_cmd("run", TORCHRUN, "--dry-run", "--json"), capture_output=True, text=True, env=cli_env)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["launcher"] == "ssh" and len(out["hosts"]) == 4 and out["hosts"][0]["env"]["MFCTL_RUN_TOKEN"] == "<redacted>"


def test_profile_fit_recovers_known_alpha_and_beta():
    rng = np.random.default_rng(3)
    n = 2.0 ** np.arange(10, 30)
    t = (25e-6 + n / 50e9) * rng.uniform(0.99, 1.01, size=n.size)
    f = fit_linear("alltoall", n, t, "byte")
    assert f.alpha_s == pytest.approx(25e-6, rel=0.2) and f.rate == pytest.approx(50e9, rel=0.02)
    assert f.rel_rms_error < 0.05
    with pytest.raises(ValueError):
        fit_linear("x", [1, 1], [2, 2], "byte")


def test_profile_and_schedule_on_the_mock(tmp_path, cli_env, monkeypatch):
    from mfctl import mockctl
    from support import PROTOTYPE

    monkeypatch.setenv("MFCTL_STATE_DIR", cli_env["MFCTL_STATE_DIR"])
    st = mockctl.start(PROTOTYPE, tmp_path / "mock", time_scale=50)
    try:
        r = subprocess.run(mfctl_cmd("profile", "-i", st["inventory"], "--json"), capture_output=True, text=True, env=cli_env)
        assert r.returncode == 0, r.stderr
        fits = {f["task"]: f for f in json.loads(r.stdout)["fits"]}
        # the mock's modelled costs: all-to-all 35 us + 1/95 GB/s; GEMM at 0.65 x 312 TFLOP/s
        assert fits["alltoall"]["rate_per_s"] == pytest.approx(95e9, rel=0.05)
        assert fits["gemm"]["rate_per_s"] == pytest.approx(0.65 * 312e12, rel=0.05)
        r = subprocess.run(mfctl_cmd("schedule", ROOT / "playbooks" / "mixtral-prototype.yaml", "-i", st["inventory"], "--json"),
                           capture_output=True, text=True, env=cli_env)
        out = json.loads(r.stdout)
        assert r.returncode == 0 and len(out["choices"]) == 16 and out["profile"]
        best = out["best"]
        assert best["iteration_s"] == min(c["iteration_s"] for c in out["choices"])
        assert "--pipeline-degree" in out["command"] and out["command"].endswith("--grad-partitions 16")
    finally:
        mockctl.stop(tmp_path / "mock")


def test_the_simulated_run_honours_pipeline_degrees_and_gradient_partitions(tmp_path):
    """The FSMoE choices passed to the launch change the simulated step time as predicted:
    gradient partitions 1 → 16 save the exposed all-reduce difference (1120.4 − 70.4 ms)."""
    import sqlite3

    from mfctl.fabric.stepmodel import StepSpec, grad_allreduce_exposed_s, grad_sync_bytes
    from mfctl.runtime.job import Job

    def run(name, **training):
        """{iteration: seconds} of the leader, for iterations not paused by a reconfiguration."""
        pb = load_playbook(ROOT / "tests" / "data" / "playbooks" / "short.yaml")
        for k, v in training.items():
            setattr(pb.training, k, v)
        pb.runtime.linkup_timeout_s = 300  # a loaded CI machine must not turn a slow poll into an EPS fallback
        pb.policy.enabled = False  # one topology throughout: where a reconfiguration lands depends on the machine's load
        s = Job(pb, runs_dir=str(tmp_path / name)).run()
        assert s["exit_code"] == 0, s["error"]
        with sqlite3.connect(Path(s["run_dir"]) / "metrics.db") as db:
            return {i: (e, sec) for i, e, sec in db.execute(
                "SELECT iteration, epoch, seconds FROM iterations WHERE host = 'gpu01' AND paused = 0")}

    def diffs(a, b):  # per iteration, where both runs ran on the same topology epoch
        return [a[i][1] - b[i][1] for i in sorted(set(a) & set(b)) if a[i][0] == b[i][0]]

    one = run("p1", pipeline_degree=4, bp_pipeline_degree=8, grad_partitions=1)
    sixteen = run("p16", pipeline_degree=4, bp_pipeline_degree=8, grad_partitions=16)
    unpipelined = run("r1", pipeline_degree=1, bp_pipeline_degree=1, grad_partitions=16)
    b = grad_sync_bytes(StepSpec(), 32, 8, 32)
    saved = grad_allreduce_exposed_s(b, 1, 4, 8, 12.5e9 * 0.92) - grad_allreduce_exposed_s(b, 16, 4, 8, 12.5e9 * 0.92)
    assert saved == pytest.approx(1.05, abs=0.01)
    d = diffs(one, sixteen)
    assert len(d) == 12 and np.median(d) == pytest.approx(saved, abs=0.002)
    assert np.median(diffs(unpipelined, sixteen)) > 0.3  # FSMoE pipelining hides part of the all-to-all
