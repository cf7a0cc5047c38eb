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

# --- Suite time: which worker runs what (pyproject addopts: -n 4 --dist loadfile --no-loadscope-reorder) ---
# loadfile: each module runs on one worker, so a module-scoped fixture (a mock, an OpenSSH mock, the
# megatron traffic job, a Slurm cluster through real_slurm) is set up once, not once per worker that
# got one of its tests (--dist load split modules), and a module's tests run in order on one process
# (test_e2e_session_mock relies on it). (Not loadgroup: with pytest 9.2 its xdist_group marks are
# silently ignored, pytest-xdist issue #1386.) The modules go out in the order below, the longest
# first (their summed --durations, whole suite on 2 cores, 2026-12-01, load ~20): a worker that
# draws one late does not keep the suite waiting while the others are idle; then the other e2e
# and integration modules, then the rest in collection order. Only the order changes.
LONGEST_FIRST = (
    "tests/e2e/test_mock_lifecycle.py",  # 826 s
    "tests/e2e/test_e2e_hil_suite.py",  # 574 s
    "tests/e2e/test_e2e_run.py",  # 499 s
    "tests/unit/runtime/test_runtime_reconfig.py",  # 453 s
    "tests/cli/test_cli_runs_manage.py",  # 343 s
    "tests/e2e/test_e2e_mock_openssh.py",  # 329 s
    "tests/cli/test_cli_hosts_progress.py",  # 325 s
    "tests/unit/runtime/test_runtime_slurm.py",  # 322 s
    "tests/e2e/test_e2e_real_slurm.py",  # 135-190 s at load 4-9 (docs/real-peers.md)
    "tests/cli/test_cli_provision_firmware.py",  # 301 s
    "tests/unit/pytest_plugin/test_pytest_plugin.py",  # 291 s
    "tests/unit/provision/test_provision_service.py",  # 254 s
    "tests/cli/test_cli_ocs_session.py",  # 237 s
    "tests/unit/ocs/test_ocs_integrity.py",  # 214 s
    "tests/unit/runtime/test_megatron_hook.py",  # 296 s with a megatron import in the worker, ~150 s without
    "tests/unit/provision/test_provision_checks.py",  # 194 s
    "tests/cli/test_cli_topo_whatif.py",  # 188 s
    "tests/unit/lock/test_lock_race.py",  # 186 s
    "tests/cli/test_cli_provision_rollout.py",  # 185 s
    "tests/cli/test_cli_simulate.py",  # 162 s
    "tests/cli/test_help_and_exit_codes.py",  # 158 s
    "tests/unit/provision/test_provision_apply_verify.py",  # 158 s
    "tests/cli/test_lock_cli.py",  # 151 s
    "tests/cli/test_cli_topo.py",  # 145 s
)


_RANK = {m: i for i, m in enumerate(LONGEST_FIRST)}


def _order(item) -> tuple[int, int]:
    path = item.nodeid.split("::", 1)[0]
    return _RANK.get(path, len(_RANK)), 0 if path.startswith(("tests/e2e/", "tests/integration/")) else 1


def pytest_collection_modifyitems(config, items):
    items.sort(key=_order)  # stable: a module's tests stay in their order


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


@pytest.fixture(params=["libyaml", "pure"])
def yaml_loader(request, monkeypatch, cli_env):
    """Each hostile-YAML test with both of mfctl's YAML loaders (setting yaml_loader: PyYAML's
    libyaml CSafeLoader and its pure-Python SafeLoader), in this process and in the CLI's."""
    import yaml

    from mfctl.inventory.loader import loader_class

    if request.param == "libyaml" and not getattr(yaml, "__with_libyaml__", False):
        pytest.skip("this PyYAML was built without libyaml")
    monkeypatch.setenv("MFCTL_YAML_LOADER", request.param)
    cli_env["MFCTL_YAML_LOADER"] = request.param
    assert loader_class().__mro__[1] is (yaml.CSafeLoader if request.param == "libyaml" else yaml.SafeLoader)
    return request.param


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
