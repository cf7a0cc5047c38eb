"""``mfctl mock up --inject SPEC``: a bad fault spec is a command-line value, so it exits 2 (the exit-code
table, mfctl/errors.py), names the spec and what was expected, and leaves no mock behind; a bad inventory
stays exit 3."""

import json
import os
import signal
import subprocess

import pytest

from support import PROTOTYPE, mfctl_cmd


def _mock_up(tmp_path, *args):
    env = os.environ | {"MFCTL_STATE_DIR": str(tmp_path / "state")}
    return subprocess.run(mfctl_cmd("mock", "up", *args, "--state-dir", str(tmp_path / "mock"), "--sshd",
                                    "paramiko", "--json"), capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.parametrize("spec, said", [
    ("gpu02-gpu3", "expected TARGET:PART=FAULT"),
    ("gpu99:gpu0=xid79", "no host 'gpu99' in the mock (hosts: gpu01, gpu02, gpu03, gpu04)"),
    ("ocs:port999=deny", "the OCS port must be an integer from 1 to 768"),
    ("ocs/ocs-z:port1=deny", "no OCS 'ocs-z' in the mock (OCSes: ocs1)"),
    ("gpu01/nic0:ssh=refuse", "only an OCS is named so (ocs/NAME:...); a host is HOST:..."),
])
def test_bad_fault_spec_exits_2_and_leaves_no_mock(tmp_path, spec, said):
    r = _mock_up(tmp_path, str(PROTOTYPE), "--inject", spec)
    try:
        assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
        doc = json.loads(r.stdout)
        err = doc["error"]
        assert doc["schema"] == "mfctl.error/v1" and err["exit_code"] == 2 and err["type"] == "UsageError", doc
        assert said in err["message"] and spec in err["message"], err
        st = tmp_path / "mock" / "status.json"
        assert not st.exists()  # the mock that refused its spec is not left running
    finally:
        st = tmp_path / "mock" / "status.json"
        if st.exists():
            os.kill(json.loads(st.read_text())["pid"], signal.SIGKILL)


def test_bad_inventory_stays_exit_3(tmp_path):
    bad = tmp_path / "inv.yaml"
    bad.write_text("name: x\nhosts: []\n")
    r = _mock_up(tmp_path, str(bad))
    assert r.returncode == 3, (r.returncode, r.stdout, r.stderr)
    assert json.loads(r.stdout)["error"]["exit_code"] == 3
