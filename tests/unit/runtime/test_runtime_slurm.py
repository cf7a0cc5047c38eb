"""Launching through Slurm and torchrun: the client's parsers, the mock Slurm cluster over
real SSH, and whole runs (`runtime.launcher: slurm` and `ssh`) that end — normally, on a
crashed host, on Ctrl-C — with no process left on any mock host."""

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from mfctl import mockctl
from mfctl.errors import ConfigError, ParseError
from mfctl.inventory import load_inventory
from mfctl.runtime.job import Job
from mfctl.runtime.playbook import load_playbook
from mfctl.runtime.slurm import (
    SlurmLaunch,
    describe_end,
    parse_exit_code,
    parse_sacct,
    parse_sbatch,
    parse_scontrol_job,
    parse_squeue_state,
)
from mfctl.transport.ssh import SSHPool, targets_from_inventory
from support import DATA, PROTOTYPE, live_processes, mfctl_cmd, wait_until

SHORT = DATA / "playbooks" / "short.yaml"


def _leftovers(extra: bytes | None = None) -> list[str]:
    """Launch processes still alive here (= on any mock host): simulated runtimes, mock
    srun/torchrun, batch scripts (and ``extra``)."""
    return live_processes(b"mfctl.mock.simruntime", b"mfctl.mock.slurmshim", b"slurm-spool/job", extra)


def _nothing_left(timeout=10.0, extra: bytes | None = None) -> bool:
    deadline = time.monotonic() + timeout
    while _leftovers(extra) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not _leftovers(extra)


def _playbook(tmp_path, launcher="slurm", **changes) -> Path:
    doc = yaml.safe_load(SHORT.read_text())
    doc["inventory"] = str((SHORT.parent / doc["inventory"]).resolve())
    doc["runtime"] = {"launcher": launcher, "script": "mfctl-simrt", "script_mode": "executable", "health_interval_s": 0}
    for k, v in changes.items():
        doc.setdefault(k, {}).update(v)
    p = tmp_path / "pb.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


# --- parsers ------------------------------------------------------------------------------
def test_sbatch_squeue_sacct_parsers():
    assert parse_sbatch("4242\n") == 4242
    assert parse_sbatch("4242;cluster-a\n") == 4242
    assert parse_sbatch("Submitted batch job 977\n") == 977
    with pytest.raises(ParseError, match="sbatch"):
        parse_sbatch("sbatch: error: Batch job submission failed: Invalid account\n")
    assert parse_squeue_state("RUNNING None\n") == "RUNNING"
    assert parse_squeue_state("PENDING Resources\n") == "PENDING"
    assert parse_squeue_state("\n") is None
    with pytest.raises(ParseError, match="squeue"):
        parse_squeue_state("slurm_load_jobs error: Invalid job id specified\n")
    assert parse_sacct("COMPLETED|0:0\n") == ("COMPLETED", 0, 0)
    assert parse_sacct("CANCELLED by 1000|0:15\n") == ("CANCELLED", 0, 15)
    assert parse_sacct("FAILED|17:0\n") == ("FAILED", 17, 0)
    with pytest.raises(ParseError, match="sacct.*line 1"):
        parse_sacct("JobID|State\n")


# `scontrol -o show job 2` from a real Slurm 22.05.8 cluster (tests/peers_slurm.py), a cancelled job
REAL_SHOW_JOB = (
    "JobId=2 JobName=wrap UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901758 Nice=0 Account=root "
    "QOS=normal JobState=CANCELLED Reason=None Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 "
    "ExitCode=0:15 RunTime=00:00:02 TimeLimit=00:01:00 TimeMin=N/A SubmitTime=2026-12-01T14:03:33 "
    "EligibleTime=2026-12-01T14:03:33 AccrueTime=2026-12-01T14:03:33 StartTime=2026-12-01T14:03:34 "
    "EndTime=2026-12-01T14:03:36 Deadline=N/A SuspendTime=None SecsPreSuspend=0 LastSchedEval=2026-12-01T14:03:34 "
    "Scheduler=Main Partition=gpu AllocNode:Sid=localhost:3081 ReqNodeList=(null) ExcNodeList=(null) "
    "NodeList=gpu[01-04] BatchHost=gpu01 NumNodes=4 NumCPUs=4 NumTasks=4 CPUs/Task=1 ReqB:S:C:T=0:0:*:* "
    "TRES=cpu=4,node=4,billing=4 Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=* MinCPUsNode=1 MinMemoryNode=0 "
    "MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 OverSubscribe=OK Contiguous=0 Licenses=(null) "
    "Network=(null) Command=(null) WorkDir=/work/main/tests StdErr=/tmp/sc2/out-2 StdIn=/dev/null "
    "StdOut=/tmp/sc2/out-2 Power= \n")


