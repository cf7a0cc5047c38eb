"""mfctl health on the session's mock: checks chosen by name, each finding naming its check."""

import json
import subprocess
import xml.etree.ElementTree as ET

from support import mfctl_cmd


def _health(mock, env, *args):
    r = subprocess.run(mfctl_cmd("health", "-i", mock.inventory, "--no-ocs", *args), capture_output=True, text=True,
                       env=env, timeout=120, check=False)
    return r


def test_chosen_checks_run_and_only_theirs(mock_testbed, cli_env):
    r = _health(mock_testbed, cli_env, "--json", "--checks", "gpu,rdma,gids,+dcgm")
    doc = json.loads(r.stdout)
    assert r.returncode == 0 and doc["checks"] == ["gpu", "rdma", "gids", "dcgm"] and doc["healthy"], r.stderr
    assert all(t["links_up"] == [] for t in doc["targets"])  # links did not run
    assert {f["source"] for t in doc["targets"] for f in t["findings"]} <= {"gpu", "rdma", "gids", "dcgm"}
    suite = ET.fromstring(_health(mock_testbed, cli_env, "--checks", "xid", "--junit", "-").stdout)
    assert {(tc.get("classname"), tc.get("name")) for tc in suite} == {(h, "gpu") for h in ("gpu01", "gpu02", "gpu03", "gpu04")}
    r = _health(mock_testbed, cli_env)  # the table: the check's name per finding, folded hosts
    assert r.returncode == 0 and "gpu[01-04]" in r.stdout


def test_a_clean_breakout_testbed_is_healthy(tmp_path, cli_env):
    """issue 17 item 1: nic0 split 2x50G shifted the RDMA devices, and the position guess called every
    host's EPS RDMA path down; ibdev2netdev names the EPS NIC's device (mlx5_4) and finds it up."""
    from mfctl import mockctl
    from support import PROTOTYPE

    inv = mockctl.start(PROTOTYPE.parent / "mfabric-breakout.yaml", tmp_path / "mock", time_scale=100)["inventory"]
    try:
        r = subprocess.run(mfctl_cmd("health", "-i", inv, "--json"), capture_output=True, text=True, env=cli_env,
                           timeout=120, check=False)
        doc = json.loads(r.stdout)
        assert r.returncode == 0 and doc["healthy"], [f["message"] for t in doc["targets"] for f in t["findings"]]
        assert not [f for t in doc["targets"] for f in t["findings"] if f["code"] == "rdma.port_down"]
        out = subprocess.run(mfctl_cmd("exec", "-i", inv, "gpu01", "--", "ibdev2netdev"), capture_output=True, text=True,
                             env=cli_env, timeout=60, check=False).stdout
        assert "mlx5_4 port 1 ==> ens4f0np0 (Up)" in out  # the EPS NIC, fourth in the inventory, fifth device
    finally:
        mockctl.stop(tmp_path / "mock")
