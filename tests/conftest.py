"""Shared fixtures and helpers (no tests here): an isolated state/runs directory per test,
the CLI command line, a CLI environment, and a scan for processes left on the mock hosts."""

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
PROTOTYPE = ROOT / "inventory" / "mfabric-prototype.yaml"
GOLDEN = ROOT / "tests" / "golden"  # <tool>/<case>/{output.txt, expected.json}: tests/unit/hosts/test_hosts_golden.py


@pytest.fixture(autouse=True)
def _isolated_state(tmp_path, monkeypatch):
    """Every test gets its own state dir (locks, mock) and runs dir."""
    monkeypatch.setenv("MFCTL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("MFCTL_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("MFCTL_LOG_FILE", str(tmp_path / "mfctl.log"))
    monkeypatch.setenv("MFCTL_LOCK_DIR", str(tmp_path / "locks"))  # device locks: shared by state dirs, not by tests
    yield


def mfctl_cmd(*args):
    return [sys.executable, "-m", "mfctl", *map(str, args)]


@pytest.fixture
def cli_env(tmp_path):
    env = dict(os.environ)
    env["MFCTL_STATE_DIR"] = str(tmp_path / "state")
    env["MFCTL_RUNS_DIR"] = str(tmp_path / "runs")
    env["MFCTL_LOG_FILE"] = str(tmp_path / "mfctl.log")
    env["MFCTL_LOCK_DIR"] = str(tmp_path / "locks")
    return env


def live_processes(*needles: bytes) -> list[str]:
    """Command lines of processes on this machine (= on any mock host) containing a needle, among
    those of this test: processes whose environment has this test's MFCTL_STATE_DIR (the mock and
    what it starts inherit it), so that another mfctl run on the machine is not counted."""
    mine = f"MFCTL_STATE_DIR={os.environ.get('MFCTL_STATE_DIR', '')}".encode()
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes()
                if not any(n in cmd for n in needles if n):
                    continue
                env = (d / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if mine in env:
                out.append(cmd.replace(b"\0", b" ").decode(errors="replace"))
    return out
