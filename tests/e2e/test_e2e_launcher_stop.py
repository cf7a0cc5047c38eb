"""The runtime's launcher returns from ``stop`` once the commands it started have ended, not when it
has hung up their sessions: hung up at once, a torchrun was still stopping its ranks when ``mfctl
run`` returned (after a Ctrl-C of the torch job its 4 agents outlived the run by 0.5-2 s). On the
session's mock (a real sshd per host), through the mock's torchrun, with a rank that takes 1.5 s to
end once signalled."""

import os
import sys
import time
from pathlib import Path

import pytest

from mfctl import mockctl
from mfctl.inventory import load_inventory
from mfctl.runtime.launcher import SSHLauncher
from mfctl.runtime.playbook import load_playbook
from mfctl.transport.ssh import SSHPool, targets_from_inventory
from support import ROOT, wait_until

SLOW_RANK = """\
import os, signal, sys, time
def end(signum, frame):
    time.sleep(1.5)  # a rank that takes its time (a checkpoint, a collective timing out)
    with open(sys.argv[2], "w") as f:
        f.write(str(signum))
    sys.exit(3)
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(s, end)
with open(sys.argv[1], "w") as f:
    f.write(str(os.getpid()))
while True:
    time.sleep(0.05)
"""


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture(params=["openssh", "paramiko"])
def mock_inventory(request, tmp_path, monkeypatch):
    """A mock's inventory: the session's (a real sshd per host: the pty's ^C is a real SIGINT, which the
    relay passes on), or one of the test's own on the paramiko server (the mock reads the ^C typed at
    its pty as the line discipline would)."""
    if request.param == "openssh":
        yield request.getfixturevalue("mock_testbed").inventory
        return
    monkeypatch.setenv("MFCTL_MOCK_SSHD", "paramiko")
    st = mockctl.start(ROOT / "inventory" / "mfabric-prototype.yaml", tmp_path / "mock", time_scale=100)
    try:
        yield st["inventory"]
    finally:
        mockctl.stop(tmp_path / "mock")


def test_stop_returns_once_the_torchrun_it_interrupted_has_ended(mock_inventory, tmp_path):
    script, pid_file, end_file = tmp_path / "rank.py", tmp_path / "rank.pid", tmp_path / "rank.end"
    script.write_text(SLOW_RANK)
    pb = load_playbook(ROOT / "playbooks" / "mixtral-torchrun-mock.yaml")
    inv = load_inventory(mock_inventory)
    with SSHPool(targets_from_inventory(inv)) as pool:
        launcher = SSHLauncher(pb, inv, pool, tmp_path / "logs", journal=None)
        w = launcher.sessions.start("gpu01", ["torchrun", "--nproc-per-node", "1", str(script), str(pid_file),
                                              str(end_file)])
        assert w.error is None
        wait_until(pid_file.exists, timeout=30, what="the rank to start")
        rank = int(wait_until(lambda: pid_file.read_text().strip(), timeout=5, what="the rank's pid"))
        t0 = time.monotonic()
        launcher.stop(grace_s=0.0)  # a failed or interrupted run's stop
        took = time.monotonic() - t0
        # the rank got the Ctrl-C's SIGINT through torchrun, took its 1.5 s, and is gone; torchrun's exit
        # status was read (not -1: a session hung up) and says why it ended
        assert end_file.read_text() == "2" and not _alive(rank)
        assert w.done.is_set() and w.rc == 1, (w.rc, w.error)
        assert w.error == "torchrun exited 1: torchrun got SIGINT"
        assert 1.5 <= took < 10, took
    print(f"stop: {took:.2f} s", file=sys.stderr)
    assert os.path.exists(tmp_path / "logs" / "gpu01.log")


def test_a_mock_that_stops_waits_for_the_processes_its_hosts_run(tmp_path, monkeypatch):
    """A run's own mock stops after the run: what its hosts still run gets SIGTERM and is waited
    for (then SIGKILL), never let go to end on its own, re-parented to init, after the mock is gone."""
    script, pid_file, end_file = tmp_path / "rank.py", tmp_path / "rank.pid", tmp_path / "rank.end"
    script.write_text(SLOW_RANK)
    monkeypatch.setenv("MFCTL_MOCK_SSHD", "paramiko")
    st = mockctl.start(ROOT / "inventory" / "mfabric-prototype.yaml", tmp_path / "mock", time_scale=100)
    try:
        inv = load_inventory(st["inventory"])
        with SSHPool(targets_from_inventory(inv)) as pool:
            w = SSHLauncher(load_playbook(ROOT / "playbooks" / "mixtral-torchrun-mock.yaml"), inv, pool,
                            tmp_path / "logs", journal=None).sessions.start(
                "gpu02", ["torchrun", "--nproc-per-node", "1", str(script), str(pid_file), str(end_file)])
            assert w.error is None
            wait_until(pid_file.exists, timeout=30, what="the rank to start")
            rank = int(wait_until(lambda: pid_file.read_text().strip(), timeout=5, what="the rank's pid"))
            assert mockctl.stop(tmp_path / "mock")
            assert end_file.read_text() == "15" and not _alive(rank)  # SIGTERM from torchrun, 1.5 s, gone
    finally:
        mockctl.stop(tmp_path / "mock")
