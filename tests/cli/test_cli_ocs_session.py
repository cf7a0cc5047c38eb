"""mfctl ocs … against the mock testbed, through the real CLI and a real serial line."""

import json
import subprocess

import pytest

from mfctl import mockctl
from mfctl.inventory import load_inventory
from mfctl.ocs.identity import journal_path, known_identity
from mfctl.ocs.journal import Journal
from support import PROTOTYPE, mfctl_cmd


@pytest.fixture
def mock(tmp_path, cli_env, monkeypatch):
    st = mockctl.start(PROTOTYPE, tmp_path / "mock", time_scale=100)
    monkeypatch.setenv("MFCTL_STATE_DIR", cli_env["MFCTL_STATE_DIR"])
    yield st["inventory"], cli_env
    mockctl.stop(tmp_path / "mock")


def ocs(env, inv, *args, check=None):
    r = subprocess.run(mfctl_cmd("ocs", *args, "-i", inv), capture_output=True, text=True, env=env, timeout=60)
    if check is not None:
        assert r.returncode == check, (args, r.returncode, r.stdout[-1500:], r.stderr[-1500:])
    return r


def test_operator_session(mock, tmp_path):
    inv, env = mock
    s = json.loads(ocs(env, inv, "show", "--json", check=0).stdout)
    assert s["cross_connects"] == [] and s["endpoint"].startswith("serial:/dev/pts/")
    # dry run: the diff, exit 6, nothing changed
    r = ocs(env, inv, "connect", "gpu01/nic0", "gpu02/nic1.0", "--dry-run", "--json", check=6)
    assert json.loads(r.stdout)["diff"]["add"] == [[1, 389], [5, 385]]
    assert json.loads(ocs(env, inv, "show", "--json", check=0).stdout)["cross_connects"] == []
    # not at a terminal and no --yes: refused with a usage error
    r = ocs(env, inv, "connect", "gpu01/nic0", "gpu02/nic1.0", check=2)
    assert "--yes" in r.stderr
    r = ocs(env, inv, "connect", "gpu01/nic0", "gpu02/nic1.0", "--yes", "--json", check=0)
    assert json.loads(r.stdout)["result"]["verified"] is True
    s = json.loads(ocs(env, inv, "show", "--json", check=0).stdout)
    assert [c["from"] for c in s["cross_connects"]] == ["gpu01/nic0.0 tx", "gpu02/nic1.0 tx"]
    assert len(s["circuits"]) == 1
    # a port already in use is refused unless --replace
    r = ocs(env, inv, "connect", "gpu01/nic0", "gpu03/nic0", "--yes", check=2)
    assert "already" not in r.stdout and "is connected to" in r.stderr
    # power: the circuit's receivers see tx (+1 dBm) minus 1 dB insertion loss; nothing flagged
    p = json.loads(ocs(env, inv, "power", "--json", check=0).stdout)
    rx = {r["port"]: r for r in p["ports"] if r["connected"] and r["port"] > 384}
    assert {k: v["dbm"] for k, v in rx.items()} == {385: 0.0, 389: 0.0} and p["flagged"] == 0
    # a cross-connect from a dark input raises LOS, flagged by power and alarms (exit 1)
    ocs(env, inv, "connect", "300", "700", "--yes", check=0)
    p = json.loads(ocs(env, inv, "power", "--json", check=1).stdout)
    assert [r["port"] for r in p["ports"] if r["status"] == "dark"] == [700]
    a = json.loads(ocs(env, inv, "alarms", "--json", check=1).stdout)
    st = a["standing"][0]
    assert (st["aid"], st["severity"], st["condition"], st["service"]) == ("700", "MJ", "LOS", "SA")
    assert st["description"] == "Loss of signal"
    ocs(env, inv, "disconnect", "300", "--yes", check=0)
    # disconnect a lane removes its whole circuit
    ocs(env, inv, "disconnect", "gpu02/nic1", "--yes", check=0)
    assert json.loads(ocs(env, inv, "show", "--json", check=0).stdout)["cross_connects"] == []
    # apply a file: exactly that state
    f = tmp_path / "topo.yaml"
    f.write_text("circuits:\n  - [gpu01/nic0, gpu02/nic0]\n  - [gpu03/nic0, gpu04/nic0]\ncross_connects:\n  - [100, 500]\n")
    r = ocs(env, inv, "apply", str(f), "--yes", "--json", check=0)
    assert len(json.loads(r.stdout)["result"]["readback"]) == 5
    ocs(env, inv, "apply", str(f), "--dry-run", check=0)  # idempotent: nothing to change
    saved = tmp_path / "saved.json"  # `ocs show --json` output goes back in as a desired state
    saved.write_text(ocs(env, inv, "show", "--json", check=0).stdout)
    ocs(env, inv, "apply", str(saved), "--dry-run", check=0)
    bad = tmp_path / "bad.yaml"
    for text, line, msg in [
        ("circuits:\n  - [gpu01/nic0, gpu09/nic0]\n", 2, "gpu09"),
        ("cross_connects:\n  - [1, 385]\n  - [1, 386]\n", 3, "port 1 is already used"),
        ("cross_connects:\n  - [1, 388]\ncircuits:\n  - [gpu01/nic0, gpu02/nic0]\n", 4, "already used by cross-connect 1->388"),
        ("cross_connects:\n  - [1, 999]\n", 2, "not an output port"),
        ("cross_connects:\n", 1, "must be a list"),
    ]:
        bad.write_text(text)
        r = ocs(env, inv, "apply", str(bad), "--yes", check=3)
        assert f"bad.yaml:{line}" in r.stderr and msg in r.stderr, (text, r.stderr)
    # out-of-range ports on the command line are usage errors
    r = ocs(env, inv, "connect", "0", "390", "--yes", check=2)
    assert "not an input port" in r.stderr
    # the journal has every change; nothing pending
    j = json.loads(ocs(env, inv, "journal", "--json", "--last", "200", check=0).stdout)
    ops = [r["op"] for r in j["records"]]
    assert ops.count("ocs.intent") == ops.count("ocs.outcome") == 5 and j["pending"] is None
    r = ocs(env, inv, "recover", check=0)
    assert "nothing to recover" in r.stdout
    # delete-all needs --all and confirmation
    ocs(env, inv, "disconnect", "--all", check=2)
    ocs(env, inv, "disconnect", "--all", "--yes", check=0)
    assert json.loads(ocs(env, inv, "show", "--json", check=0).stdout)["cross_connects"] == []


def test_recover_an_interrupted_change(mock):
    inv, env = mock
    # an apply that was killed after its intent: nothing reached the device
    jpath = journal_path(known_identity(load_inventory(inv)))
    Journal(jpath).append("ocs.intent", apply_id="deadbeef0001", ocs="ocs1", reason="killed", before=[],
                          desired=[[1, 388], [4, 385]], diff={})
    r = ocs(env, inv, "journal", check=0)
    assert "did not finish" in r.stdout
    r = ocs(env, inv, "recover", "--dry-run", "--json", check=6)
    assert json.loads(r.stdout)["diff"]["add"] == [[1, 388], [4, 385]]
    r = ocs(env, inv, "recover", "--yes", "--json", check=0)
    assert json.loads(r.stdout)["mode"] == "complete"
    assert [[x["in"], x["out"]] for x in json.loads(ocs(env, inv, "show", "--json", check=0).stdout)["cross_connects"]] == [[1, 388], [4, 385]]
    assert ocs(env, inv, "recover", check=0).stdout.startswith("nothing to recover")
