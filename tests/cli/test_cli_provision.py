"""mfctl provision / firmware check: --hosts is checked against the inventory before any host is
contacted (exit 2), and the exit codes come from the per-host results (4 unreachable, 6 drift)."""

import json

from typer.testing import CliRunner

from mfctl.cli.app import build
from support import ROOT

SPEC = str(ROOT / "playbooks" / "provision.yaml")
INV = str(ROOT / "inventory" / "mfabric-prototype.yaml")  # 192.0.2.x addresses: never contacted here


def test_hosts_are_names_of_the_inventory(monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")
    for hosts, msg in (("gpu01,gpu99", "unknown host(s) gpu99; the inventory has gpu[01-04]"),  # the one host selector
                       (" , ", "--hosts is empty (leave it out for all hosts)")):
        for cmd in (["provision", "plan"], ["firmware", "check"], ["provision", "apply", "--dry-run"],
                    ["provision", "optics"], ["provision", "check"]):
            r = CliRunner().invoke(build(), [*cmd, SPEC, "-i", INV, "--hosts", hosts])
            assert r.exit_code == 2 and msg in r.stderr, (cmd, r.stderr)


def test_a_host_that_cannot_be_reached_is_exit_4_with_the_json_as_before(monkeypatch, tmp_path):
    # a closed port on 127.0.0.1: refused at once (the inventory's own addresses are documentation ones)
    text = open(INV).read().replace("address: 192.0.2.11, port: 22", "address: 127.0.0.1, port: 1")
    assert "127.0.0.1" in text
    inv = tmp_path / "inv.yaml"
    inv.write_text(text)
    monkeypatch.setenv("MFCTL_CONNECT_TIMEOUT", "2")
    r = CliRunner().invoke(build(), ["provision", "plan", SPEC, "-i", str(inv), "--hosts", "gpu01", "--json"])
    doc = json.loads(r.stdout)
    assert r.exit_code == 4 and doc["schema"] == "mfctl.provision.plan/v1" and doc["changes"] == 0
    [h] = doc["hosts"]
    assert h["host"] == "gpu01" and h["actions"] == [] and "127.0.0.1:1" in h["error"]
    r = CliRunner().invoke(build(), ["firmware", "check", SPEC, "-i", str(inv), "--hosts", "gpu01", "--json"])
    doc = json.loads(r.stdout)
    assert r.exit_code == 4 and doc["drift"] == 0 and [n["status"] for n in doc["nics"]] == ["unreachable"]
