"""mfctl health's options: the checks' table, selection errors (exit 2), the inventory required."""

import json

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
