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


def test_ctrl_c_during_ocs_apply_says_what_was_applied_and_verified_then_exits_130(tmp_path, monkeypatch):
    """issue 17 item 10: Ctrl-C is held until the change is read back; the operator is then told
    what was applied and verified (not only "interrupted"), exit 130; the OCS holds the change."""
    import os
    import signal

    from typer.testing import CliRunner

    from mfctl import mockctl
    from mfctl.cli.app import build
    from mfctl.ocs import driver as ocs_driver
    from support import PROTOTYPE

    real_apply = ocs_driver.OCSDriver.apply

    def apply_then_ctrl_c(self, *a, **k):
        os.kill(os.getpid(), signal.SIGINT)  # arrives while the change is on its way: deferred
        return real_apply(self, *a, **k)

    monkeypatch.setattr(ocs_driver.OCSDriver, "apply", apply_then_ctrl_c)
    st = mockctl.start(PROTOTYPE, tmp_path / "mock", time_scale=100)
    try:
        r = CliRunner().invoke(build(), ["ocs", "connect", "gpu01/nic0", "gpu02/nic0", "-i", st["inventory"], "--yes"])
        out = " ".join((r.stdout + r.stderr).split())
        assert r.exit_code == 130, out
        assert "applied 0 deletion(s) and 2 addition(s) in" in out and "read back and verified (2 cross-connects" in out
        assert "interrupted: the change above was applied and read back first" in out
        monkeypatch.setattr(ocs_driver.OCSDriver, "apply", real_apply)
        r = CliRunner().invoke(build(), ["ocs", "show", "-i", st["inventory"], "--json"])
        assert len(json.loads(r.stdout)["cross_connects"]) == 2
    finally:
        mockctl.stop(tmp_path / "mock")
