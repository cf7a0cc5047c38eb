"""The main job through a REAL Slurm 22.05 cluster (tests/peers_slurm.py: munged, slurmctld,
four ``slurmd -N gpu01..gpu04`` on 127.0.0.1, with and without slurmdbd accounting), submitted
over a real OpenSSH sshd standing for a login node that is not a GPU host; the job's tasks run
real ``torchrun`` (.venv/bin) starting the simulated runtime, and the session's mock testbed
serves the GPU hosts' health, links and OCS. Skips where root, Slurm, munge or sshd are missing."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from peers_slurm import login_node

from mfctl.mock import openssh
from mfctl.runtime.job import Job
from mfctl.runtime.playbook import load_playbook
from mfctl.runtime.slurm import parse_scontrol_job
from support import DATA, mfctl_cmd, wait_until

SHORT = DATA / "playbooks" / "short.yaml"
TIME_SCALE = 50
VENV_BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def slurm_site(real_slurm, session_mock, tmp_path_factory):
    """``slurm_site(accounting=False, host_order=None, name="", time_scale=TIME_SCALE) -> (cluster,
    inventory path)``: the session mock's inventory (hosts in ``host_order``) plus a login host —
    a real sshd with the cluster's SLURM_CONF and .venv/bin on its PATH — that is only the submit
    host. ``name``: a cluster (and login node) of the test's own."""
    if openssh.unavailable_reason():
        pytest.skip(openssh.unavailable_reason())
    made: dict[tuple, tuple] = {}
    servers = []

    def get(accounting: bool = False, host_order=None, name: str = "", time_scale: float = TIME_SCALE):
        cluster = real_slurm(accounting, name)
        mock = session_mock(time_scale)
        key = (accounting, name, time_scale)
        if key not in made:
            d = tmp_path_factory.mktemp(f"login{'-acct' if accounting else ''}{f'-{name}' if name else ''}")
            inv = yaml.safe_load(Path(mock.inventory).read_text())
            key_file = inv["hosts"][0]["ssh"]["key_file"]
            pub = subprocess.run(["ssh-keygen", "-y", "-f", key_file], capture_output=True, text=True, check=True,
                                 timeout=10).stdout
            sshd = login_node(cluster, d / "sshd", [pub], path_dirs=[VENV_BIN])
            servers.append(sshd)
            kh = d / "known_hosts"
            kh.write_text(Path(inv["ssh"]["known_hosts"]).read_text() + sshd.known_hosts_line("ecdsa") + "\n")
            inv["ssh"]["known_hosts"] = str(kh)
            inv["login_hosts"] = [{"name": "login", "description": "Slurm login node (real sshd)",
                                   "ssh": {"address": "127.0.0.1", "port": sshd.port, "user": "root",
                                           "key_file": key_file, "agent": False}}]
            made[key] = (cluster, d, inv)
        cluster, d, inv = made[key]
        doc = dict(inv)
        if host_order:
            by = {h["name"]: h for h in inv["hosts"]}
            doc["hosts"] = [by[n] for n in host_order]
        p = d / f"inventory-{'-'.join(host_order or ['default'])}.yaml"
        p.write_text(yaml.safe_dump(doc))
        return cluster, p

    yield get
    for s in servers:
        s.close()


def _playbook(tmp_path, time_scale: float = TIME_SCALE, **changes) -> Path:
    doc = yaml.safe_load(SHORT.read_text())
    doc["inventory"] = str((SHORT.parent / doc["inventory"]).resolve())
    doc["mock"] = {"enabled": True, "time_scale": time_scale}
    doc["training"]["iterations"] = 6
    doc["runtime"] = {"launcher": "slurm", "script": "mfctl-simrt", "script_mode": "executable", "nproc_per_node": 1,
                      "rdzv_port": _free_port(), "health_interval_s": 0,
                      "slurm": {"submit_host": "login", "partition": "gpu", "time_limit": "00:10:00",
                                "output_dir": str(tmp_path / "shared"), "queue_timeout_s": 60}}
    for k, v in changes.items():
        if isinstance(v, dict):
            for k2, v2 in v.items():
                if isinstance(v2, dict):
                    doc.setdefault(k, {}).setdefault(k2, {}).update(v2)
                else:
                    doc.setdefault(k, {})[k2] = v2
        else:
            doc[k] = v
    p = tmp_path / "pb.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def _journal(run_dir) -> list[dict]:
    return [json.loads(ln) for ln in (Path(run_dir) / "journal.jsonl").read_text().splitlines()]


