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