def test_scontrol_show_job_parser_reads_real_22_05_output():
    f = parse_scontrol_job(REAL_SHOW_JOB)
    assert (f["JobId"], f["JobState"], f["Reason"], f["ExitCode"]) == ("2", "CANCELLED", "None", "0:15")
    assert (f["NodeList"], f["ReqNodeList"], f["BatchHost"], f["TimeLimit"]) == ("gpu[01-04]", "(null)", "gpu01", "00:01:00")
    assert (f["TRES"], f["AllocNode:Sid"], f["Power"]) == ("cpu=4,node=4,billing=4", "localhost:3081", "")
    assert parse_exit_code(f["ExitCode"]) == (0, 15)
    with pytest.raises(ParseError, match="scontrol"):
        parse_scontrol_job("slurm_load_jobs error: Invalid job id specified\n")


def test_end_states_are_named_with_what_they_mean():
    assert describe_end(12, "TIMEOUT", "TimeLimit", "00:01:00") == "Slurm job 12 TIMEOUT: killed at its time limit (00:01:00)"
    assert describe_end(12, "CANCELLED") == "Slurm job 12 CANCELLED: cancelled (scancel, by mfctl or an operator)"
    assert describe_end(12, "NODE_FAIL", "NodeDown") == "Slurm job 12 NODE_FAIL: a node of the job failed; reason NodeDown"
    assert describe_end(12, "OUT_OF_MEMORY") == "Slurm job 12 OUT_OF_MEMORY: a task ran out of memory"
    assert describe_end(12, "PREEMPTED") == "Slurm job 12 PREEMPTED: preempted by another job"
    assert describe_end(12, "FAILED", "NonZeroExitCode") == ("Slurm job 12 FAILED: a task or the batch script exited "
                                                            "non-zero; reason NonZeroExitCode")


def test_task_output_is_filed_under_the_node_slurm_ran_it_on(tmp_path):
    """Inventory order gpu03, gpu01, gpu04, gpu02; Slurm's task 0 is gpu01 (its NodeList order)."""
    seen = []
    sl = SlurmLaunch(None, "login", ["gpu03", "gpu01", "gpu04", "gpu02"], tmp_path / "logs",
                     on_line=lambda h, ln: seen.append((h, ln)))
    (tmp_path / "logs").mkdir()
    for ln in ["0: mfctl-task: 0 gpu01", "2: mfctl-task: 2 gpu03", "0: > runtime on gpu01", "2: > runtime on gpu03",
               "srun: error: gpu03: task 2: Exited with exit code 17", "tail: 'x' has appeared;  following new file"]:
        sl._demux("login", ln)
    sl.nodes = ["gpu01", "gpu02", "gpu03", "gpu04"]  # NodeList, for a task whose first line was lost
    sl._demux("login", "3: > runtime on gpu04")
    sl._drain_log(quiet_s=0, limit_s=0)
    assert (tmp_path / "logs" / "gpu01.log").read_text() == "mfctl-task: 0 gpu01\n> runtime on gpu01\n"
    assert (tmp_path / "logs" / "gpu03.log").read_text() == "mfctl-task: 2 gpu03\n> runtime on gpu03\n"
    assert (tmp_path / "logs" / "gpu04.log").read_text() == "> runtime on gpu04\n"
    assert not (tmp_path / "logs" / "gpu02.log").exists()
    assert sl.task_errors == {"gpu03": "srun: task 2 on gpu03: Exited with exit code 17"}
    assert ("slurm", "srun: error: gpu03: task 2: Exited with exit code 17") in seen and ("gpu04", "> runtime on gpu04") in seen