def _slurm_ops(run_dir) -> list[tuple]:
    return [(r["op"], r.get("state")) for r in _journal(run_dir) if r["op"].startswith("runtime.slurm")]


def _assert_nothing_left(cluster, timeout: float = 10.0) -> None:
    left: list[str] = []

    def gone() -> bool:
        left[:] = _job_processes(cluster)
        return not left

    try:
        wait_until(gone, timeout=timeout, what="the job's processes to end")
    except AssertionError:
        raise AssertionError(f"processes left on the cluster: {left}") from None


def _job_processes(cluster) -> list[str]:
    """Command lines of the cluster's processes beside its daemons: slurmstepd, batch scripts,
    srun, torchrun, runtimes (what carries the cluster's SLURM_CONF)."""
    daemons = {p.pid for p in cluster.procs.values()}
    out = []
    for pid in cluster.pids():
        if pid not in daemons:
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            except OSError:
                continue
            if cmd != "slurmctld: slurmscriptd":  # slurmctld's own helper daemon
                out.append(cmd)
    return out


@pytest.fixture(scope="module")
def time_limit_run(slurm_site, tmp_path_factory):
    """A ``mfctl run`` whose job meets its time limit: Slurm's limits are whole minutes, checked
    every 30 s (seen: TIMEOUT 60-90 s after the start), so it runs in the background on a cluster,
    a login node and a mock (time scale 2: few iterations, little CPU) of its own while the module's
    other tests run, and :func:`test_a_time_limit_kill_is_named_timeout` collects it. ``(process,
    env, cluster)``."""
    cluster, inv = slurm_site(name="timelimit", time_scale=2)
    d = tmp_path_factory.mktemp("timelimit")
    env = {**os.environ, "MFCTL_STATE_DIR": str(d / "state"), "MFCTL_RUNS_DIR": str(d / "runs"),
           "MFCTL_LOG_FILE": str(d / "mfctl.log"), "MFCTL_LOCK_DIR": str(d / "locks")}
    pb = _playbook(d, time_scale=2, training={"iterations": 5000}, policy={"enabled": False},
                   runtime={"slurm": {"time_limit": "00:01:00"}})
    p = subprocess.Popen(mfctl_cmd("run", pb, "-i", inv, "--json"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env)
    yield p, env, cluster
    if p.poll() is None:  # the collecting test was not selected: stop it as an operator would
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=120)


@pytest.mark.parametrize("accounting", [False, True], ids=["no-accounting", "slurmdbd"])
def test_real_slurm_cluster_is_on_loopback_only(real_slurm, time_limit_run, accounting):
    """(Also starts the module's background time-limit run, see :func:`time_limit_run`.)"""
    cluster = real_slurm(accounting)
    assert cluster.startup_s is not None and cluster.startup_s < 15, cluster.startup_s
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, timeout=10).stdout
    mine = [ln for ln in out.splitlines() if any(f"pid={p}," in ln for p in cluster.pids())]
    assert len(mine) == (6 if accounting else 5), out  # slurmctld + four slurmd (+ slurmdbd; mariadbd: a socket)
    assert all(ln.split()[3].startswith("127.0.0.1:") for ln in mine), mine
    r = cluster.run("sinfo", "-h", "-N", "-o", "%N %P %t")
    assert r.stdout.split("\n")[:4] == [f"gpu0{i} gpu* idle" for i in range(1, 5)]


