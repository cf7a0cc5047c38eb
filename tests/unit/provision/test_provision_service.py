"""Provisioning: parsers on real captures, plan/apply/idempotence on the factory-state mock,
failures stop only their host, hostile input never reaches a shell."""

import json
import shlex
import subprocess

import pytest

from mfctl import mockctl
from mfctl.errors import ConfigError, ParseError
from mfctl.hosts import ethtool, mellanox
from mfctl.provision import service
from mfctl.provision.models import load_spec
from mfctl.transport.ssh import CommandResult
from support import DATA, PROTOTYPE, ROOT, mfctl_cmd, wait_until

pytestmark = pytest.mark.usefixtures("paramiko_mock_hosts")  # conftest.py: ~2x faster, same provisioning

SPEC = ROOT / "playbooks" / "provision.yaml"


# --- parsers against shared/corpus copies (values read off the files by hand) -----------

def test_ethtool_module_sff8636_healthy():
    m = ethtool.parse_module((DATA / "ethtool" / "m-sff8636-qsfp28-cwdm4-healthy.txt").read_text())
    assert m.layout == "SFF-8636" and m.part_number == "FTLC1152RGPL6-FB" and m.vendor == "FINISAR CORP."
    assert m.temperature_c == 33.76 and m.voltage_v == 3.2505
    assert m.rx_power_dbm == {1: -0.01, 2: -0.41, 3: -0.41, 4: -0.13}
    assert m.tx_power_dbm[4] == 0.62 and m.bias_ma[1] == 42.068
    assert m.rx_low_warning_dbm() == -12.0 and m.thresholds["rx_power_low_alarm_dbm"] == -16.0
    assert m.thresholds["temperature_high_alarm_c"] == 60.0 and m.flags_on == []


def test_ethtool_module_laser_disabled_is_missing_data_not_minus_40():
    m = ethtool.parse_module((DATA / "ethtool" / "m-sff8636-qsfp28-cwdm4-laser-disabled-alarms.txt").read_text())
    assert set(m.rx_power_dbm.values()) == {None} and set(m.tx_power_dbm.values()) == {None}
    assert m.bias_ma[1] == 0.0 and any("low alarm" in f for f in m.flags_on)


def test_ethtool_module_cmis_qsfpdd():
    m = ethtool.parse_module((DATA / "ethtool" / "m-cmis40-qsfpdd-400g-xdr4-temp-warning.txt").read_text())
    assert m.layout == "CMIS" and m.part_number == "QDD-400G-XDR4" and m.temperature_c == 70.49
    assert m.rx_power_dbm[1] == 3.52 and m.rx_power_dbm[5] is None  # "-inf dBm" is missing data
    assert m.rx_low_warning_dbm() == -6.9 and "Module temperature high warning" in m.flags_on


def test_ethtool_link_settings():
    up = ethtool.parse_link((DATA / "ethtool" / "link-cx4-40g-up.txt").read_text())
    assert (up.netdev, up.speed_mbps, up.duplex, up.link_detected) == ("ens16f1np1", 40000, "Full", True)
    down = ethtool.parse_link((DATA / "ethtool" / "link-cx4-40g-forced-unsupported-cable.txt").read_text())
    assert down.speed_mbps is None and not down.link_detected
    assert down.link_down_reason == "Cable issue, Unsupported cable"


def test_mlxconfig_query_and_set():
    q = mellanox.parse_mlxconfig((DATA / "mellanox" / "mlxconfig-q-cx7-osfp-ndr-truncated.txt").read_text())[0]
    assert q.device_type == "ConnectX7" and q.name == "MCX75310AAS-NEA_Ax" and q.columns == ["next_boot"]
    assert q.params["MODULE_SPLIT_M0"] == {"next_boot": "Array[0..15]"}
    assert q.params["MEMIC_ATOMIC"]["next_boot"] == "MEMIC_ATOMIC_ENABLE(2)"
    assert mellanox.value_code(q.params["MEMIC_SIZE_LIMIT"]["next_boot"]) == "1"
    s = mellanox.parse_mlxconfig((DATA / "mellanox" / "mlxconfig-set-cx6-vpi-reboot-required.txt").read_text())[0]
    assert s.columns == ["next_boot", "new"] and s.params["BOOT_VLAN"] == {"next_boot": "1", "new": "0"}
    assert s.params["BOOT_UNDI_NETWORK_WAIT"]["new"] == "30"


