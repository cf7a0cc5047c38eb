"""The e2e tests' mock testbed: started once per session with ``mfctl mock up`` (its own state
dir), stopped with ``mfctl mock down`` at the end of the session.

``mock_testbed`` is the mock at time scale 100 (the suite's usual; link-up 5.67 s → ~57 ms);
``session_mock(time_scale=..., factory=...)`` gives the session's mock for another setting
(one per setting, started on first use: a playbook run needs the playbook's ``mock.time_scale``,
e.g. 50 for tests/data/playbooks/short.yaml; ``factory=True`` for provisioning).

Share it only from tests that read or put back what they change: a test that injects faults,
kills hosts, leaves cross-connects on the OCS or provisions NICs wants a mock of its own
(``mfctl.mockctl.start(PROTOTYPE, tmp_path / "mock", ...)``). The mock's processes carry the
session's ``MFCTL_STATE_DIR``, not a test's, so ``conftest.live_processes`` (a test's
leftover scan) does not count them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import types
from dataclasses import dataclass, field
from pathlib import Path

import pytest


def _root_conftest():
    """tests/conftest.py as a module of its own. conftest.py files outside packages share the module
    name "conftest": pytest drops tests/conftest.py from sys.modules before importing this one, so
    every later ``from conftest import DATA`` (here and in test files collected after this folder)
    finds this module. Hence its plain names are re-exported below (fixtures are not: pytest has
    them registered from tests/conftest.py already)."""
    spec = importlib.util.spec_from_file_location("_mfctl_tests_conftest", Path(__file__).resolve().parents[1] / "conftest.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_ROOT = _root_conftest()
for _name, _value in vars(_ROOT).items():
    if not _name.startswith("_") and not isinstance(_value, types.ModuleType) and _name not in globals() \
            and type(_value).__name__ != "FixtureFunctionDefinition":
        globals()[_name] = _value
PROTOTYPE, mfctl_cmd = _ROOT.PROTOTYPE, _ROOT.mfctl_cmd


@dataclass
class SessionMock:
    """A running mock: ``inventory`` is the path of the inventory that points at it (pass it as
    ``-i``); ``status`` is ``mfctl mock up --json``'s document (pid, hosts' ports, OCS ports)."""

    state_dir: Path
    inventory: str
    time_scale: float
    factory: bool
    status: dict = field(repr=False)
    env: dict = field(repr=False)  # the environment it was started with (its own state, lock and runs dirs)

    @property
    def pid(self) -> int:
        return int(self.status["pid"])

    def alive(self) -> bool:
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        return True


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