# --- the mock Slurm cluster over SSH ----------------------------------------------------------
@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    d = tmp_path_factory.mktemp("slurm")
    st = mockctl.start(PROTOTYPE, d / "mock", time_scale=10)
    inv = load_inventory(st["inventory"])
    with SSHPool(targets_from_inventory(inv)) as pool:
        yield pool, d / "mock"
    mockctl.stop(d / "mock")


def _wait_state(pool, job, want, timeout=15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = pool.run("gpu01", ["sacct", "-n", "-P", "-X", "-j", str(job), "-o", "State,ExitCode"])
        st = parse_sacct(r.stdout)
        if st[0] == want:
            return st
        time.sleep(0.1)
    raise AssertionError(f"job {job} not {want}: {st}")


def test_mock_sbatch_runs_the_script_with_the_job_environment(cluster):
    pool, state = cluster
    script = ("#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --nodelist=gpu02,gpu03\n#SBATCH --output=out/%x-%j.txt\n"
              "#SBATCH --job-name=probe\nset -euo pipefail\necho nodes=$SLURM_JOB_NODELIST n=$SLURM_NNODES\n"
              "scontrol show hostnames\nsrun --label printenv SLURMD_NODENAME\n")
    out = pool.run_checked("gpu01", ["sbatch", "--parsable"], stdin=script.encode())
    job = parse_sbatch(out)
    assert _wait_state(pool, job, "COMPLETED") == ("COMPLETED", 0, 0)
    text = (state / "home" / "out" / f"probe-{job}.txt").read_text()
    assert "nodes=gpu[02-03] n=2" in text
    assert "gpu02\ngpu03\n" in text
    assert "0: gpu02" in text and "1: gpu03" in text
    r = pool.run("gpu01", ["squeue", "-h", "-j", str(job), "-o", "%T"])  # left the queue
    assert r.ok and r.stdout == ""


def test_mock_sbatch_rejects_bad_jobs_like_slurm(cluster):
    pool, _ = cluster
    r = pool.run("gpu01", ["sbatch"], stdin=b"echo no interpreter line\n")
    assert r.rc == 1 and "must start with #!" in r.stderr
    r = pool.run("gpu01", ["sbatch", "--nodelist=gpu09"], stdin=b"#!/bin/bash\ntrue\n")
    assert r.rc == 1 and "Invalid node name specified" in r.stderr
    r = pool.run("gpu01", ["sbatch", "-p", "nosuch", "--wrap", "true"])
    assert (r.rc, r.stderr) == (1, "sbatch: error: invalid partition specified: nosuch\n"
                                   "sbatch: error: Batch job submission failed: Invalid partition name specified\n")
    r = pool.run("gpu01", ["scancel", "99999"])  # an unknown job: real 22.05 exits 0, silent
    assert (r.rc, r.stdout, r.stderr) == (0, "", "")
    r = pool.run("gpu01", ["sbatch", "--bogus"], stdin=b"#!/bin/bash\ntrue\n")
    assert (r.rc, r.stderr) == (255, "sbatch: unrecognized option '--bogus'\nTry \"sbatch --help\" for more information\n")
    r = pool.run("gpu01", ["scontrol", "-o", "show", "job", "99999"])
    assert (r.rc, r.stderr) == (1, "slurm_load_jobs error: Invalid job id specified\n")


def test_mock_scancel_and_time_limit_end_jobs_and_their_processes(cluster):
    pool, _ = cluster
    script = b"#!/bin/bash\n#SBATCH --nodes=4\nsrun --label --kill-on-bad-exit=1 sleep 300\n"
    job = parse_sbatch(pool.run_checked("gpu01", ["sbatch", "--parsable"], stdin=script))
    r = pool.run("gpu01", ["squeue", "-h", "-j", str(job), "-o", "%i %T %r"])
    assert r.stdout.split() == [str(job), "PENDING", "None"]  # until the scheduler's pass, as Slurm
    wait_until(lambda: pool.run("gpu01", ["squeue", "-h", "-j", str(job), "-o", "%T"]).stdout.strip() == "RUNNING",
               what=f"job {job} RUNNING")
    r = pool.run("gpu01", ["squeue", "-h", "-j", str(job), "-o", "%i %T %D %N"])
    assert r.stdout.split() == [str(job), "RUNNING", "4", "gpu[01-04]"]
    pool.run_checked("gpu01", ["scancel", str(job)])
    assert _wait_state(pool, job, "CANCELLED") == ("CANCELLED", 0, 0)
    assert _nothing_left()
    # a 1-minute limit at time scale 10 ends after 6 s of wall time
    t0 = time.monotonic()
    job = parse_sbatch(pool.run_checked("gpu01", ["sbatch", "--parsable", "--time=1"], stdin=script))
    assert _wait_state(pool, job, "TIMEOUT", timeout=20) == ("TIMEOUT", 0, 0)
    assert 5.5 < time.monotonic() - t0 < 15
    assert _nothing_left()


def test_stopping_the_mock_ends_running_jobs_and_their_tasks(tmp_path):
    st = mockctl.start(PROTOTYPE, tmp_path / "mock", time_scale=10)
    try:
        with SSHPool(targets_from_inventory(load_inventory(st["inventory"]))) as pool:
            job = parse_sbatch(pool.run_checked("gpu02", ["sbatch", "--parsable", "--nodes=4"],
                                                stdin=b"#!/bin/bash\nsrun --label sleep 299.5\n"))
            deadline = time.monotonic() + 10
            while len(_leftovers(b"sleep\x00299.5")) < 6 and time.monotonic() < deadline:  # bash, srun, 4 tasks
                time.sleep(0.05)
            assert pool.run_checked("gpu02", ["squeue", "-h", "-j", str(job), "-o", "%T"]).strip() == "RUNNING"
    finally:
        mockctl.stop(tmp_path / "mock")
    assert _nothing_left(extra=b"sleep\x00299.5")


# --- whole runs ------------------------------------------------------------------------------
def _journal(run_dir) -> list[dict]:
    return [json.loads(ln) for ln in (Path(run_dir) / "journal.jsonl").read_text().splitlines()]


def test_run_through_slurm_end_to_end(tmp_path):
    s = Job(load_playbook(_playbook(tmp_path)), runs_dir=str(tmp_path / "runs")).run()
    assert s["exit_code"] == 0, s["error"]
    assert s["launcher"] == "slurm" and s["iterations"] == 12 and s["reconfigurations"]
    run = Path(s["run_dir"])
    assert ("srun --label --kill-on-bad-exit=1 sh -c 'echo \"mfctl-task: $SLURM_PROCID $SLURMD_NODENAME\"; "
            "exec \"$@\"' mfctl-task torchrun --nnodes 4") in (run / "sbatch.sh").read_text()
    for h in ("gpu01", "gpu02", "gpu03", "gpu04"):  # the labelled output, split per host
        text = (run / "logs" / f"{h}.log").read_text()
        assert f"mfctl simulated runtime on {h}" in text and text.count("iteration ") >= 12
    ops = [(r["op"], r.get("state")) for r in _journal(run) if r["op"].startswith("runtime.slurm")]
    assert ops[0] == ("runtime.slurm.submitted", None) and ("runtime.slurm.state", "COMPLETED") in ops
    assert not any(op == "runtime.slurm.cancel" for op, _ in ops)  # it ended by itself
    assert _nothing_left()


def test_slurm_run_with_a_crashed_host_is_cancelled_and_leaves_nothing(tmp_path):
    pb = load_playbook(_playbook(tmp_path, mock={"crash_host": "gpu02", "crash_at_iteration": 4}))
    s = Job(pb, runs_dir=str(tmp_path / "runs")).run()
    assert s["exit_code"] == 1 and "gpu02" in s["error"]
    ops = [r for r in _journal(s["run_dir"]) if r["op"].startswith("runtime.slurm")]
    end = [r["state"] for r in ops if r["op"] == "runtime.slurm.state"][-1]
    assert end in ("FAILED", "CANCELLED")  # srun --kill-on-bad-exit ends the step, or mfctl scancels
    assert _nothing_left()


def test_ctrl_c_cancels_the_slurm_job(tmp_path, cli_env):
    pb = _playbook(tmp_path, training={"iterations": 300})
    p = subprocess.Popen(mfctl_cmd("run", pb, "--json"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=cli_env)
    runs = Path(cli_env["MFCTL_RUNS_DIR"])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        logs = list(runs.glob("*/logs/gpu01.log"))
        if logs and logs[0].read_text().count("iteration ") >= 2:
            break
        time.sleep(0.1)
    p.send_signal(signal.SIGINT)
    time.sleep(0.15)
    p.send_signal(signal.SIGINT)  # an impatient operator: clean-up still finishes
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, err[-2000:]
    s = json.loads(out)
    assert s["status"] == "interrupted" and s["slurm_job"]
    assert (Path(s["run_dir"]) / "summary.json").exists() and mockctl.status(Path(s["run_dir"]) / "mock") is None
    ops = [r for r in _journal(s["run_dir"]) if r["op"].startswith("runtime.slurm")]
    assert any(r["op"] == "runtime.slurm.cancel" and r["rc"] == 0 for r in ops)
    assert [r["state"] for r in ops if r["op"] == "runtime.slurm.state"][-1] == "CANCELLED"
    assert _nothing_left()


def test_torchrun_over_ssh_on_the_mock_and_a_crash_leaves_nothing(tmp_path):
    s = Job(load_playbook(_playbook(tmp_path, "ssh")), runs_dir=str(tmp_path / "runs")).run()
    assert s["exit_code"] == 0, s["error"]
    launches = [r for r in _journal(s["run_dir"]) if r["op"] == "runtime.launch"]
    assert len(launches) == 4 and all("torchrun --nnodes 4" in r["command"] and "--no-python mfctl-simrt" in r["command"]
                                      and "'MFCTL_RUN_TOKEN=<redacted>'" in r["command"] for r in launches)
    assert "RANK" not in launches[0]["command"]  # torchrun sets the ranks, not mfctl
    assert _nothing_left()
    s = Job(load_playbook(_playbook(tmp_path, "ssh", mock={"crash_host": "gpu04", "crash_at_iteration": 3})),
            runs_dir=str(tmp_path / "runs")).run()
    assert s["exit_code"] == 1 and "gpu04" in s["error"]
    assert _nothing_left()


# --- a login node as the submit host ------------------------------------------------------------
def _with_login(tmp_path, name="login1") -> Path:
    doc = yaml.safe_load(PROTOTYPE.read_text())
    doc["login_hosts"] = [{"name": name, "ssh": {"address": "192.0.2.5", "user": "mfabric", "agent": True}}]
    p = tmp_path / "inv.yaml"
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    return p


def test_a_login_host_that_is_no_gpu_host_can_be_the_submit_host(tmp_path):
    from mfctl.runtime.launcher import launcher_for
    from mfctl.runtime.plan import plan_run

    inv = load_inventory(_with_login(tmp_path), cached=False)
    assert [h.name for h in inv.login_hosts] == ["login1"] and [h.name for h in inv.hosts][:1] == ["gpu01"]
    pb = load_playbook(_playbook(tmp_path))
    pb.runtime.slurm.submit_host = "login1"
    plan_run(pb, inv)  # accepted: a login host
    with SSHPool(targets_from_inventory(inv)) as gpu_pool:
        sl = launcher_for(pb, inv, gpu_pool, tmp_path, "run1", journal=None, observer=None)
        assert isinstance(sl, SlurmLaunch) and sl.submit_host == "login1"
        assert sl.hosts == ["gpu01", "gpu02", "gpu03", "gpu04"] and set(sl.workers) == set(sl.hosts)
        assert sl.pool is not gpu_pool and list(sl.pool.targets) == ["login1"]  # its own pool to the login node
        assert (sl.pool.targets["login1"].address, sl.pool.targets["login1"].user) == ("192.0.2.5", "mfabric")
        assert "login1" not in gpu_pool.targets  # never swept, polled or given a task
        sl.stop(0)
    pb.runtime.slurm.submit_host = "login2"
    with pytest.raises(ConfigError, match="submit_host 'login2' is not in the inventory"):
        plan_run(pb, inv)


def test_a_login_host_may_not_reuse_a_gpu_hosts_name(tmp_path):
    p = _with_login(tmp_path, "gpu02")
    line = p.read_text().splitlines().index("- name: gpu02", p.read_text().splitlines().index("login_hosts:")) + 1
    with pytest.raises(ConfigError, match=rf"inv\.yaml:{line}: duplicate host name 'gpu02' \(a login host is not a GPU "
                                          r"host, and each is named once\)"):
        load_inventory(p, cached=False)
