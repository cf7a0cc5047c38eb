"""The session's mock testbed (tests/conftest.py: session_mock, mock_testbed): one process for every test that asks,
reachable through the CLI with the inventory it wrote."""

import json
import subprocess

from support import mfctl_cmd

PIDS = []


def _exec_hostname(mock, cli_env, hosts="gpu[01-04]"):
    r = subprocess.run(mfctl_cmd("exec", "--json", "-i", mock.inventory, hosts, "--", "hostname"),
                       capture_output=True, text=True, env=cli_env, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_the_session_mock_answers_the_cli(mock_testbed, cli_env):
    PIDS.append(mock_testbed.pid)
    doc = _exec_hostname(mock_testbed, cli_env)
    assert sorted(mock_testbed.status["hosts"]) == ["gpu01", "gpu02", "gpu03", "gpu04"]
    assert json.dumps(doc).count("gpu0") >= 4, doc
    r = subprocess.run(mfctl_cmd("mock", "status", "--state-dir", mock_testbed.state_dir, "--json"),
                       capture_output=True, text=True, env=cli_env, timeout=30, check=False)
    st = json.loads(r.stdout)
    assert r.returncode == 0 and st["running"] and st["pid"] == mock_testbed.pid and st["time_scale"] == 100


def test_a_second_test_gets_the_same_mock(mock_testbed, session_mock, cli_env):
    PIDS.append(mock_testbed.pid)
    assert len(PIDS) == 2 and PIDS[0] == PIDS[1]  # one process for the session, not one per test
    assert session_mock() is mock_testbed and session_mock(time_scale=100.0) is mock_testbed
    _exec_hostname(mock_testbed, cli_env, "gpu02")
