"""Issue 16 items 1, 4, 5: the breakout grammar and each card's split layouts, the lanes' netdevs
discovered from devlink after a split (not predicted), the mock card's split as ConnectX firmware
does it (MODULE_SPLIT_M0 + NUM_OF_PF, sub-port k = PCI function k)."""

import json

import pytest

from mfctl.hosts import iproute, mellanox
from mfctl.inventory import load_inventory
from mfctl.mock.nics.state import NICState
from mfctl.provision import breakout
from mfctl.provision.actions import HostActual
from mfctl.provision.models import load_spec
from mfctl.provision.steps import links
from support import ROOT

BREAKOUT = ROOT / "inventory" / "mfabric-breakout.yaml"
SPEC = ROOT / "playbooks" / "provision.yaml"


@pytest.mark.parametrize("text", ["banana", "2x", "x50G", "0x50G", "2x50", "2X50G", "2x-50G", "2x0G", " 2x50G", "100G"])
def test_the_grammar_refuses_what_is_not_NxSPEEDG(text):
    with pytest.raises(ValueError, match="is not a breakout: expected NxSPEEDG"):
        breakout.parse(text)


def test_the_grammar_reads_sub_ports_and_speed():
    assert breakout.parse("2x50G") == breakout.Breakout(2, 50.0)
    assert breakout.parse("8x12.5G") == breakout.Breakout(8, 12.5) and str(breakout.parse("8x12.5G")) == "8x12.5G"
    assert breakout.parse("1x100G").total_gbps == 100.0


class _Nic:
    def __init__(self, breakout="1x100G", lanes=1, model="ConnectX-6 Dx", speed=100.0, optics="100G-CWDM4",
                 cable="duplex-lc", role="ocs"):
        self.breakout, self.lanes, self.model, self.speed_gbps = breakout, [object()] * lanes, model, speed
        self.optics, self.cable, self.role = optics, cable, role


def test_impossible_breakouts_are_refused_with_the_reason():
    # the issue's three: 8x12.5G with 8 lanes on a 4-lane 100G card, 2x50G with 3 lanes, banana
    assert breakout.check_nic(_Nic("8x12.5G", 8)) == [
        ("breakout", "ConnectX-6 Dx splits a port only into 1 (firmware-tested layouts), not 8"),
        ("breakout", "8x12.5G needs 8 sub-ports on ConnectX-6 Dx's 4-lane port"),
        ("optics", "100G-CWDM4 carries all 4 channels on one duplex LC fibre pair: it cannot break out to 8 "
                   "destinations (parallel optics on MPO, SR4/PSM4/DR4 class, can)"),
        ("cable", "sub-ports to 8 OCS port pairs need an MPO fan-out (breakout) cable, not duplex-lc")]
    assert breakout.check_nic(_Nic("2x50G", 3, "ConnectX-7", optics="100G-SR4", cable="mpo-fanout")) == [
        ("lanes", "breakout 2x50G has 2 sub-port(s) but the inventory lists 3 lane(s)")]
    assert breakout.check_nic(_Nic("banana")) == [
        ("breakout", "'banana' is not a breakout: expected NxSPEEDG (sub-ports x Gbit/s each), e.g. 1x100G, 2x50G, "
                     "4x25G, 2x200G")]
    assert breakout.check_nic(_Nic("2x40G", 2, "ConnectX-7", optics="100G-SR4", cable="mpo-fanout")) == [
        ("breakout", "breakout 2x40G is 80 Gbit/s but the port is 100 Gbit/s"),
        ("optics", "a 40G sub-port on 2 channel(s) of 100G-SR4 runs at 50G")]
    assert ("breakout", "ConnectX-7 splits a port only into 1 or 2 (firmware-tested layouts), not 4") in \
        breakout.check_nic(_Nic("4x25G", 4, "ConnectX-7", optics="100G-SR4", cable="mpo-fanout"))


