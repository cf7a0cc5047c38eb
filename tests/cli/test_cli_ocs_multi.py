"""mfctl ocs with several OCSes (inventory/mfabric-2ocs.yaml on the mock: one emulator per OCS):
``--ocs NAME`` on every command, a usage error naming them when it is missing, and each OCS's
own journal and device lock."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mfctl.cli.app import build

TWO = Path(__file__).resolve().parents[2] / "inventory" / "mfabric-2ocs.yaml"
COMMANDS = [["show"], ["power"], ["alarms"], ["journal"], ["recover", "--dry-run"],
            ["connect", "gpu01/nic0", "gpu02/nic0", "--yes"], ["disconnect", "--all", "--yes"],
            ["apply", "t.yaml", "--yes"]]


def invoke(*args):
    return CliRunner().invoke(build(), [str(a) for a in args])


@pytest.fixture(scope="module")
def two_ocs(tmp_path_factory):
    """The mock of the 2-OCS inventory: its status (``inventory``, ``ocses``) and its emulators'
    endpoints. One per module: each test leaves both switches empty."""
    from mfctl import mockctl

    d = tmp_path_factory.mktemp("mock2")
    st = mockctl.start(TWO, d / "mock", time_scale=100, sshd="paramiko", timeout=90)  # (the hosts are not the point)
    try:
        yield st
    finally:
        mockctl.stop(d / "mock")


@pytest.mark.parametrize("cmd", COMMANDS)
def test_without_ocs_several_is_a_usage_error_naming_them(cmd, tmp_path):
    r = invoke("ocs", *cmd, "-i", TWO, "--json")
    err = json.loads(r.stdout)["error"]
    assert r.exit_code == 2 and err["type"] == "UsageError", r.stdout
    assert "has 2 OCSes: give --ocs NAME, one of ocs-a, ocs-b" in err["message"]
    r = invoke("ocs", *cmd, "-i", TWO, "--ocs", "ocs-c", "--json")
    assert r.exit_code == 2 and "no OCS 'ocs-c' in inventory mfabric-2ocs (it has ocs-a, ocs-b)" in r.stdout


@pytest.mark.parametrize("cmd", COMMANDS)
def test_a_repeated_ocs_is_a_usage_error_naming_both(cmd):
    """Click keeps the last of a repeated option: ``--ocs ocs-a --ocs ocs-b`` would silently work on
    ocs-b. It is refused (exit 2, before the inventory is read or a switch reached), naming both."""
    r = invoke("ocs", *cmd, "-i", TWO, "--ocs", "ocs-a", "--ocs=ocs-b", "--json")
    err = json.loads(r.stdout)["error"]
    assert r.exit_code == 2 and err["type"] == "UsageError", r.stdout
    assert err["message"] == "Invalid value for '--ocs': given 2 times ('ocs-a', 'ocs-b'): give --ocs once"
    r = invoke("ocs", *cmd, "-i", TWO, "--ocs", "ocs-a", "--ocs", "ocs-a")  # the same name twice: still a slip
    assert r.exit_code == 2 and "given 2 times ('ocs-a', 'ocs-a')" in r.stderr


def test_ocs_option_on_every_command_is_documented():
    for cmd in ("show", "connect", "disconnect", "apply", "power", "alarms", "journal", "recover"):
        r = invoke("ocs", cmd, "--help")
        assert r.exit_code == 0 and "--ocs" in r.stdout, cmd


def test_a_lane_of_the_other_ocs_is_refused_before_the_switch_is_reached():
    r = invoke("ocs", "connect", "gpu01/nic0", "gpu05/nic0", "-i", TWO, "--ocs", "ocs-a", "--yes", "--json")
    assert r.exit_code == 2 and json.loads(r.stdout)["error"]["message"] == \
        "no optical lane 'gpu05/nic0.0' on OCS ocs-a: it is on ocs-b (--ocs ocs-b)"
    r = invoke("ocs", "connect", "gpu01/nic0", "gpu09/nic0", "-i", TWO, "--ocs", "ocs-a", "--yes", "--json")
    assert r.exit_code == 2 and json.loads(r.stdout)["error"]["message"] == \
        "no optical lane 'gpu09/nic0.0' on OCS ocs-a in the inventory"  # on no OCS at all


def _show(inv, name):
    r = invoke("ocs", "show", "-i", inv, "--ocs", name, "--json")
    assert r.exit_code == 0, r.stdout + r.stderr
    return json.loads(r.stdout)


def test_each_command_works_on_the_named_ocs_only(two_ocs):
    inv = two_ocs["inventory"]
    r = invoke("ocs", "connect", "gpu01/nic0", "gpu02/nic0", "-i", inv, "--ocs", "ocs-a", "--yes", "--json")
    assert r.exit_code == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["ocs"] == "ocs-a"
    r = invoke("ocs", "connect", "gpu05/nic1", "gpu06/nic2", "-i", inv, "--ocs", "ocs-b", "--yes", "--json")
    assert r.exit_code == 0, r.stdout + r.stderr
    a, b = _show(inv, "ocs-a"), _show(inv, "ocs-b")
    # the same port numbers mean different lanes on the two switches: gpu01 tx 1 -> gpu02 rx 196 on ocs-a
    assert [(x["in"], x["out"]) for x in a["cross_connects"]] == [(1, 196), (4, 193)]
    assert [x["from"] for x in a["cross_connects"]] == ["gpu01/nic0.0 tx", "gpu02/nic0.0 tx"]
    assert [(x["in"], x["out"]) for x in b["cross_connects"]] == [(2, 198), (6, 194)]
    assert b["cross_connects"][0]["from"] == "gpu05/nic1.0 tx" and a["ocs"] == "ocs-a" and b["ocs"] == "ocs-b"
    assert a["endpoint"] != b["endpoint"]
    # power and alarms read the named switch: ocs-b's lit outputs are its own circuit's
    r = invoke("ocs", "power", "-i", inv, "--ocs", "ocs-b", "--json")
    lit = {p["port"] for p in json.loads(r.stdout)["ports"] if p["connected"]}
    assert json.loads(r.stdout)["ocs"] == "ocs-b" and lit == {2, 6, 194, 198}
    r = invoke("ocs", "alarms", "-i", inv, "--ocs", "ocs-a", "--json")
    assert json.loads(r.stdout)["ocs"] == "ocs-a"
    # each switch's journal holds its own change only, under its own device key
    ja = json.loads(invoke("ocs", "journal", "-i", inv, "--ocs", "ocs-a", "--json").stdout)
    jb = json.loads(invoke("ocs", "journal", "-i", inv, "--ocs", "ocs-b", "--json").stdout)
    assert ja["device"] != jb["device"] and ja["path"] != jb["path"] and (ja["ocs"], jb["ocs"]) == ("ocs-a", "ocs-b")
    intents = lambda j: [r["record"]["reason"] for r in j["records"] if r["op"] == "ocs.intent"]  # noqa: E731
    assert intents(ja) == ["connect gpu01/nic0 gpu02/nic0"] and intents(jb) == ["connect gpu05/nic1 gpu06/nic2"]
    assert {r["record"].get("ocs") for r in ja["records"] if r["op"] == "ocs.intent"} == {"ocs-a"}
    r = invoke("ocs", "recover", "-i", inv, "--ocs", "ocs-b", "--dry-run", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["pending"] is None
    # disconnect and apply, each on its own switch
    t = Path(inv).parent / "empty.yaml"
    t.write_text("cross_connects: []\n")
    r = invoke("ocs", "apply", t, "-i", inv, "--ocs", "ocs-a", "--yes", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["diff"]["delete"] == [[1, 196], [4, 193]]
    assert _show(inv, "ocs-a")["cross_connects"] == [] and len(_show(inv, "ocs-b")["cross_connects"]) == 2
    r = invoke("ocs", "disconnect", "--all", "-i", inv, "--ocs", "ocs-b", "--yes", "--json")
    assert r.exit_code == 0 and _show(inv, "ocs-b")["cross_connects"] == []


def test_one_ocs_locked_does_not_stop_a_change_on_the_other(two_ocs):
    from mfctl.inventory import load_inventory
    from mfctl.lock import DeviceLock
    from mfctl.ocs.identity import known_identity

    inv = two_ocs["inventory"]
    loaded = load_inventory(inv)
    key_a, key_b = known_identity(loaded, "ocs-a").key, known_identity(loaded, "ocs-b").key
    assert key_a != key_b
    with DeviceLock(key_a, "test holds ocs-a"):
        r = invoke("ocs", "connect", "gpu01/nic0", "gpu02/nic0", "-i", inv, "--ocs", "ocs-a", "--yes", "--json")
        assert r.exit_code == 5 and "test holds ocs-a" in r.stdout, r.stdout
        r = invoke("ocs", "connect", "gpu05/nic0", "gpu06/nic0", "-i", inv, "--ocs", "ocs-b", "--yes", "--json")
        assert r.exit_code == 0, r.stdout + r.stderr
    assert _show(inv, "ocs-a")["cross_connects"] == []
    r = invoke("ocs", "disconnect", "--all", "-i", inv, "--ocs", "ocs-b", "--yes")
    assert r.exit_code == 0


def test_health_shows_each_ocs_as_a_target_of_its_own(two_ocs):
    """``mfctl health --checks ocs``: one target per OCS, by its name; a dark connected output is
    its own switch's finding (ocs-b's), not the other's."""
    inv = two_ocs["inventory"]
    r = invoke("ocs", "connect", "7", "199", "-i", inv, "--ocs", "ocs-b", "--yes")  # gpu07 tx -> its own rx: lit
    assert r.exit_code == 0, r.stdout + r.stderr
    r = invoke("ocs", "connect", "20", "300", "-i", inv, "--ocs", "ocs-b", "--yes")  # no lane on port 20: dark
    assert r.exit_code == 0, r.stdout + r.stderr
    try:
        r = invoke("health", "-i", inv, "--checks", "ocs", "--json")
        doc = json.loads(r.stdout)
        targets = {t["host"]: t for t in doc["targets"] if t["host"].startswith("ocs-")}
        assert set(targets) == {"ocs-a", "ocs-b"}, doc["targets"]
        codes = {n: [f["code"] for f in t["findings"]] for n, t in targets.items()}
        assert codes["ocs-a"] == [] and "ocs.dark_port" in codes["ocs-b"], codes
        assert any("output port 300 is connected but dark" in f["message"] for f in targets["ocs-b"]["findings"])
        assert r.exit_code == 1
    finally:
        assert invoke("ocs", "disconnect", "--all", "-i", inv, "--ocs", "ocs-b", "--yes").exit_code == 0
