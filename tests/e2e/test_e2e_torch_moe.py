"""``mfctl run playbooks/moe-torch-mock.yaml``: a REAL MoE training job (mfctl.integrations.torch_moe,
4 EP ranks on gloo) under torch's own torchrun on every mock host (the playbook's ``mock.torchrun:
real``), and the mock OCS re-wired from the job's own routing.

"From its own routing" is checked, not assumed: the job logs every iteration's router counts (the
leader's ``> routing`` lines); the test folds them onto the hosts itself, runs the run's predictor
(EWMA) over them and prices the decision's circuits with the policy's objective — the journalled
``objective_plan_s`` must come out. The policy is the playbook's (``min_gain_s`` ≥ 0: nothing forces
a change). Skipped where torch's torchrun is not installed beside this Python.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from mfctl.fabric import mapping
from mfctl.fabric.itermodel import region_objective
from mfctl.inventory import load_inventory
from mfctl.runtime.plan import initial_cross_connects, plan_run
from mfctl.runtime.playbook import load_playbook
from support import ROOT, mfctl_cmd, wait_until

TORCHRUN = Path(sys.executable).parent / "torchrun"
pytestmark = pytest.mark.skipif(not TORCHRUN.exists(),
                                reason=f"torch is not installed beside {sys.executable} (pip install torch==2.13.0)")
PLAYBOOK = ROOT / "playbooks" / "moe-torch-mock.yaml"
HOSTS = ["gpu01", "gpu02", "gpu03", "gpu04"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _playbook(tmp_path: Path, iterations: int) -> Path:
    """The shipped playbook with fewer iterations and a free rendezvous port; nothing else changed."""
    doc = yaml.safe_load(PLAYBOOK.read_text())
    doc["inventory"] = str((PLAYBOOK.parent / doc["inventory"]).resolve())
    doc["training"]["iterations"] = iterations
    doc["runtime"]["rdzv_port"] = _free_port()
    p = tmp_path / "pb.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def _procs(env: dict, agents: bool = False) -> list[str]:
    """This run's job ranks (torchrun gave them LOCAL_RANK), or its torchrun agents: every process
    whose environment has this test's MFCTL_STATE_DIR."""
    mine = f"MFCTL_STATE_DIR={env['MFCTL_STATE_DIR']}".encode()
    out = []
    for d in Path("/proc").iterdir():
        try:
            if not d.name.isdigit():
                continue
            penv = (d / "environ").read_bytes().split(b"\0")
            cmd = (d / "cmdline").read_bytes()
            if mine in penv and ((b"torchrun" in cmd) if agents else any(v.startswith(b"LOCAL_RANK=") for v in penv)):
                out.append(cmd.replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            pass
    return out


@pytest.mark.timeout(240)
def test_mfctl_run_rewires_the_mock_ocs_from_the_real_jobs_own_routing(tmp_path, cli_env):
    iterations = 24
    pb_path = _playbook(tmp_path, iterations)
    t0 = time.monotonic()
    r = subprocess.run(mfctl_cmd("run", pb_path, "--json", "--skip-health"), env=cli_env, capture_output=True,
                       text=True, timeout=220)
    wall = time.monotonic() - t0
    assert r.returncode == 0, r.stderr[-3000:]
    s = json.loads(r.stdout)
    assert s["status"] == "ok" and s["iterations"] == iterations == s["iterations_planned"]
    run = Path(s["run_dir"])
    pb = load_playbook(pb_path)
    assert pb.policy.enabled and pb.policy.min_gain_s >= 0 and pb.mock.torchrun == "real"  # no forced change

    # the job's own routing, as its leader logged it, folded by hand: expert e on EP rank e // 2, rank r on host r
    log = (run / "logs" / "gpu01.log").read_text()
    counts = {}
    for line in log.splitlines():
        if line.startswith("> routing "):
            rec = json.loads(line.removeprefix("> routing "))
            counts[rec["iteration"]] = rec["counts"]
    assert sorted(counts) == list(range(1, iterations + 1))
    mats = {}
    for it, per_rank in counts.items():
        B = np.zeros((pb.model.layers, 4, 4))
        for r, layers in enumerate(per_rank):
            for layer, c in layers.items():
                assert sum(c) == 8 * 64 * 2  # the rank's 512 tokens, top-2
                for e, k in enumerate(c):
                    B[int(layer), r, e // 2] += k * pb.model.hidden * pb.model.bytes_per_element
        mats[it] = B
    assert not np.array_equal(mats[1], mats[iterations])  # the routing changed as the job trained

    recs = s["reconfigurations"]
    assert recs and all(x["outcome"] == "applied" for x in recs), recs
    journal = [json.loads(ln) for ln in (run / "journal.jsonl").read_text().splitlines()]
    decisions = {d["iteration"]: d for d in journal if d["op"] == "policy.decision"}
    plan = plan_run(pb, load_inventory(pb.inventory_path()))
    initial_cross_connects(plan, {})  # the seeded random initial topology the run set
    reg = plan.regions["region0"]
    now = mapping.circuit_matrix(reg.circuits, reg.hosts)
    for rc in recs:
        d = decisions[rc["iteration"]]
        pred = None
        for it in range(1, rc["iteration"] + 1):  # the run's predictor over what the job reported
            pred = mats[it] if pred is None else pb.policy.ewma_alpha * mats[it] + (1 - pb.policy.ewma_alpha) * pred
        planned, before = region_objective(pred, np.stack([np.array(d["circuits"]), now]), plan.rates)
        assert float(planned) == pytest.approx(d["objective_plan_s"], rel=1e-9), (rc["iteration"], planned, d)
        assert float(before) == pytest.approx(d["objective_now_s"], rel=1e-9), (rc["iteration"], before, d)
        assert d["gain_s"] - d["cost_s"] > pb.policy.min_gain_s and d["objective_plan_s"] < d["objective_now_s"]
        assert rc["circuits_planned"] == d["circuits"]
        now = np.array(rc["circuits"])  # in force from here on

    # the summary, metrics, report and Prometheus export, as for the simulated runtime
    assert s["iteration_time_s"]["mean"] > 0 and s["tokens_per_s"] > 0 and s["tokens"] == iterations * 4 * 8 * 64
    assert 0 < s["ep_share_on_circuits"] <= 1 and s["ep_inter_server_bytes"] > 0
    env = {**cli_env}
    prom = subprocess.run(mfctl_cmd("metrics", "export", run.name, "--format", "prometheus"), env=env,
                          capture_output=True, text=True, timeout=60)
    assert prom.returncode == 0, prom.stderr
    assert re.search(rf"^mfctl_iterations_total {iterations}(\.0)?$", prom.stdout, re.M)
    assert re.search(rf'^mfctl_reconfigurations_total{{ocs="[^"]*",region="[^"]*"}} {len(recs)}(\.0)?$', prom.stdout,
                     re.M), prom.stdout  # (one region: its series is the whole count)
    rep = subprocess.run(mfctl_cmd("runs", "report", run.name), env=env, capture_output=True, text=True, timeout=120)
    assert rep.returncode == 0 and (run / "report.html").stat().st_size > 1000, rep.stderr
    imp = subprocess.run(mfctl_cmd("runs", "import-log", run / "logs" / "gpu02.log", "--json", "--seq-len", "64"),
                         env=env, capture_output=True, text=True, timeout=60)
    assert imp.returncode == 0, imp.stderr
    assert json.loads(imp.stdout)["iterations"] == iterations
    for h in HOSTS:  # one job process per host said bye, at the last iteration
        assert (run / "logs" / f"{h}.log").read_text().count(f"> done: {iterations} iterations") == 1
    wait_until(lambda: not _procs(cli_env) and not _procs(cli_env, agents=True), timeout=15,
               what="every rank and agent to end")
    print(f"moe-torch-mock, {iterations} iterations, {len(recs)} reconfigurations: {wall:.1f} s wall")


@pytest.mark.timeout(200)
def test_ctrl_c_stops_every_rank_of_the_real_job(tmp_path, cli_env):
    pb = _playbook(tmp_path, 400)
    p = subprocess.Popen(mfctl_cmd("run", pb, "--json", "--skip-health"), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=cli_env)
    runs = Path(cli_env["MFCTL_RUNS_DIR"])
    try:
        def training() -> bool:
            logs = list(runs.glob("*/logs/gpu04.log"))
            return bool(logs) and logs[0].read_text().count(" iteration ") >= 2

        wait_until(training, timeout=150, what="training under way")
        ranks, agents = _procs(cli_env), _procs(cli_env, agents=True)
        assert len(ranks) == 4 and len(agents) == 4, (ranks, agents)
        assert all(str(TORCHRUN) in a for a in agents)  # torch's own torchrun (mock.torchrun: real), not the mock's
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == 130, err[-2000:]
    s = json.loads(out)
    assert s["status"] == "interrupted" and s["error"] == "interrupted by SIGINT (stopped by the operator)"
    assert s["iterations"] < 400  # (the leader's last iteration messages may still be queued at the signal)
    # gone when mfctl run has returned, not some time after (the 4 agents outlived it by 0.5-2 s, re-parented
    # to init): a script's next command finds a clean machine
    assert _procs(cli_env) == [] and _procs(cli_env, agents=True) == []
