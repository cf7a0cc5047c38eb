"""mfctl health's options: the checks' table, selection errors (exit 2), the inventory required."""

import json

import pytest
from typer.testing import CliRunner

from mfctl.cli.app import build
from support import PROTOTYPE


def test_list_checks_needs_no_inventory_and_names_every_check():
    r = CliRunner().invoke(build(), ["health", "--list-checks", "--json"])
    doc = json.loads(r.stdout)
    assert r.exit_code == 0 and doc["schema"] == "mfctl.health.checks/v1"
    by = {c["name"]: c for c in doc["checks"]}
    assert list(by) == ["gpu", "links", "xid", "nvlink", "rdma", "gids", "speed", "optics", "counters", "roce", "dcgm", "ocs"]
    assert (by["dcgm"]["default"], by["optics"]["needs"]) == (False, ["links"])
    assert by["rdma"]["runs"] == "ibdev2netdev; ibstat (without it: ibv_devinfo)"
    r = CliRunner().invoke(build(), ["health", "--list-checks"])
    assert r.exit_code == 0 and "opt-in" in r.stdout and "dcgmi diag -r 1" in r.stdout


def test_unknown_or_contradictory_checks_are_usage_errors(monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")
    for spec, msg in (("+gpu,nope", "unknown check 'nope'; the checks are gpu, links"),
                      ("optics,-links", "optics needs links")):
        r = CliRunner().invoke(build(), ["health", "-i", str(PROTOTYPE), "--checks", spec])
        assert r.exit_code == 2 and msg in r.stderr, r.stderr
    r = CliRunner().invoke(build(), ["health"])
    assert r.exit_code == 2 and "--inventory" in r.stderr
    r = CliRunner().invoke(build(), ["health", "-i", str(PROTOTYPE), "--checks", "ocs", "--no-ocs"])
    assert r.exit_code == 2 and "--checks 'ocs' without ocs selects no check" in r.stderr, r.stderr  # not 'ocs,-ocs'
    r = CliRunner().invoke(build(), ["health", "--list-checks", "--checks", "bogus"])  # listed only once it is checked
    assert r.exit_code == 2 and "unknown check 'bogus'" in r.stderr and r.stdout == "", r.stdout


@pytest.mark.parametrize("where, msg", [("nodir/x.xml", "--junit {p}: no directory"), (".", "is a directory")])
def test_a_junit_file_that_cannot_be_written_is_refused_before_the_sweep(where, msg, tmp_path, cli_env):
    import subprocess

    from support import mfctl_cmd

    p = tmp_path / where
    for cmd in (["health", "-i", PROTOTYPE], ["run", "playbooks/mixtral-prototype.yaml"]):
        r = subprocess.run(mfctl_cmd(*cmd, "--junit", p), capture_output=True, text=True, env=cli_env, timeout=120,
                           stdin=subprocess.DEVNULL)
        # at once: the prototype's hosts are not reachable from here, so a sweep would have exited 4
        assert r.returncode == 2 and msg.format(p=p) in r.stderr, (cmd, r.stderr)
