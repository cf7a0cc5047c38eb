"""``mfctl mock up`` / ``mock status`` name every OCS of a several-OCS mock, not only the first (the
trial of issue 22 found only one in their text; ``--json`` had them all)."""

import json
import os
import subprocess

from support import ROOT, mfctl_cmd

TWO = ROOT / "inventory" / "mfabric-2ocs.yaml"


def test_up_and_status_list_every_ocs(tmp_path):
    env = os.environ | {"MFCTL_STATE_DIR": str(tmp_path / "state")}
    sd = tmp_path / "mock"

    def mfctl(*a):
        return subprocess.run(mfctl_cmd("mock", *a, "--state-dir", str(sd)), capture_output=True, text=True,
                              env=env, timeout=120, stdin=subprocess.DEVNULL)

    up = subprocess.run(mfctl_cmd("mock", "up", str(TWO), "--state-dir", str(sd), "--sshd", "paramiko",
                                  "--time-scale", "100"), capture_output=True, text=True, env=env, timeout=120)
    try:
        assert up.returncode == 0, up.stderr
        ocses = json.loads((sd / "status.json").read_text())["ocses"]
        assert sorted(ocses) == ["ocs-a", "ocs-b"]
        assert "8 SSH hosts (paramiko), 2 OCSes" in up.stdout
        for name, e in ocses.items():
            assert f"OCS {name}: {e['serial']} (serial), 127.0.0.1:{e['tcp']} (TL1/TCP), 127.0.0.1:{e['ssh']} " \
                   "(TL1/SSH)" in up.stdout, up.stdout
        st = mfctl("status")
        assert st.returncode == 0, st.stderr
        for name, e in ocses.items():
            assert f"OCS {name}" in st.stdout and f"serial {e['serial']}, tcp {e['tcp']}, ssh {e['ssh']}" in st.stdout
    finally:
        mfctl("down", "--force")


def test_inject_names_the_ocs_and_plain_ocs_is_the_first(tmp_path):
    """``--inject ocs/NAME:...`` aims a fault at that OCS; ``ocs:...`` keeps meaning the first (the
    only one of most inventories). Port 1 of ocs-b is denied, port 2 of ocs-a (the first): each
    switch refuses exactly its own port, and the other's same number works."""
    from typer.testing import CliRunner

    from mfctl import mockctl
    from mfctl.cli.app import build

    st = mockctl.start(TWO, tmp_path / "mock", time_scale=100, sshd="paramiko", timeout=90,
                       inject=["ocs/ocs-b:port1=deny", "ocs:port2=deny"])
    try:
        def connect(ocs, i, o):
            r = CliRunner().invoke(build(), ["ocs", "connect", str(i), str(o), "-i", st["inventory"], "--ocs", ocs,
                                             "--yes", "--json"])
            return r.exit_code, json.loads(r.stdout)

        code, out = connect("ocs-b", 1, 193)
        assert code == 1 and out["error"]["message"] == ("OCS denied 'ENT-PATCH::1,193:12;': SROF (requested operation "
                                                         "failed): switching failure on port 1"), out
        code, out = connect("ocs-a", 1, 193)
        assert code == 0 and out["changed"] is True and out["result"]["readback"] == [[1, 193]], out
        code, out = connect("ocs-a", 2, 194)
        assert code == 1 and "SROF" in out["error"]["message"] and "port 2" in out["error"]["message"], out
        code, out = connect("ocs-b", 2, 194)
        assert code == 0 and out["result"]["readback"] == [[2, 194]], out
        log = (tmp_path / "mock" / "mock.log").read_text()
        assert "OCS ocs-b denies cross-connects on port 1" in log and "OCS ocs-a denies cross-connects on port 2" in log
    finally:
        mockctl.stop(tmp_path / "mock")
