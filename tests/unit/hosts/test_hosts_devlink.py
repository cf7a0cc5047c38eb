"""``devlink port show`` plain text (issue 19 item 10) on a real capture (ice, switchdev, 4 VFs);
values read off the file by hand."""

from __future__ import annotations

import pytest

from mfctl.errors import ParseError
from mfctl.hosts.devlink import parse_port_show
from mfctl.hosts.mellanox import DevlinkPort
from support import DATA

ICE = (DATA / "devlink" / "port-show-ice-switchdev-4vfs.txt").read_text()


def test_physical_ports_and_vfs_by_netdev():
    ports = parse_port_show(ICE)
    assert list(ports) == ["enp8s0f0np0", "enp8s0f0npf0vf0", "enp8s0f0npf0vf3", "enp8s0f0npf0vf1", "enp8s0f0npf0vf2",
                           "enp8s0f1np1"]
    p0 = ports["enp8s0f0np0"]
    assert isinstance(p0, DevlinkPort)  # the JSON parser's type: callers take either
    assert (p0.name, p0.flavour, p0.splittable, p0.lanes, p0.port, p0.type) == (
        "pci/0000:08:00.0/0", "physical", True, 8, 0, "eth")
    vf = ports["enp8s0f0npf0vf2"]
    assert (vf.flavour, vf.controller, vf.pfnum, vf.vfnum, vf.external, vf.splittable, vf.lanes) == (
        "pcivf", 0, 0, 2, False, False, None)
    assert vf.nested == {"function": {"hw_addr": "1a:62:c6:4b:d2:f0"}}
    assert ports["enp8s0f1np1"].port == 1 and ports["enp8s0f1np1"].splittable is False


def test_an_odd_key_value_line_and_an_orphan_indented_line_are_parse_errors():
    with pytest.raises(ParseError) as e:
        parse_port_show("pci/0000:08:00.0/0: type eth netdev\n")
    assert (e.value.tool, e.value.line_no) == ("devlink port show", 1)
    with pytest.raises(ParseError) as e:
        parse_port_show("  function:\n")
    assert e.value.line_no == 1
    with pytest.raises(ParseError):
        parse_port_show("   \n")