def test_a_breakout_needs_parallel_optics_on_a_fan_out():
    ok = _Nic("2x50G", 2, "ConnectX-7", optics="100G-SR4", cable="mpo-fanout")
    assert breakout.check_nic(ok) == []
    assert breakout.check_nic(_Nic("2x50G", 2, "ConnectX-7", optics="100G-CWDM4", cable="duplex-lc")) == [
        ("optics", "100G-CWDM4 carries all 4 channels on one duplex LC fibre pair: it cannot break out to 2 "
                   "destinations (parallel optics on MPO, SR4/PSM4/DR4 class, can)"),
        ("cable", "sub-ports to 2 OCS port pairs need an MPO fan-out (breakout) cable, not duplex-lc")]
    assert breakout.check_nic(_Nic("2x50G", 2, "ConnectX-7", optics="100G-SR4", cable="mpo-12")) == [
        ("cable", "sub-ports to 2 OCS port pairs need an MPO fan-out (breakout) cable, not mpo-12")]
    assert breakout.check_nic(_Nic(optics="100G-SR4", cable="duplex-lc")) == [
        ("cable", "a duplex-lc cable does not plug into 100G-SR4's MPO-12 connector")]
    assert breakout.check_nic(_Nic(model="ConnectX-9")) == []  # unsplit: nothing to know about the card
    assert breakout.check_nic(_Nic("2x50G", 2, "ConnectX-9", optics="100G-SR4", cable="mpo-fanout")) == [
        ("model", "no split capability is known for model 'ConnectX-9' (known: ConnectX-6, ConnectX-6 Dx, ConnectX-7): "
                  "breakout 2x50G cannot be checked, so it is refused")]


def test_the_split_layout_is_the_firmware_array_and_the_pf_count():
    lay = breakout.split_layout(breakout.CARDS["ConnectX-7"], 2)
    assert [lay[f"MODULE_SPLIT_M0[{i}]"] for i in range(16)] == ["1", "1", "2", "2"] + ["FF"] * 12
    assert lay["NUM_OF_PF"] == "2" and len(lay) == 17
    assert [breakout.split_layout(breakout.CARDS["ConnectX-7"], 1)[f"MODULE_SPLIT_M0[{i}]"] for i in range(4)] == ["1"] * 4


def test_sub_ports_use_their_own_module_channels():
    inv = load_inventory(BREAKOUT)
    nic0, nic1 = inv.host("gpu01").nics[:2]
    assert [nic0.subport_channels(lane) for lane in nic0.lanes] == [[1, 2], [3, 4]]
    assert nic1.subport_channels(nic1.lanes[0]) == [1, 2, 3, 4]
    assert breakout.subport_pci("0000:0c:00.0", 1) == "0000:0c:00.1"


# --- discovery: the host's devlink says which netdev each lane is ---------------------------

def _devlink(*ports) -> dict:
    """``devlink -j port show`` of mlx5 (kernel < 6.5 naming, as in ironcore-dev/dpservice#499)."""
    return mellanox.parse_devlink_ports(json.dumps({"port": {
        f"pci/{pci}/{(int(pci[-1]) << 16) | 0xFFFF}": {"type": "eth", "netdev": nd, "flavour": "physical", "port": k,
                                                       "splittable": False} for k, (pci, nd) in enumerate(ports)}}))


def _actual(ports: dict, ifaces: dict[str, int]) -> HostActual:
    return HostActual(fw={}, mlx={}, ports=ports, ifaces={n: iproute.Iface(n, mtu, True, []) for n, mtu in ifaces.items()},
                      qos={}, gpus=[])


def test_discovery_maps_each_lane_to_its_pci_function():
    ports = _devlink(("0000:0c:00.0", "ens1f0np0"), ("0000:0c:00.1", "ens1f1np1"), ("0000:12:00.0", "ens2f0np0"))
    assert breakout.discover(ports, "0000:0c:00.0", 2) == {0: ("pci/0000:0c:00.0/65535", "ens1f0np0"),
                                                          1: ("pci/0000:0c:00.1/131071", "ens1f1np1")}
    assert breakout.discover(ports, "0000:12:00.0", 2) == {0: ("pci/0000:12:00.0/65535", "ens2f0np0")}


def test_a_lane_the_inventory_names_otherwise_is_a_finding_with_both_names_and_its_device_is_configured():
    inv = load_inventory(BREAKOUT)
    h = inv.host("gpu01").model_copy(deep=True)
    h.nics[0].lanes[0].netdev, h.nics[0].lanes[1].netdev = "ens1f0np0s0", "ens1f0np0s1"  # the switch convention
    h.nics = h.nics[:1]
    act = _actual(_devlink(("0000:0c:00.0", "ens1f0np0"), ("0000:0c:00.1", "ens1f1np1")),
                  {"ens1f0np0": 1500, "ens1f1np1": 9000})
    acts = links._plan_lanes(0, h, act, load_spec(SPEC), set())
    found = [(a.target, a.outcome, a.after) for a in acts if a.what == "netdev name"]
    assert found == [
        ("ens1f0np0", links.OUTCOME_NAME, "the inventory names nic0 lane 0 'ens1f0np0s0' but the host calls PCI "
                                          "0000:0c:00.0 'ens1f0np0': correct the inventory's netdev"),
        ("ens1f1np1", links.OUTCOME_NAME, "the inventory names nic0 lane 1 'ens1f0np0s1' but the host calls PCI "
                                          "0000:0c:00.1 'ens1f1np1': correct the inventory's netdev")]
    assert all(not a.is_drift and not a.runs for a in acts if a.what == "netdev name")
    assert [a.argvs for a in acts if a.what == "MTU"] == [[["ip", "link", "set", "dev", "ens1f0np0", "mtu", "9000"]]]
    assert {a.target for a in acts if a.what == "address"} == {"ens1f0np0", "ens1f1np1"}


