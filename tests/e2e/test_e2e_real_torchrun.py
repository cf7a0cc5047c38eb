"""The main job launched by REAL torchrun (torch's ``torch.distributed.run``) over SSH on the mock
testbed (``MFCTL_MOCK_TORCHRUN=real``: each mock host's ``torchrun`` is the venv's), with the
static rendezvous render.py renders (``--master-addr`` the first host = 127.0.0.1 on the mock).

What real torchrun showed (torch 2.13.0 CPU): ``nproc_per_node`` processes per host, every one
with the run's environment — by contract only local rank 0 connects (one runtime client per host,
the controller refuses a second hello); a failed rank makes its agent SIGTERM the other local ranks
and exit 1 with ``failed (exitcode: N) local_rank: L (pid: P) of binary: B``; SIGTERM, SIGINT and
SIGHUP are passed on to every rank and torchrun exits 1 (``SignalException: Process P got signal:
S``); a rendezvous host that does not answer is ``DistNetworkError: The client socket has timed out
after Nms while trying to connect to (ADDR, PORT).`` after ``--rdzv-conf timeout`` (default 600 s).
"""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from mfctl.inventory import load_inventory
from mfctl.mock import torchrun as mock_torchrun
from mfctl.runtime import render
from mfctl.runtime.job import Job
from mfctl.runtime.launcher import torchrun_note
from mfctl.runtime.playbook import load_playbook
from support import ROOT, live_processes, mfctl_cmd, wait_until

TORCHRUN = Path(sys.executable).parent / "torchrun"
pytestmark = pytest.mark.skipif(not os.access(TORCHRUN, os.X_OK),
                                reason=f"torch is not installed beside {sys.executable} (pip install torch==2.13.0)")