@pytest.mark.parametrize("accounting", [False, True], ids=["no-accounting", "slurmdbd"])
def test_main_job_through_real_slurm(slurm_site, tmp_path, accounting):
    cluster, inv = slurm_site(accounting, host_order=["gpu03", "gpu01", "gpu04", "gpu02"])
    s = Job(load_playbook(_playbook(tmp_path)), inventory_override=str(inv), runs_dir=str(tmp_path / "runs")).run()
    assert s["exit_code"] == 0, s["error"]
    assert s["status"] == "ok" and s["iterations"] == 6 and s["launcher"] == "slurm"
    run = Path(s["run_dir"])
    for h in ("gpu01", "gpu02", "gpu03", "gpu04"):  # each host's log holds that host's runtime, whatever the order
        text = (run / "logs" / f"{h}.log").read_text()
        assert f"mfctl simulated runtime on {h}:" in text, text[:500]
        assert text.count("mfctl simulated runtime on ") == 1 and text.count("] iteration ") == 6
    ops = _slurm_ops(run)
    assert ops[0] == ("runtime.slurm.submitted", None)
    assert ops[-1] == ("runtime.slurm.state", "COMPLETED")
    assert not any(op == "runtime.slurm.cancel" for op, _ in ops)  # it ended by itself, seen without sacct
    stopped = [r for r in _journal(run) if r["op"] == "runtime.stopped"][0]["workers"]
    assert stopped == {h: {"rc": 0, "error": None} for h in ("gpu03", "gpu01", "gpu04", "gpu02")}
    job = s["slurm_job"]
    show = cluster.run("scontrol", "-o", "show", "job", str(job)).stdout
    assert "JobState=COMPLETED" in show and "ExitCode=0:0" in show and "NodeList=gpu[01-04]" in show
    acct = cluster.run("sacct", "-n", "-P", "-X", "-j", str(job), "-o", "State,ExitCode")
    if accounting:
        assert (acct.returncode, acct.stdout) == (0, "COMPLETED|0:0\n")
    else:
        assert (acct.returncode, acct.stderr) == (1, "Slurm accounting storage is disabled\n")
    _assert_nothing_left(cluster)


def test_a_crashed_host_fails_the_job_and_is_named(slurm_site, tmp_path):
    cluster, inv = slurm_site()
    pb = _playbook(tmp_path, mock={"crash_host": "gpu02", "crash_at_iteration": 3}, training={"iterations": 30})
    s = Job(load_playbook(pb), inventory_override=str(inv), runs_dir=str(tmp_path / "runs")).run()
    run, job = Path(s["run_dir"]), s["slurm_job"]
    assert (s["exit_code"], s["status"]) == (1, "failed")
    # the runtime's connection drops first; the launcher's word on gpu02 follows within LOST_WAIT_S
    assert s["error"] == (f"runtime on gpu02 disconnected before finishing: Slurm job {job} FAILED: a task or the batch "
                          f"script exited non-zero; reason NonZeroExitCode; srun: task 1 on gpu02: Exited with exit "
                          f"code 1 (see {run / 'logs' / 'gpu02.log'})"), s["error"]
    text = (run / "logs" / "gpu02.log").read_text()
    assert "> simulated worker crash at iteration 3" in text and "mfctl simulated runtime on gpu02:" in text
    assert "simulated worker crash" not in (run / "logs" / "gpu01.log").read_text()
    assert _slurm_ops(run)[-1] == ("runtime.slurm.state", "FAILED")
    show = cluster.run("scontrol", "-o", "show", "job", str(job)).stdout
    assert "JobState=FAILED Reason=NonZeroExitCode" in show
    _assert_nothing_left(cluster)


def test_a_job_that_stays_queued_is_cancelled_at_the_queue_timeout(slurm_site, tmp_path):
    cluster, inv = slurm_site()
    blocker = cluster.run("sbatch", "--parsable", "-N4", "--gpus-per-node=8", "-o", "/dev/null", "--wrap",
                          "sleep 120", check=True).stdout.strip()
    try:
        wait_until(lambda: "JobState=RUNNING" in cluster.run("scontrol", "-o", "show", "job", blocker).stdout,
                   what="the blocking job to run")
        pb = _playbook(tmp_path, runtime={"slurm": {"queue_timeout_s": 3}})
        s = Job(load_playbook(pb), inventory_override=str(inv), runs_dir=str(tmp_path / "runs")).run()
    finally:
        cluster.run("scancel", blocker)
    job = s["slurm_job"]
    assert (s["exit_code"], s["status"]) == (1, "failed")
    assert s["error"] == f"Slurm job {job} still PENDING after 3 s in the queue (Resources)"
    assert s["iterations"] == 0
    ops = _slurm_ops(s["run_dir"])
    assert ("runtime.slurm.cancel", None) in ops and ops[-1] == ("runtime.slurm.state", "CANCELLED")
    show = cluster.run("scontrol", "-o", "show", "job", str(job)).stdout
    assert "JobState=CANCELLED" in show and "NodeList= " in show  # it never ran
    _assert_nothing_left(cluster)