def test_mlxfwmanager_query():
    (d,) = mellanox.parse_mlxfwmanager((DATA / "mellanox" / "mlxfwmanager-query-spectrum-switch.txt").read_text())
    assert (d.device_type, d.part_number, d.psid) == ("Spectrum", "MSN2410-CxxxE_Ax", "MT_2860112033")
    assert d.fw_current == "13.1703.0000" and d.fw_available is None and d.running == "13.1703.0000"
    assert d.pci == "/dev/mst/mt52100_pci_cr0" and d.status == "No matching image found"


@pytest.mark.parametrize("fn,text", [
    (ethtool.parse_module, "Vendor name : X\n"),
    (ethtool.parse_module, "garbage line without separator\n"),
    (ethtool.parse_link, "Speed: 100Mb/s\n"),
    (mellanox.parse_mlxconfig, "-E- Failed to open device\n"),
    (mellanox.parse_mlxfwmanager, "Querying Mellanox devices firmware ...\n"),
    (mellanox.parse_mlnx_qos, "DCBX mode: OS controlled\n"),
    (mellanox.parse_devlink_ports, "{not json"),
])
def test_parsers_raise_typed_errors(fn, text):
    with pytest.raises(ParseError) as e:
        fn(text)
    assert "expected" in str(e.value)


# --- plan / apply / verify on the factory-state mock ------------------------------------

@pytest.fixture
def factory_mock(tmp_path, cli_env, monkeypatch):
    monkeypatch.setenv("MFCTL_STATE_DIR", cli_env["MFCTL_STATE_DIR"])
    st = mockctl.start(PROTOTYPE, tmp_path / "mock", time_scale=100, factory=True)
    yield st["inventory"], cli_env
    mockctl.stop(tmp_path / "mock")


def test_plan_apply_verify_idempotent(factory_mock):
    inv, env = factory_mock
    run = lambda *a: subprocess.run(mfctl_cmd(*a), capture_output=True, text=True, env=env, timeout=120)  # noqa: E731
    r = run("provision", "plan", SPEC, "-i", inv, "--json")
    assert r.returncode == 6, r.stderr
    plan = json.loads(r.stdout)
    h1 = plan["hosts"][0]["actions"]
    phases = [a["phase"] for a in h1]
    assert phases == sorted(phases, key=service.PHASES.index)  # safe order
    assert {"firmware", "firmware-reset", "links", "addresses", "qos", "gpu"} <= set(phases)
    fw = next(a for a in h1 if a["phase"] == "firmware")
    assert fw["before"] == "22.31.1014" and fw["after"] == "22.39.1002" and fw["needs"] == ["reset"]
    assert json.loads(run("firmware", "check", SPEC, "-i", inv, "--json").stdout)["drift"] == 16
    r = run("provision", "apply", SPEC, "-i", inv, "--json", "--yes")
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout)
    assert all(h["ok"] and not h["left_after_verify"] for h in out["hosts"])
    # idempotent: nothing left to do, a second apply changes nothing
    assert run("provision", "plan", SPEC, "-i", inv).returncode == 0
    again = json.loads(run("provision", "apply", SPEC, "-i", inv, "--json", "--yes").stdout)
    assert out["changes_planned"] == 4 * len(h1) and again["changes_planned"] == 0
    assert run("firmware", "check", SPEC, "-i", inv).returncode == 0