def test_a_lane_with_no_port_on_the_host_names_the_pci_function_not_cannot_find_device():
    h = load_inventory(BREAKOUT).host("gpu01").model_copy(deep=True)
    h.nics = h.nics[:1]
    act = _actual(_devlink(("0000:0c:00.0", "ens1f0np0")), {"ens1f0np0": 9000})
    [missing] = [a for a in links._plan_lanes(0, h, act, load_spec(SPEC), set()) if a.what == "netdev"]
    assert missing.manual == ("the host has no network device for nic0 lane 1 (no devlink port at PCI 0000:0c:00.1; "
                              "the inventory expects ens1f1np1)")


def test_before_the_reset_the_split_lanes_are_after_reset_placeholders():
    h = load_inventory(BREAKOUT).host("gpu01").model_copy(deep=True)
    h.nics = h.nics[:1]
    act = _actual(_devlink(("0000:0c:00.0", "ens1f0np0")), {"ens1f0np0": 9000})
    acts = links._plan_lanes(0, h, act, load_spec(SPEC), {"0000:0c:00.0"})
    assert [(a.what, a.target, a.before) for a in acts] == [
        ("MTU (after reset)", "ens1f0np0", "1500"), ("address (after reset)", "ens1f0np0", "none"),
        ("MTU (after reset)", "ens1f1np1", "1500"), ("address (after reset)", "ens1f1np1", "none")]


# --- the mock card splits as the firmware does -----------------------------------------------

def test_the_mock_card_splits_into_pci_functions_after_its_firmware_says_so():
    cx7 = NICState("nic0", "0000:0c:00.0", "MCX715105AS-WEAT_Ax", "MT_0000001244", 100, "ens1", model="ConnectX-7",
                   wired=2)
    assert cx7.netdevs == ["ens1f0np0"] and cx7.firmware_split() == 1
    cx7.mlx_current.update(breakout.split_layout(breakout.CARDS["ConnectX-7"], 2))
    assert cx7.firmware_split() == 2
    cx7.split = 2
    assert cx7.netdevs == ["ens1f0np0", "ens1f1np1"] and cx7.pci_of(1) == "0000:0c:00.1"
    assert cx7.subport_channels(1) == [3, 4]
    assert cx7.refuse_setting("MODULE_SPLIT_M0[0]", "3") == (
        "-E- The Device doesn't support value 3 for MODULE_SPLIT_M0[0] (ports 1..2 or FF on ConnectX-7)")
    assert cx7.refuse_setting("NUM_OF_PF", "4") == "-E- The Device doesn't support value 4 for NUM_OF_PF (1..2 on ConnectX-7)"
    assert cx7.refuse_setting("MODULE_SPLIT_M0[3]", "2") is None and cx7.refuse_setting("NUM_OF_PF", "2") is None
    cx6 = NICState("nic1", "0000:12:00.0", "MCX623106AN-CDA_Ax", "MT_0000000359", 100, "ens2")
    assert not any(k.startswith(("MODULE_SPLIT", "NUM_OF_PF")) for k in cx6.mlx_current)  # nothing to split with


