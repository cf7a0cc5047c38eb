"""Shared fixtures (no tests here): an isolated state/runs directory per test, a CLI environment,
and the session's mock testbed.

``session_mock(time_scale=..., factory=...)`` is a mock started once per session with ``mfctl mock
up`` (its own state dir) and stopped with ``mfctl mock down`` at the end; ``mock_testbed`` is the one
at time scale 100 (the suite's usual; link-up 5.67 s → ~57 ms). Share it only from tests that read
or put back what they change: a test that injects faults, kills hosts, leaves cross-connects on the
OCS or provisions NICs wants a mock of its own (``mfctl.mockctl.start(PROTOTYPE, tmp_path / "mock",
...)``). The mock's processes carry the session's ``MFCTL_STATE_DIR``, not a test's, so
``support.live_processes`` (a test's leftover scan) does not count them.

Plain helpers (paths, ``mfctl_cmd``, ``live_processes``) are in ``support.py``.
"""

import json
import os
import subprocess

import pytest

from support import PROTOTYPE, SessionMock, mfctl_cmd


@pytest.fixture(autouse=True)
def _isolated_state(tmp_path, monkeypatch):
    """Every test gets its own state dir (locks, mock) and runs dir."""
    monkeypatch.setenv("MFCTL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("MFCTL_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("MFCTL_LOG_FILE", str(tmp_path / "mfctl.log"))
    monkeypatch.setenv("MFCTL_LOCK_DIR", str(tmp_path / "locks"))  # device locks: shared by state dirs, not by tests
    yield


@pytest.fixture
def cli_env(tmp_path):
    env = dict(os.environ)
    env["MFCTL_STATE_DIR"] = str(tmp_path / "state")
    env["MFCTL_RUNS_DIR"] = str(tmp_path / "runs")
    env["MFCTL_LOG_FILE"] = str(tmp_path / "mfctl.log")
    env["MFCTL_LOCK_DIR"] = str(tmp_path / "locks")
    return env


@pytest.fixture(scope="session")
def session_mock(tmp_path_factory):
    """``session_mock(time_scale=100, factory=False) -> SessionMock``: the session's mock for that
    setting, started on first use; every one is stopped at the end of the session."""
    started: dict[tuple[float, bool], SessionMock] = {}

    def get(time_scale: float = 100, factory: bool = False) -> SessionMock:
        key = (float(time_scale), bool(factory))
        if key in started:
            m = started[key]
            assert m.alive(), f"the session's mock (pid {m.pid}) was stopped by a test: use a mock of your own"
            return m
        root = tmp_path_factory.mktemp(f"mock-x{time_scale:g}{'-factory' if factory else ''}")
        env = {**os.environ, "MFCTL_STATE_DIR": str(root / "state"), "MFCTL_RUNS_DIR": str(root / "runs"),
               "MFCTL_LOG_FILE": str(root / "mfctl.log"), "MFCTL_LOCK_DIR": str(root / "locks")}
        r = subprocess.run(mfctl_cmd("mock", "up", PROTOTYPE, "--state-dir", root / "mock", "--time-scale", time_scale,
                                     *(["--factory"] if factory else []), "--json"),
                           capture_output=True, text=True, env=env, timeout=90, check=False)
        assert r.returncode == 0, f"mfctl mock up failed ({r.returncode}): {r.stderr[-2000:]}"
        st = json.loads(r.stdout)
        started[key] = SessionMock(root / "mock", st["inventory"], float(time_scale), bool(factory), st, env)
        return started[key]

    yield get
    for m in started.values():
        r = subprocess.run(mfctl_cmd("mock", "down", "--state-dir", m.state_dir, "--json"),
                           capture_output=True, text=True, env=m.env, timeout=60, check=False)
        assert r.returncode == 0 and not m.alive(), f"mfctl mock down: {r.returncode} {r.stderr[-2000:]}"


@pytest.fixture
def mock_testbed(session_mock) -> SessionMock:
    """The session's mock at time scale 100 (see the module docstring for who may share it)."""
    return session_mock()


# --- Section C: a real Slurm cluster (tests/peers_slurm.py) ---
@pytest.fixture(scope="session")
def real_slurm(tmp_path_factory):
    """``real_slurm(accounting=False, name="") -> peers_slurm.SlurmCluster``: a real 4-node Slurm
    22.05 cluster (munged, slurmctld, ``slurmd -N gpu01..gpu04`` on 127.0.0.1; with ``accounting``
    also mariadbd + slurmdbd), one per flavour and ``name`` (a test that keeps a cluster busy asks
    for one of its own), started on first use and stopped at the end of the session. Skips where
    it cannot run (not root, packages missing)."""
    from peers_slurm import SlurmCluster, unavailable_reason

    started: dict[tuple[bool, str], SlurmCluster] = {}

    def get(accounting: bool = False, name: str = "") -> SlurmCluster:
        why = unavailable_reason(accounting)
        if why:
            pytest.skip(why)
        if (accounting, name) not in started:
            d = tmp_path_factory.mktemp(f"slurm{'-acct' if accounting else ''}{f'-{name}' if name else ''}")
            started[accounting, name] = SlurmCluster(d, accounting=accounting).start()
        return started[accounting, name]

    yield get
    for c in started.values():
        c.close()
        assert not c.pids(), f"Slurm processes left after the cluster stopped: {c.pids()}"


# --- Suite time: provisioning's mocks on paramiko ---
@pytest.fixture
def paramiko_mock_hosts(monkeypatch):
    """The mocks a test starts serve their hosts with paramiko in the mock's process, not a real
    sshd per host. A provisioning test runs ~100 commands per host (plan, apply, re-plan after the
    reset, verify): through OpenSSH each costs ~2x (9 s vs 20 s for one plan-apply-verify on 4
    hosts). What sshd serves them changes nothing provisioning does; the OpenSSH path is the e2e
    tests' (test_e2e_mock_openssh, test_e2e_openssh, the run and real-Slurm tests)."""
    monkeypatch.setenv("MFCTL_MOCK_SSHD", "paramiko")