def test_optics_check_finds_a_swapped_fibre(factory_mock, tmp_path):
    import yaml

    inv, env = factory_mock
    run = lambda *a: subprocess.run(mfctl_cmd(*a), capture_output=True, text=True, env=env, timeout=120)  # noqa: E731
    topo = tmp_path / "c.yaml"
    topo.write_text("circuits:\n  - [gpu01/nic0, gpu02/nic0]\n  - [gpu03/nic1, gpu04/nic2]\n")
    assert run("ocs", "apply", topo, "-i", inv, "--yes").returncode == 0
    # once the modelled link-up is over (5.67 s / time scale 100)
    ok = wait_until(lambda: (d := json.loads(run("provision", "optics", SPEC, "-i", inv, "--json").stdout))["bad"] == 0 and d,
                    what="the lit lanes' optics ok")
    lanes = {(r["host"], r["lane"]): r for r in ok["lanes"]}
    assert ok["bad"] == 0 and lanes[("gpu01", "nic0.0")]["status"] == "ok"
    assert lanes[("gpu01", "nic0.0")]["rx_total_dbm"] == pytest.approx(0.0, abs=0.1)  # +1 dBm tx − 1 dB OCS loss
    assert lanes[("gpu01", "nic1.0")]["status"] == "no circuit"
    # the inventory says gpu01's nic0 and nic1 receivers sit on each other's OCS ports
    d = yaml.safe_load(open(inv))
    a, b = d["hosts"][0]["nics"][0]["lanes"][0], d["hosts"][0]["nics"][1]["lanes"][0]
    a["ocs_rx"], b["ocs_rx"] = b["ocs_rx"], a["ocs_rx"]
    swapped = tmp_path / "swapped.yaml"
    swapped.write_text(yaml.safe_dump(d))
    r = run("provision", "optics", SPEC, "-i", swapped, "--json")
    bad = [x for x in json.loads(r.stdout)["lanes"] if x["status"] == "bad"]
    assert r.returncode == 1 and [(x["host"], x["lane"]) for x in bad] == [("gpu01", "nic1.0")]
    assert "not wired to the port the inventory says" in " ".join(bad[0]["findings"])


# --- failures and hostile input -----------------------------------------------------------

class FakePool:
    """Records argv per host; fails one chosen command on one host."""

    fanout = 4

    def __init__(self, fail_host, fail_prog):
        self.fail_host, self.fail_prog = fail_host, fail_prog
        self.seen = {}

    def map(self, hosts, fn, **kw):  # the real fan-out, over this fake's run()
        from mfctl.transport.ssh import SSHPool

        return SSHPool.map(self, hosts, fn, **kw)

    def run(self, host, argv, timeout=None):
        self.seen.setdefault(host, []).append(list(argv))
        bad = host == self.fail_host and argv[0] == self.fail_prog
        return CommandResult(host, list(argv), rc=1 if bad else 0, stdout="", stderr="boom" if bad else "")


def test_a_failed_action_stops_only_its_host():
    acts = lambda: [service.Action("links", "x", "MTU", "1500", "9000", [["ip", "link", "set", "dev", "x", "mtu", "9000"]]),  # noqa: E731
                    service.Action("qos", "x", "RoCE QoS", "a", "b", [["mlnx_qos", "-i", "x"]]),
                    service.Action("gpu", "all", "persistence", "off", "on", [["nvidia-smi", "-pm", "1"]])]
    pool = FakePool("h2", "mlnx_qos")
    res = {r.host: r for r in service.apply(pool, [service.HostPlan(h, acts()) for h in ("h1", "h2", "h3")])}
    assert res["h1"].failed is None and len(res["h1"].applied) == 3
    assert res["h2"].failed["step"] == "qos: RoCE QoS on x" and "boom" in res["h2"].failed["error"]
    assert len(res["h2"].applied) == 1 and ["nvidia-smi", "-pm", "1"] not in pool.seen["h2"]
    assert res["h3"].failed is None