def test_ctrl_c_cancels_the_real_job_and_leaves_nothing(slurm_site, tmp_path, cli_env):
    cluster, inv = slurm_site()
    pb = _playbook(tmp_path, training={"iterations": 500})
    p = subprocess.Popen(mfctl_cmd("run", pb, "-i", inv, "--json"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=cli_env)
    runs = Path(cli_env["MFCTL_RUNS_DIR"])
    try:
        wait_until(lambda: any(f.read_text().count("] iteration ") >= 2 for f in runs.glob("*/logs/gpu01.log")),
                   timeout=60, what="two iterations on gpu01")
    except AssertionError:
        p.kill()
        raise AssertionError(f"no iterations: {p.communicate(timeout=30)[1][-3000:]}") from None
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, err[-2000:]
    s = json.loads(out)
    assert s["status"] == "interrupted" and s["error"].startswith("interrupted by SIGINT")
    ops = _slurm_ops(s["run_dir"])
    assert ("runtime.slurm.cancel", None) in ops and ops[-1] == ("runtime.slurm.state", "CANCELLED")
    cancel = [r for r in _journal(s["run_dir"]) if r["op"] == "runtime.slurm.cancel"][0]
    assert (cancel["rc"], cancel["error"]) == (0, None)
    show = cluster.run("scontrol", "-o", "show", "job", str(s["slurm_job"])).stdout
    assert "JobState=CANCELLED" in show and re.search(r" ExitCode=(0:15|143:0) ", show)  # (see the agreement test)
    stopped = [r for r in _journal(s["run_dir"]) if r["op"] == "runtime.stopped"][0]["workers"]
    assert all(w["error"].startswith(f"Slurm job {s['slurm_job']} CANCELLED: cancelled (scancel") for w in stopped.values())
    _assert_nothing_left(cluster)


def test_a_time_limit_kill_is_named_timeout(time_limit_run):
    p, env, cluster = time_limit_run
    out, err = p.communicate(timeout=150)
    assert p.returncode == 1, err[-3000:]
    s = json.loads(out)
    job, run = s["slurm_job"], Path(s["run_dir"])
    assert s["status"] == "failed" and s["iterations"] >= 1
    assert f"Slurm job {job} TIMEOUT: killed at its time limit (00:01:00)" in s["error"], s["error"]
    assert re.fullmatch(rf"runtime on (gpu0[1-4]) (disconnected before finishing: |exited \()Slurm job {job} TIMEOUT: "
                        rf"killed at its time limit \(00:01:00\).*", s["error"]), s["error"]
    raw = (run / "logs" / f"slurm-{job}.log").read_text()
    assert re.search(rf"slurmstepd-gpu01: error: \*\*\* JOB {job} ON gpu01 CANCELLED AT \S+ DUE TO TIME LIMIT \*\*\*", raw)
    assert _slurm_ops(run)[-1] == ("runtime.slurm.state", "TIMEOUT")
    show = cluster.run("scontrol", "-o", "show", "job", str(job)).stdout
    assert "JobState=TIMEOUT Reason=TimeLimit" in show and "ExitCode=0:15" in show
    _assert_nothing_left(cluster)


# --- the mock's Slurm and the real one against the same expectations ------------------------------
@pytest.fixture(params=["mock", "real"])
def slurm_cli(request, real_slurm, session_mock):
    """``run(argv) -> (rc, stdout, stderr)`` of a Slurm client command: over SSH on the session
    mock's gpu01 (its mock Slurm), or on this machine against the real cluster with accounting."""
    if request.param == "real":
        cluster = real_slurm(accounting=True)

        def run(argv):
            r = cluster.run(*argv)
            return r.returncode, r.stdout, r.stderr
        yield run
        return
    from mfctl.inventory import load_inventory
    from mfctl.transport.ssh import SSHPool, targets_from_inventory

    with SSHPool(targets_from_inventory(load_inventory(session_mock(TIME_SCALE).inventory))) as pool:
        def run_mock(argv):
            r = pool.run("gpu01", argv)
            return r.rc, r.stdout, r.stderr
        yield run_mock


def test_mock_and_real_slurm_agree(slurm_cli, tmp_path):
    run = slurm_cli

    def sb(*args) -> str:
        rc, out, err = run(["sbatch", "--parsable", "-o", str(tmp_path / "out-%j"), *args])
        assert rc == 0, err
        return out.strip()

    def show(job) -> dict:
        rc, out, err = run(["scontrol", "-o", "show", "job", job])
        assert rc == 0, err
        return parse_scontrol_job(out)

    def state_is(job, want):
        return wait_until(lambda: show(job)["JobState"] == want, timeout=30, what=f"job {job} {want}")

    a = sb("-N4", "--gpus-per-node=8", "--wrap", "sleep 60")
    assert (show(a)["JobState"], show(a)["Reason"]) == ("PENDING", "None")  # until the scheduler's pass
    state_is(a, "RUNNING")
    assert show(a)["NodeList"] == "gpu[01-04]"
    b, c = sb("-N4", "--gpus-per-node=8", "--wrap", "true"), sb("-N4", "--gpus-per-node=8", "--wrap", "true")
    wait_until(lambda: run(["squeue", "-h", "-j", f"{b},{c}", "-o", "%i %T %r"])[1]
               == f"{b} PENDING Resources\n{c} PENDING Priority\n", what="Resources, then Priority")
    assert run(["scancel", a]) == (0, "", "")
    state_is(a, "CANCELLED")
    # the batch shell killed by scancel's SIGTERM (0:15), or its child first and the shell exiting
    # 143 (143:0): real 22.05 gave either (proctrack/linuxproc signals the job's processes one by one)
    assert show(a)["ExitCode"] in ("0:15", "143:0")
    state_is(c, "COMPLETED")
    assert run(["squeue", "-h", "-j", b, "-o", "%T"]) == (0, "", "")  # a finished job leaves squeue's default view
    assert run(["squeue", "-h", "-t", "all", "-j", b, "-o", "%i %T"]) == (0, f"{b} COMPLETED\n", "")
    assert run(["scancel", b]) == (0, "", "")  # finished: silent
    assert run(["scancel", "99999"]) == (0, "", "")  # unknown: silent
    # slurmdbd learns a job's end from slurmctld a moment after scontrol says it (seen: RUNNING|0:0 still)
    sacct = ["sacct", "-n", "-P", "-X", "-o", "JobID,State,ExitCode", "-j"]
    settled = ("RUNNING", "PENDING", "COMPLETING")
    wait_until(lambda: not any(w in run([*sacct, f"{a},{b}"])[1] for w in settled), timeout=15, what="sacct to settle")
    assert run([*sacct, f"{a},{b}"]) == (0, f"{a}|CANCELLED by 0|0:0\n{b}|COMPLETED|0:0\n", "")
    e = sb("-N2", "--wrap", "srun --label --kill-on-bad-exit=1 sh -c "
                            "'if [ $SLURM_PROCID = 1 ]; then sleep 0.5; exit 3; fi; sleep 30'")
    state_is(e, "FAILED")
    assert (show(e)["Reason"], show(e)["ExitCode"]) == ("NonZeroExitCode", "143:0")
    wait_until(lambda: not any(w in run([*sacct, e])[1] for w in settled), timeout=15, what="sacct to settle")
    assert run([*sacct, e]) == (0, f"{e}|FAILED|15:0\n", "")
    text = (tmp_path / f"out-{e}").read_text()
    assert "srun: error: gpu02: task 1: Exited with exit code 3\n" in text
    assert re.search(rf"0: slurmstepd-gpu01: error: \*\*\* STEP {e}\.0 ON gpu01 CANCELLED AT \S+ \*\*\*", text)
    f = sb("-N", "9", "--wrap", "true")  # more nodes than the partition: accepted, never runs
    wait_until(lambda: run(["squeue", "-h", "-j", f, "-o", "%T %r"])[1] == "PENDING PartitionConfig\n",
               what="PENDING PartitionConfig")
    run(["scancel", f])
    assert run(["sbatch", "-p", "nosuch", "--wrap", "true"]) == (
        1, "", "sbatch: error: invalid partition specified: nosuch\n"
               "sbatch: error: Batch job submission failed: Invalid partition name specified\n")
    assert run(["sbatch", "-w", "gpu09", "--wrap", "true"]) == (
        1, "", "sbatch: error: Batch job submission failed: Invalid node name specified\n")
    assert run(["sbatch", "--bogus", "--wrap", "true"]) == (
        255, "", "sbatch: unrecognized option '--bogus'\nTry \"sbatch --help\" for more information\n")
    assert run(["scontrol", "-o", "show", "job", "99999"]) == (1, "", "slurm_load_jobs error: Invalid job id specified\n")
