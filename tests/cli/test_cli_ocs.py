"""mfctl ocs: usage and inventory errors before any device is reached (CliRunner)."""

import json

import pytest
from typer.testing import CliRunner

from mfctl.cli.app import build


def invoke(*args):
    return CliRunner().invoke(build(), [str(a) for a in args])


@pytest.mark.parametrize("cmd", [["show"], ["power"], ["alarms"], ["journal"], ["recover", "--dry-run"],
                                 ["connect", "gpu01/nic1", "gpu02/nic1", "--yes"], ["apply", "t.yaml", "--yes"]])
def test_a_missing_inventory_is_exit_3_and_a_missing_option_exit_2(cmd, tmp_path):
    r = invoke("ocs", *cmd, "-i", tmp_path / "none.yaml", "--json")
    err = json.loads(r.stdout)["error"]
    assert r.exit_code == 3 and err["type"] == "ConfigError" and "none.yaml" in err["message"]
    r = invoke("ocs", *cmd)
    assert r.exit_code == 2 and "--inventory" in r.stderr and "MFCTL_INVENTORY" in r.stderr


def test_disconnect_needs_lanes_or_all_but_not_both(tmp_path):
    inv = tmp_path / "none.yaml"  # never read: the arguments are wrong first
    r = invoke("ocs", "disconnect", "-i", inv, "--json")
    assert r.exit_code == 2 and "what to disconnect" in json.loads(r.stdout)["error"]["message"]
    r = invoke("ocs", "disconnect", "gpu01/nic1", "--all", "-i", inv, "--json")
    assert r.exit_code == 2 and "not both" in json.loads(r.stdout)["error"]["message"]


def test_alarms_wait_is_bounded(tmp_path):
    assert invoke("ocs", "alarms", "-i", tmp_path / "none.yaml", "--wait", "3601").exit_code == 2