@pytest.mark.parametrize("old,new,msg", [
    ('address_pattern: "198.18.{nic}.{slot}/24"', 'address_pattern: "198.18.{nic}.{slot}/24; reboot"',
     "does not give an address"),
    ("  LINK_TYPE_P1: 2      # Ethernet", "  'LINK_TYPE_P1 $(reboot)': 2", "not an mlxconfig parameter name"),
    ("  LINK_TYPE_P1: 2      # Ethernet", "  LINK_TYPE_P1: '2; reboot'", "valid integer"),
    ("mtu: 9000", "mtu: '9000 && reboot'", "valid integer"),
])
def test_hostile_recipe_values_are_refused(tmp_path, old, new, msg):
    p = tmp_path / "p.yaml"
    text = SPEC.read_text()
    assert old in text
    p.write_text(text.replace(old, new).replace("../", str(ROOT) + "/"))
    with pytest.raises(ConfigError) as e:
        load_spec(p)
    assert msg in str(e.value) and e.value.exit_code == 3


def test_address_pattern_must_give_every_lane_its_own_address(tmp_path):
    from mfctl.inventory import load_inventory

    p = tmp_path / "p.yaml"
    p.write_text(SPEC.read_text().replace('"198.18.{nic}.{slot}/24"', '"198.18.{nic}.1/24"').replace("../", str(ROOT) + "/"))
    with pytest.raises(ConfigError, match="gives 198.18.0.1 to both gpu01/nic0.0 and gpu02/nic0.0"):
        load_spec(p).check_addresses(load_inventory(PROTOTYPE))
    load_spec(SPEC).check_addresses(load_inventory(ROOT / "inventory" / "mfabric-breakout.yaml"))  # distinct


def test_breakout_through_firmware_split_then_new_netdevs(tmp_path, cli_env, monkeypatch):
    monkeypatch.setenv("MFCTL_STATE_DIR", cli_env["MFCTL_STATE_DIR"])
    st = mockctl.start(ROOT / "inventory" / "mfabric-breakout.yaml", tmp_path / "mock", time_scale=100, factory=True)
    try:
        inv = st["inventory"]
        run = lambda *a: subprocess.run(mfctl_cmd(*a), capture_output=True, text=True, env=cli_env, timeout=120)  # noqa: E731
        plan = json.loads(run("provision", "plan", SPEC, "-i", inv, "--json", "--hosts", "gpu01").stdout)
        acts = plan["hosts"][0]["actions"]
        split = next(a for a in acts if a["what"].startswith("breakout"))
        assert split["before"] == "1 port(s)" and split["after"] == "2x50G: 2 ports" and split["needs"] == ["reset"]
        assert "MODULE_SPLIT_M0[2]=2 MODULE_SPLIT_M0[3]=2 NUM_OF_PF=2" in split["commands"][0]  # (issue 16: the array)
        # the split lanes are planned as the fresh netdevs that will appear after the reset
        assert {a["target"] for a in acts if a["what"] == "MTU (after reset)"} == {"ens1f0np0", "ens1f1np1"}
        r = run("provision", "apply", SPEC, "-i", inv, "--json", "--yes")
        assert r.returncode == 0, r.stdout + r.stderr
        assert run("provision", "plan", SPEC, "-i", inv).returncode == 0  # idempotent
        topo = tmp_path / "c.yaml"
        topo.write_text("circuits:\n  - [gpu01/nic0.1, gpu02/nic0.0]\n")
        assert run("ocs", "apply", topo, "-i", inv, "--yes").returncode == 0
        o = wait_until(lambda: (d := json.loads(run("provision", "optics", SPEC, "-i", inv, "--json").stdout))["bad"] == 0 and d,
                       what="the lit lanes' optics ok")
        ok = [(x["host"], x["lane"]) for x in o["lanes"] if x["status"] == "ok"]
        assert o["bad"] == 0 and ok == [("gpu01", "nic0.1"), ("gpu02", "nic0.0")]
    finally:
        mockctl.stop(tmp_path / "mock")


def test_every_word_reaches_the_host_as_one_argument():
    from mfctl.transport.ssh import quote_argv

    nasty = ["ip", "addr", "replace", "1.2.3.4/24", "dev", "x; reboot", "$(id)", "`id`", "a b", "'q\""]
    assert shlex.split(quote_argv(nasty)) == nasty
