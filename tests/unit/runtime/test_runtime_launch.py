"""The Launcher protocol's two launchers and the testbed objects, without a testbed."""

import json
import os
import re
import signal
import subprocess
import threading
import time
from types import SimpleNamespace

import pytest

from mfctl.errors import ConfigError
from mfctl.inventory import load_inventory
from mfctl.mock import localranks
from mfctl.mock import torchrun as mock_torchrun
from mfctl.mockctl import MockTestbed
from mfctl.observer import RecordingObserver
from mfctl.runtime import testbed as tb_mod
from mfctl.runtime.launcher import SSHLauncher, launcher_for, torchrun_note
from mfctl.runtime.playbook import load_playbook
from mfctl.runtime.slurm import SlurmLaunch
from mfctl.runtime.testbed import Hardware, advertised_ip
from mfctl.signals import DeferSignals, signal_of, sigterm_as_interrupt
from support import PROTOTYPE, ROOT, wait_until

MIXTRAL = ROOT / "playbooks" / "mixtral-prototype.yaml"


class FakePool:
    """What SlurmLaunch.stop asks of the pool: scancel ends the job."""

    def __init__(self):
        self.ran, self.launch = [], None

    def run(self, host, argv, **kw):
        self.ran.append((host, argv))
        if argv[0] == "scancel":
            self.launch._ended.set()
        return SimpleNamespace(ok=True, rc=0, error=None, stderr="", stdout="")


@pytest.fixture
def pb():
    return load_playbook(MIXTRAL)


def test_launcher_for_picks_by_the_playbook(pb, tmp_path):
    inv = load_inventory(PROTOTYPE)
    obs = RecordingObserver()
    ssh = launcher_for(pb, inv, FakePool(), tmp_path, "run1", journal=None, observer=obs)
    assert isinstance(ssh, SSHLauncher) and ssh.job_id is None and ssh.workers == {}
    pb.runtime.launcher, pb.runtime.slurm.submit_host = "slurm", "gpu03"
    sl = launcher_for(pb, inv, FakePool(), tmp_path, "run1", journal=None, observer=obs)
    assert isinstance(sl, SlurmLaunch) and sl.submit_host == "gpu03" and sl.hosts == ["gpu01", "gpu02", "gpu03", "gpu04"]
    assert sl.queue_timeout_s == pb.runtime.slurm.queue_timeout_s and sl.log_dir == tmp_path / "logs"


def test_a_failed_runs_slurm_job_is_cancelled_at_once_and_says_so(pb, tmp_path):
    inv = load_inventory(PROTOTYPE)
    pb.runtime.launcher = "slurm"
    pool, obs = FakePool(), RecordingObserver()
    sl = SlurmLaunch.for_run(pb, inv, pool, tmp_path, "run1", journal=None, observer=obs)
    pool.launch, sl.job_id = sl, 42
    for w in sl.workers.values():
        w.done.set()
    sl.stop(grace_s=0.0)
    assert pool.ran == [("gpu01", ["scancel", "42"])]
    assert obs.events == [("phase", "stop", None)]


def test_a_job_that_ended_is_not_cancelled(pb, tmp_path):
    inv = load_inventory(PROTOTYPE)
    pool, obs = FakePool(), RecordingObserver()
    sl = SlurmLaunch.for_run(pb, inv, pool, tmp_path, "run1", journal=None, observer=obs)
    sl.job_id = 7
    sl._ended.set()
    for w in sl.workers.values():
        w.done.set()
    sl.stop(grace_s=0.0)
    assert pool.ran == [] and obs.events == []


def test_hardware_and_the_mock_are_chosen_in_one_place(pb, tmp_path):
    assert isinstance(tb_mod.testbed_for(pb), MockTestbed)
    pb.mock.enabled = False
    hw = tb_mod.testbed_for(pb, "/some/inventory.yaml")
    assert isinstance(hw, Hardware) and hw.time_scale == 1.0
    assert hw.start(tmp_path, RecordingObserver()) == "/some/inventory.yaml" and hw.welcome_fields("gpu01") == {}
    assert advertised_ip("127.0.0.1") == "127.0.0.1"


def test_the_mock_testbed_crashes_one_host_and_checks_a_hand_started_mocks_time_scale(pb, tmp_path):
    pb.mock.crash_host, pb.mock.crash_at_iteration = "gpu02", 5
    tb = MockTestbed(pb, str(tmp_path / "inventory.yaml"))
    assert tb.time_scale == 20.0 and tb.controller_listen(None) == "127.0.0.1"
    assert tb.welcome_fields("gpu02") == {"crash_at_iteration": 5}
    assert tb.welcome_fields("gpu01") == {"crash_at_iteration": None}
    assert tb.start(tmp_path, RecordingObserver()) == str(tmp_path / "inventory.yaml")  # started by hand: not ours
    inv = SimpleNamespace(source=str(tmp_path / "inventory.yaml"))
    tb.check(inv)  # no status.json: nothing to compare
    (tmp_path / "status.json").write_text(json.dumps({"time_scale": 20}))
    tb.check(inv)
    (tmp_path / "status.json").write_text(json.dumps({"time_scale": 10}))
    with pytest.raises(ConfigError, match="runs at time scale 10 but the playbook says 20"):
        tb.check(inv)
    tb.stop()  # nothing of ours to stop


