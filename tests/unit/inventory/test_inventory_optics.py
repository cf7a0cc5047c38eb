"""Issue 16 items 1 and 5: an inventory's breakout, optics and cable are checked per NIC at load
(`inventory validate` exit 3, file:line naming the NIC); each sub-port has its own OCS port pair."""

import pytest
from typer.testing import CliRunner

from mfctl.cli.app import build
from mfctl.errors import ConfigError
from mfctl.inventory import load_inventory
from support import PROTOTYPE, ROOT

BREAKOUT = ROOT / "inventory" / "mfabric-breakout.yaml"
NIC0 = '''      - name: nic0
        model: ConnectX-7
        pci: "0000:0c:00.0"
        speed_gbps: 100
        breakout: 2x50G
        optics: 100G-SR4
        cable: mpo-fanout
        numa_node: 0
        role: ocs
        lanes:
          - {index: 0, netdev: ens1f0np0, ocs_tx: 1, ocs_rx: 385}
          - {index: 1, netdev: ens1f1np1, ocs_tx: 2, ocs_rx: 386}
'''


def _line(text: str, needle: str) -> int:
    """The line of the first ``needle`` in gpu01's nic0."""
    start = text.index("      - name: nic0")
    return text[: text.index(needle, start)].count("\n") + 1


def _variant(tmp_path, old: str, new: str) -> tuple:
    text = BREAKOUT.read_text()
    assert text.count(NIC0) == 1 and old in NIC0
    text = text.replace(NIC0, NIC0.replace(old, new))
    p = tmp_path / "inv.yaml"
    p.write_text(text)
    return p, text


def test_the_shipped_inventories_are_buildable():
    assert len(load_inventory(BREAKOUT, cached=False).host("gpu01").ocs_lanes()) == 4
    nic = load_inventory(PROTOTYPE, cached=False).host("gpu01").nics[0]
    assert (nic.optics, nic.cable, nic.breakout) == ("100G-CWDM4", "duplex-lc", "1x100G")  # the defaults


@pytest.mark.parametrize("old,new,key,msg", [
    ("breakout: 2x50G", "breakout: banana", "breakout: banana",
     "gpu01/nic0: 'banana' is not a breakout: expected NxSPEEDG"),
    ("breakout: 2x50G", "breakout: 8x12.5G", "lanes:",
     "gpu01/nic0: breakout 8x12.5G has 8 sub-port(s) but the inventory lists 2 lane(s)"),
    ("          - {index: 1, netdev: ens1f1np1, ocs_tx: 2, ocs_rx: 386}\n",
     "          - {index: 1, netdev: ens1f1np1, ocs_tx: 2, ocs_rx: 386}\n"
     "          - {index: 2, netdev: ens1f2np2, ocs_tx: 300, ocs_rx: 700}\n", "lanes:",
     "gpu01/nic0: breakout 2x50G has 2 sub-port(s) but the inventory lists 3 lane(s)"),
    ("optics: 100G-SR4", "optics: 100G-CWDM4", "optics: 100G-CWDM4",
     "gpu01/nic0: 100G-CWDM4 carries all 4 channels on one duplex LC fibre pair: it cannot break out to 2 destinations"),
    ("cable: mpo-fanout", "cable: mpo-12", "cable: mpo-12",
     "gpu01/nic0: sub-ports to 2 OCS port pairs need an MPO fan-out (breakout) cable, not mpo-12"),
    ("model: ConnectX-7", "model: ConnectX-6 Dx", "breakout: 2x50G",
     "gpu01/nic0: ConnectX-6 Dx splits a port only into 1 (firmware-tested layouts), not 2"),
    ("optics: 100G-SR4", "optics: 400G-ZR", "optics: 400G-ZR", "gpu01/nic0: unknown optics '400G-ZR'"),
    ("ocs_tx: 2, ocs_rx: 386", "ocs_tx: 1, ocs_rx: 386", "ocs_tx: 1, ocs_rx: 386",
     "OCS port 1 used twice: gpu01/nic0 lane 1 and gpu01/nic0 lane 0"),  # each sub-port its own port pair
    ("ocs_tx: 2, ocs_rx: 386", "ocs_rx: 386", "ocs_rx: 386}", "optical lane gpu01/nic0 lane 1 has no ocs_tx port"),
    ("{index: 1,", "{index: 0,", "lanes:", "gpu01/nic0: lane indexes [0, 0] are not 0..1 once each"),
])
def test_an_impossible_breakout_is_a_config_error_at_its_line(tmp_path, old, new, key, msg):
    p, text = _variant(tmp_path, old, new)
    with pytest.raises(ConfigError) as e:
        load_inventory(p, cached=False)
    assert msg in str(e.value) and e.value.line == _line(text, key), str(e.value)


def test_inventory_validate_exits_3_naming_file_line_and_nic(tmp_path):
    p, text = _variant(tmp_path, "breakout: 2x50G", "breakout: banana")
    r = CliRunner().invoke(build(), ["inventory", "validate", str(p)])
    assert r.exit_code == 3
    assert f"{p}:{_line(text, 'breakout: banana')}: gpu01/nic0: 'banana' is not a breakout" in r.stderr
