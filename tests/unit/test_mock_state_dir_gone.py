"""A mock whose state directory is deleted (a killed test session's tmp dir, cleaned up later by pytest)
stops by itself: nobody can reach it any more (its inventory, keys and sockets are gone), so it must not
keep its servers running for good."""

import os
import shutil
import time

from mfctl import mockctl
from mfctl.procs import start_ticks
from support import PROTOTYPE


def _running(pid, ticks):
    try:
        os.waitpid(pid, os.WNOHANG)  # (our child: reaped once it exits, or it lingers as a zombie)
    except ChildProcessError:
        pass
    return start_ticks(pid) == ticks


def test_a_mock_stops_when_its_state_directory_is_deleted(tmp_path, monkeypatch):
    monkeypatch.setenv("MFCTL_STATE_DIR", str(tmp_path / "state"))
    sd = tmp_path / "mock"
    st = mockctl.start(PROTOTYPE, sd, time_scale=100, sshd="paramiko")
    pid = st["pid"]
    ticks = start_ticks(pid)
    try:
        time.sleep(1.0)
        assert _running(pid, ticks)  # up, and staying up while its directory is there
        shutil.rmtree(sd)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and _running(pid, ticks):
            time.sleep(0.1)
        assert not _running(pid, ticks), "the mock kept running after its state directory was deleted"
    finally:
        if _running(pid, ticks):
            os.kill(pid, 9)