# --- the mock's torchrun and the simulated runtime's local ranks (issue 15, torchrun) ---------------
RANK_SCRIPT = """#!/bin/sh
for s in TERM INT HUP; do trap "echo rank $RANK got $s; exit 9" $s; done
echo "rank $RANK of $WORLD_SIZE up (local $LOCAL_RANK/$LOCAL_WORLD_SIZE, node $GROUP_RANK)"
touch "$UP_DIR/$LOCAL_RANK"
if [ "$LOCAL_RANK" = "$FAIL_RANK" ]; then  # fail once every rank is up (its traps set)
  while [ "$(ls "$UP_DIR" | wc -l)" -lt "$LOCAL_WORLD_SIZE" ]; do sleep 0.05; done
  exit 17
fi
while :; do sleep 0.05; done
"""


def _mock_torchrun(tmp_path, nproc: int, **env) -> subprocess.Popen:
    script = tmp_path / "rank.sh"
    script.write_text(RANK_SCRIPT)
    script.chmod(0o755)
    argv = [*mock_torchrun.command("mock"), "--nnodes", "2", "--nproc-per-node", str(nproc), "--node-rank", "1",
            "--master-addr", "127.0.0.1", "--master-port", "29999", "--no-python", str(script)]
    (tmp_path / "up").mkdir()
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1", "UP_DIR": str(tmp_path / "up"), **env})


def _up(p: subprocess.Popen, n: int) -> list[str]:
    return sorted(p.stdout.readline().strip() for _ in range(n))


def test_the_mock_torchrun_fails_like_torchrun_when_a_rank_fails(tmp_path):
    p = _mock_torchrun(tmp_path, 3, FAIL_RANK="1")
    out, err = p.communicate(timeout=20)
    assert p.returncode == 1
    assert sorted(out.splitlines()) == ["rank 3 got TERM", "rank 3 of 6 up (local 0/3, node 1)",
                                        "rank 4 of 6 up (local 1/3, node 1)", "rank 5 got TERM",
                                        "rank 5 of 6 up (local 2/3, node 1)"]
    notes = [n for n in map(torchrun_note, err.splitlines()) if n]
    assert len(notes) == 1 and re.fullmatch(r"local rank 1 \(pid \d+\) of \S+/rank\.sh failed with exit code 17", notes[0])
    assert err.count("closing signal SIGTERM") == 2 and "Root Cause (first observed failure):\n[0]:" in err
    assert "  rank      : 4 (local_rank: 1)\n  exitcode  : 17 (pid: " in err  # node 1 x 3 + local 1


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_the_mock_torchrun_passes_a_signal_to_every_rank_and_exits_1(tmp_path, sig):
    p = _mock_torchrun(tmp_path, 2)
    assert _up(p, 2) == ["rank 2 of 4 up (local 0/2, node 1)", "rank 3 of 4 up (local 1/2, node 1)"]
    p.send_signal(sig)
    out, err = p.communicate(timeout=20)
    name = sig.name.removeprefix("SIG")
    assert p.returncode == 1 and sorted(out.splitlines()) == [f"rank 2 got {name}", f"rank 3 got {name}"]
    assert f"Received {int(sig)} death signal, shutting down workers" in err
    assert err.rstrip().endswith(f"SignalException: Process {p.pid} got signal: {int(sig)}")
    assert [n for n in map(torchrun_note, err.splitlines()) if n] == [f"torchrun got {sig.name}"]


def test_a_local_rank_follows_rank_0_and_ends_with_it():
    name = f"\0mfctl-test/{os.getpid()}/{time.monotonic_ns()}"
    leader = localranks.Leader(name)
    rcs: list[int] = []
    followers = [threading.Thread(target=lambda: rcs.append(localranks.follow(name))) for _ in range(7)]
    for t in followers:
        t.start()
    wait_until(lambda: len(leader.followers) == 7, timeout=5, what="7 followers connected")
    leader.done(0)
    for t in followers:
        t.join(timeout=5)
    assert rcs == [0] * 7


def test_a_local_rank_outlives_a_crashed_rank_0_only_until_its_collective_times_out(monkeypatch, capsys):
    monkeypatch.setattr(localranks, "COLLECTIVE_TIMEOUT_S", 0.2)
    name = f"\0mfctl-test/{os.getpid()}/{time.monotonic_ns()}"
    leader = localranks.Leader(name)
    rcs: list[int] = []
    t = threading.Thread(target=lambda: rcs.append(localranks.follow(name, label=" (local rank 1)")))
    t.start()
    wait_until(lambda: leader.followers, timeout=5, what="the follower connected")
    leader.sock.close()
    leader.followers[0].close()  # rank 0 gone without a word (os._exit: a crash)
    t.join(timeout=5)
    assert rcs == [1]
    assert capsys.readouterr().err == ("mfctl-simrt (local rank 1): local rank 0 ended (without a word); collective "
                                       "timed out after 0.2 s\n")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_an_interrupted_run_knows_which_signal_stopped_it(sig):
    """``mfctl run``'s summary says ``interrupted by SIGHUP`` (a dropped terminal), not a guess."""
    with pytest.raises(KeyboardInterrupt) as got, sigterm_as_interrupt():
        os.kill(os.getpid(), sig)
        time.sleep(5)  # the handler raises at once; the sleep is never finished
    assert signal_of(got.value) == sig.name
    with pytest.raises(KeyboardInterrupt) as held, sigterm_as_interrupt(), DeferSignals():
        os.kill(os.getpid(), sig)  # held while the OCS changes, raised after with its signal
    assert signal_of(held.value) == sig.name
    assert signal.getsignal(signal.SIGHUP) is signal.SIG_DFL and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signal_of(KeyboardInterrupt()) == "SIGINT"  # Python's own Ctrl-C