def test_from_linux_6_5_devlink_names_no_pci_so_the_parent_device_says_which_lane_is_which():
    """mlx5's devlink ports are ``auxiliary/mlx5_core.eth.N/…`` from Linux 6.5 (ironcore-dev/dpservice#499):
    the lane is then found by ``ip -d -j link show``'s ``parentdev``; the mock prints both."""
    from mfctl.mock.nics import links as mock_links
    from mfctl.mock.nics.state import HostConfig

    class _Host:
        lanes: list = []

    cfg = HostConfig(_Host(), factory=True)
    cfg.add_nic(NICState("nic0", "0000:0c:00.0", "MCX715105AS-WEAT_Ax", "MT_0000001244", 100, "ens1", split=2,
                         model="ConnectX-7", wired=2), factory=True)
    cfg.devlink_bus = "auxiliary"
    out: list[str] = []
    assert mock_links.devlink(cfg, ["-j", "port", "show"], out.append, out.append) == 0
    ports = mellanox.parse_devlink_ports(out[0])
    assert sorted(p.name for p in ports.values()) == ["auxiliary/mlx5_core.eth.0/65535", "auxiliary/mlx5_core.eth.1/131071"]
    assert breakout.discover(ports, "0000:0c:00.0", 2) == {}  # no PCI address in devlink's names
    assert cfg.link_details("ens1f1np1") == {"phys_port_name": "p1", "parentbus": "pci", "parentdev": "0000:0c:00.1"}
    ip_d = json.dumps([{"ifname": "eno1", "parentbus": "pci", "parentdev": "0000:01:00.0"},
                       {"ifname": "ens1f0np0", **cfg.link_details("ens1f0np0")},
                       {"ifname": "ens1f1np1", **cfg.link_details("ens1f1np1")}, {"ifname": "lo"}])
    parents = breakout.parse_link_parents(ip_d)
    assert breakout.discover(ports, "0000:0c:00.0", 2, parents) == {0: ("parentdev 0000:0c:00.0", "ens1f0np0"),
                                                                   1: ("parentdev 0000:0c:00.1", "ens1f1np1")}
    act = _actual(ports, {"ens1f0np0": 9000, "ens1f1np1": 9000})
    act.more[links.MORE_KEY] = parents
    nic0 = load_inventory(BREAKOUT).host("gpu01").nics[0]
    assert [links.lane_netdev(act, nic0, lane) for lane in nic0.lanes] == ["ens1f0np0", "ens1f1np1"]


def test_a_split_array_shown_as_Array_is_queried_by_element_and_planned():
    """``mlxconfig -e q`` shows ``MODULE_SPLIT_M0  Array[0..15]`` on a real ConnectX-7: the elements and
    NUM_OF_PF are asked for by name, then only the differing elements are set."""
    hdr = ("\nDevice #1:\n----------\n\nDevice type:        ConnectX7\nName:               MCX715105AS-WEAT_Ax\n"
           "Device:             0000:0c:00.0\n\n")
    first = hdr + ("Configurations:                                      Default         Current         Next Boot\n"
                   "        MODULE_SPLIT_M0                             Array[0..15]    Array[0..15]    Array[0..15]\n"
                   "        NUM_OF_PF                                   1               1               1\n")
    rows = "".join(f"        MODULE_SPLIT_M0[{i}]{'':<26}{v:<16}{v:<16}{v}\n"
                   for i, v in enumerate(["1", "1", "1", "1"] + ["FF"] * 12))
    elements = hdr + "Configurations:                                      Default         Current         Next Boot\n" + rows + \
        "        NUM_OF_PF                                   1               1               1\n"

    class _Pool:
        calls: list = []

        def run_checked(self, host, argv):
            self.calls.append(argv)
            return elements

    nic0 = load_inventory(BREAKOUT).host("gpu01").model_copy(deep=True)
    nic0.nics = nic0.nics[:1]
    act = _actual(_devlink(("0000:0c:00.0", "ens1f0np0")), {"ens1f0np0": 9000})
    act.mlx["0000:0c:00.0"] = mellanox.parse_mlxconfig(first)[0]
    pool = _Pool()
    assert links.read_links(pool, nic0, act) == {}  # devlink names ports by PCI: no ip -d
    assert pool.calls == [["mlxconfig", "-d", "0000:0c:00.0", "-e", "q", "MODULE_SPLIT_M0[0..15]", "NUM_OF_PF"]]
    reset: set = set()
    [a] = links._plan_breakout(nic0.nics[0], act, reset, set())
    assert a.argvs == [["mlxconfig", "-y", "-d", "0000:0c:00.0", "set", "MODULE_SPLIT_M0[2]=2", "MODULE_SPLIT_M0[3]=2",
                        "NUM_OF_PF=2"]] and reset == {"0000:0c:00.0"}


def test_an_unused_lane_reads_the_same_as_FF_0xFF_or_255():
    assert {links._split_value(v) for v in ("FF", "0xFF", "0xff", "255", "ff")} == {"FF"}
    assert links._split_value("2") == "2" and links._split_value(None) == ""