PLAYBOOK = ROOT / "playbooks" / "mixtral-torchrun-mock.yaml"
HOSTS = ["gpu01", "gpu02", "gpu03", "gpu04"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _playbook(tmp_path: Path, *, nproc: int, iterations: int, **sections) -> Path:
    """playbooks/mixtral-torchrun-mock.yaml, shorter: a free rendezvous port, no in-run sampling."""
    doc = yaml.safe_load(PLAYBOOK.read_text())
    doc["inventory"] = str((PLAYBOOK.parent / doc["inventory"]).resolve())
    doc["mock"]["time_scale"] = 50
    doc["training"].update(iterations=iterations, phase_iterations=3)
    doc["runtime"].update(nproc_per_node=nproc, rdzv_port=_free_port(), health_interval_s=0)
    for k, v in sections.items():
        doc.setdefault(k, {}).update(v)
    p = tmp_path / "pb.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def _ranks() -> list[str]:
    """Every process of this test's runs that is a rank or a torchrun agent (on any mock host)."""
    return live_processes(b"mfctl-simrt", b"mfctl.mock.simruntime", b"torchrun")


def _journal(run_dir) -> list[dict]:
    return [json.loads(ln) for ln in (Path(run_dir) / "journal.jsonl").read_text().splitlines()]


@pytest.fixture
def real_torchrun(monkeypatch):
    monkeypatch.setenv("MFCTL_MOCK_TORCHRUN", "real")
    assert mock_torchrun.command() == [str(TORCHRUN)]


def test_the_mock_torchrun_gives_the_ranks_real_torchruns_environment(tmp_path):
    """The same script under both (2 processes, static rendezvous): the same variables, values
    equal but for the per-run temporary error file."""
    dump = tmp_path / "dump.sh"
    dump.write_text("#!/bin/sh\nenv -0 > \"$OUT.$LOCAL_RANK\"\n")
    dump.chmod(0o755)
    args = ["--nnodes", "1", "--nproc-per-node", "2", "--node-rank", "0", "--master-addr", "127.0.0.1",
            "--master-port", str(_free_port()), "--rdzv-conf", "timeout=20", "--no-python", str(dump)]
    envs = {}
    for kind in ("real", "mock"):
        env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"} | {"OUT": str(tmp_path / kind)}
        r = subprocess.run([*mock_torchrun.command(kind), *args], env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr[-2000:]
        assert "Setting OMP_NUM_THREADS environment variable for each process to be 1" in r.stderr
        envs[kind] = [dict(kv.split("=", 1) for kv in (tmp_path / f"{kind}.{lr}").read_text().split("\0") if kv)
                      for lr in (0, 1)]
    for lr in (0, 1):
        real, mock = envs["real"][lr], envs["mock"][lr]
        assert real.keys() == mock.keys()
        assert {k for k in real if real[k] != mock[k]} == {"TORCHELASTIC_ERROR_FILE", "OUT"}  # OUT: the test's own
        assert real["TORCHELASTIC_ERROR_FILE"].endswith(f"/attempt_0/{lr}/error.json")
        assert mock["TORCHELASTIC_ERROR_FILE"].endswith(f"/attempt_0/{lr}/error.json")
        assert (real["RANK"], real["LOCAL_RANK"], real["WORLD_SIZE"], real["LOCAL_WORLD_SIZE"], real["GROUP_RANK"],
                real["TORCHELASTIC_RUN_ID"], real["OMP_NUM_THREADS"]) == (str(lr), str(lr), "2", "2", "0", "none", "1")


def test_main_job_with_real_torchrun_8_ranks_per_host_one_client_each(tmp_path, real_torchrun):
    """nproc_per_node 8 (the shipped value): 32 ranks, 4 hellos, 6 iterations per host, nothing left."""
    t0 = time.monotonic()
    s = Job(load_playbook(_playbook(tmp_path, nproc=8, iterations=6)), runs_dir=str(tmp_path / "runs"),
            skip_health=True).run()
    wall = time.monotonic() - t0
    assert s["exit_code"] == 0 and s["status"] == "ok", s["error"]
    assert s["iterations"] == 6 == s["iterations_planned"]
    run = Path(s["run_dir"])
    log = (run / "mfctl.log").read_text()
    assert "refused" not in log and "already connected" not in log  # no local rank > 0 said hello
    for h in HOSTS:
        out = (run / "logs" / f"{h}.log").read_text()
        assert out.count(f"> mfctl simulated runtime on {h}:") == 1  # one runtime per host, not 8
        assert sum(" iteration " in ln for ln in out.splitlines()) == 6
        assert "Setting OMP_NUM_THREADS" in out  # real torchrun's banner: it ran 8 processes
    launches = [r for r in _journal(run) if r["op"] == "runtime.launch"]
    assert [r["host"] for r in launches] == HOSTS
    assert all(f"--nproc-per-node 8 --node-rank {i} --master-addr 127.0.0.1" in r["command"]
               and "--rdzv-conf timeout=25" in r["command"] for i, r in enumerate(launches))
    stopped = [r for r in _journal(run) if r["op"] == "runtime.stopped"][-1]["workers"]
    assert {h: w["rc"] for h, w in stopped.items()} == dict.fromkeys(HOSTS, 0)
    assert _ranks() == []
    print(f"real torchrun, 4 hosts x 8 ranks, 6 iterations: {wall:.1f} s wall")


def test_a_crashed_rank_names_the_host_and_torchruns_exit(tmp_path, real_torchrun):
    pb = _playbook(tmp_path, nproc=2, iterations=40, mock={"crash_host": "gpu03", "crash_at_iteration": 3})
    s = Job(load_playbook(pb), runs_dir=str(tmp_path / "runs"), skip_health=True).run()
    assert s["exit_code"] == 1 and s["status"] == "failed"
    # torchrun's exit (1) when it has ended within the run's wait for it, else its last word alone
    assert re.fullmatch(r"runtime on gpu03 disconnected before finishing: (torchrun exited 1: )?local rank 0 "
                        r"\(pid \d+\) of mfctl-simrt failed with exit code 17( \(its launcher still ending\))? "
                        r"\(see \S+/logs/gpu03\.log\)", s["error"]), s["error"]
    out = (Path(s["run_dir"]) / "logs" / "gpu03.log").read_text()
    assert "> simulated worker crash at iteration 3" in out
    assert re.search(r"\] failed \(exitcode: 17\) local_rank: 0 \(pid: \d+\) of binary: mfctl-simrt\n", out)
    wait_until(lambda: not _ranks(), timeout=15, what="every rank and agent to end")


def test_ctrl_c_ends_every_rank_on_every_host_and_says_sigint(tmp_path, cli_env):
    cli_env["MFCTL_MOCK_TORCHRUN"] = "real"
    pb = _playbook(tmp_path, nproc=2, iterations=400)
    p = subprocess.Popen(mfctl_cmd("run", pb, "--json", "--skip-health"), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=cli_env)
    runs = Path(cli_env["MFCTL_RUNS_DIR"])
    mine = f"MFCTL_STATE_DIR={cli_env['MFCTL_STATE_DIR']}".encode()

    def ranks(agents: bool = False) -> list[str]:
        """This run's ranks (torchrun gave them LOCAL_RANK), or its torchrun agents."""
        out = []
        for d in Path("/proc").iterdir():
            try:
                if not d.name.isdigit():
                    continue
                env = (d / "environ").read_bytes().split(b"\0")
                if mine in env and (b"torchrun" in (d / "cmdline").read_bytes() if agents
                                    else any(v.startswith(b"LOCAL_RANK=") for v in env)):
                    out.append(d.name)
            except OSError:
                pass
        return out

    def training() -> bool:
        logs = list(runs.glob("*/logs/gpu04.log"))
        return bool(logs) and logs[0].read_text().count(" iteration ") >= 2

    wait_until(training, timeout=60, what="training under way")
    assert len(ranks()) == 8 and len(ranks(agents=True)) == 4  # 4 hosts x 2 local ranks, 4 agents
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, err[-2000:]
    s = json.loads(out)
    assert s["status"] == "interrupted" and s["error"] == "interrupted by SIGINT (stopped by the operator)"
    assert s["iterations"] < 400  # (the leader's last iterations may still be queued at the signal)
    # gone when mfctl run has returned, not some time after (the agents outlived it by 0.5-2 s, re-parented
    # to init): a script's next command finds a clean machine
    assert ranks() == [] and ranks(agents=True) == []


def test_the_launcher_reads_real_torchruns_last_words():
    """Lines real torchrun 2.13.0 printed (captured on this machine, 2026-12-01): a failed worker,
    a signal to the agent, an unreachable rendezvous host; and what the run's error says of each."""
    cases = {
        "E1201 14:01:46.833000 4807 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 17) "
        "local_rank: 0 (pid: 4810) of binary: mfctl-simrt": "local rank 0 (pid 4810) of mfctl-simrt failed with exit code 17",
        "E1201 14:01:46.833000 4807 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: -9) "
        "local_rank: 5 (pid: 4811) of binary: ./train.py": "local rank 5 (pid 4811) of ./train.py was killed by SIGKILL",
        "torch.distributed.elastic.multiprocessing.api.SignalException: Process 5485 got signal: 1": "torchrun got SIGHUP",
        "torch.distributed.DistNetworkError: The client socket has timed out after 5000ms while trying to connect to "
        "(127.0.0.1, 29614).": "rendezvous failed: DistNetworkError: The client socket has timed out after 5000ms "
                               "while trying to connect to (127.0.0.1, 29614).",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ": None,
        "  exitcode  : 17 (pid: 4810)": None,
    }
    assert {line: torchrun_note(line) for line in cases} == cases


def test_real_torchrun_takes_the_rendered_launch_and_names_an_unreachable_rendezvous(tmp_path, monkeypatch):
    """gpu02's launch as render.py renders it for the prototype inventory with gpu01 (the
    rendezvous host) at 127.0.0.1 and a port nothing listens on, run by real torchrun: it gives up after
    the rendered ``--rdzv-conf timeout`` (2 s here, 25 s in a run; torch's default is 600 s), and
    the launcher's reading of its output is what the run's error will say."""
    monkeypatch.setattr(render, "RDZV_TIMEOUT_S", 2)
    pb = load_playbook(PLAYBOOK)
    pb.runtime.rdzv_port = port = _free_port()
    inv = load_inventory(pb.inventory_path())
    inv.hosts[0].ssh.address = "127.0.0.1"  # connection refused, retried until the timeout: no traffic leaves the host
    launch = render.render_hosts(pb, inv, "127.0.0.1:9", "t0ken")[1]
    assert launch.argv[:13] == ["torchrun", "--nnodes", "4", "--nproc-per-node", "8", "--node-rank", "1",
                                "--master-addr", "127.0.0.1", "--master-port", str(port), "--rdzv-conf", "timeout=2"]
    t0 = time.monotonic()
    r = subprocess.run([str(TORCHRUN), *launch.argv[1:]], capture_output=True, text=True, timeout=60,
                       env={**os.environ, **launch.env})
    assert r.returncode == 1 and time.monotonic() - t0 < 30
    notes = [n for n in map(torchrun_note, (r.stdout + r.stderr).splitlines()) if n]
    assert notes == ["rendezvous failed: DistNetworkError: The client socket has timed out after 2000ms while trying "
                     f"to connect to (127.0.0.1, {port})."]


def test_real_torchrun_takes_the_rendered_slurm_launch_and_gives_up_joining_after_the_rendered_timeout(tmp_path, monkeypatch):
    """The torchrun of the sbatch script render.py writes (c10d rendezvous), run by real torchrun as
    one of the job's 4 nodes with the rendezvous on this host (127.0.0.1, a free port): no other
    node ever joins, and it gives up after the rendered ``join_timeout`` (2 s here, 25 s in a run;
    torch's default is 600 s) with torch's own error, not after ten minutes."""
    import shlex

    monkeypatch.setattr(render, "RDZV_TIMEOUT_S", 2)
    pb = load_playbook(PLAYBOOK)
    pb.runtime.rdzv_port = _free_port()
    script = render.render_slurm(pb, load_inventory(pb.inventory_path()), "127.0.0.1:9", "t0ken", "run1")
    srun = shlex.split(next(line for line in script.splitlines() if line.startswith("srun ")))
    argv = srun[srun.index("torchrun"):]
    assert argv[argv.index("--rdzv-conf") + 1] == "join_timeout=2,read_timeout=2"
    argv[argv.index("--rdzv-endpoint") + 1] = f"127.0.0.1:{pb.runtime.rdzv_port}"  # "${head_addr:-$head}" in the job
    # timed from torch's own "Rendezvous'ing worker group" line: importing torch on a loaded machine is not the point
    p = subprocess.Popen([str(TORCHRUN), *argv[1:]], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "MFCTL_RUN_TOKEN_FILE": str(tmp_path / "token"), "LOGLEVEL": "INFO"}, cwd=tmp_path)
    lines, t0 = [], None
    try:
        for line in p.stderr:
            lines.append(line)
            if t0 is None and "Rendezvous'ing worker group" in line:
                t0 = time.monotonic()
        rc = p.wait(timeout=120)
    finally:
        p.kill()
    took = time.monotonic() - t0 if t0 is not None else None
    text = "".join(lines)
    assert rc == 1 and took is not None and took < 15, (took, text[-2000:])
    assert "RendezvousTimeoutError" in text and "'join_timeout': '2', 'read_timeout': '2'" in text
