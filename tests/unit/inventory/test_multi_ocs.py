"""Several OCSes in one inventory (docs/ocs.md "Several OCSes"): ``ocs:`` one mapping or a list,
each region's lanes on its own OCS, and every way a region's lanes cannot be there an error at
the file's line."""

from pathlib import Path

import pytest

from mfctl.errors import ConfigError, UsageError
from mfctl.inventory import load_inventory
from support import PROTOTYPE

TWO = Path(__file__).resolve().parents[3] / "inventory" / "mfabric-2ocs.yaml"


def _mutate(tmp_path: Path, old: str, new: str, src: Path = TWO, count: int = 1) -> Path:
    text = src.read_text()
    assert text.count(old) >= count, old
    p = tmp_path / "bad.yaml"
    p.write_text(text.replace(old, new, count))
    return p


def _line(path: Path, needle: str, nth: int = 1) -> int:
    hits = [i for i, ln in enumerate(path.read_text().splitlines(), 1) if needle in ln]
    return hits[nth - 1]


def _error(path: Path) -> ConfigError:
    with pytest.raises(ConfigError) as e:
        load_inventory(path, cached=False)
    return e.value


def test_two_ocs_inventory_maps_each_region_to_its_own_switch():
    inv = load_inventory(TWO, cached=False)
    assert inv.ocs_names == ["ocs-a", "ocs-b"]
    assert [inv.region_ocs(r).name for r in inv.regions] == ["ocs-a", "ocs-b"]
    assert [r.name for r in inv.regions_on("ocs-b")] == ["region1"]
    assert inv.ocs_of_host("gpu04").name == "ocs-a" and inv.ocs_of_host("gpu05").name == "ocs-b"
    # ports are per OCS: gpu01 and gpu05 use the same port numbers, each on its own switch
    tx = {h: [lane.ocs_tx for _, lane in inv.host(h).ocs_lanes()] for h in ("gpu01", "gpu05", "gpu08")}
    assert tx == {"gpu01": [1, 2, 3], "gpu05": [1, 2, 3], "gpu08": [10, 11, 12]}
    assert inv.ocs_named("ocs-b").size.inputs == 192


def test_the_only_ocs_is_inv_ocs_and_several_need_a_name():
    one = load_inventory(PROTOTYPE)
    assert one.ocs.name == "ocs1" and one.ocs_named(None) is one.ocs and one.region_ocs(one.regions[0]) is one.ocs
    two = load_inventory(TWO)
    with pytest.raises(ConfigError, match=r"2 OCSes \(ocs-a, ocs-b\): name one"):
        _ = two.ocs
    with pytest.raises(UsageError, match="give --ocs NAME, one of ocs-a, ocs-b"):
        two.ocs_named(None)
    with pytest.raises(UsageError, match=r"no OCS 'ocs-c' in inventory mfabric-2ocs \(it has ocs-a, ocs-b\)"):
        two.ocs_named("ocs-c")


def test_single_mapping_dumps_as_a_mapping_and_a_list_as_a_list():
    one = load_inventory(PROTOTYPE).model_dump(mode="json")
    assert isinstance(one["ocs"], dict) and one["ocs"]["name"] == "ocs1"
    two = load_inventory(TWO).model_dump(mode="json")
    assert [o["name"] for o in two["ocs"]] == ["ocs-a", "ocs-b"]


def test_an_ocs_without_a_name_is_called_ocs(tmp_path):
    p = _mutate(tmp_path, "  name: ocs1\n", "", src=PROTOTYPE)
    assert load_inventory(p, cached=False).ocs.name == "ocs"


def test_a_single_mappings_errors_keep_their_line(tmp_path):
    p = _mutate(tmp_path, "size: {inputs: 384, outputs: 384}", "size: {inputs: 384, outputs: 2000}", src=PROTOTYPE)
    e = _error(p)
    assert e.line == _line(p, "size: {inputs: 384") and "ocs.size.outputs" in str(e)
    p = _mutate(tmp_path, "  switching_time_ms: 25\n", "  switching_tme_ms: 25\n", src=PROTOTYPE)
    e = _error(p)
    assert e.line == _line(p, "switching_tme_ms") and "did you mean 'switching_time_ms'" in str(e)


def test_listed_ocs_errors_name_the_entry(tmp_path):
    p = _mutate(tmp_path, "size: {inputs: 192, outputs: 192}", "size: {inputs: 192, outputs: 0}", count=1)
    e = _error(p)
    assert e.line == _line(p, "outputs: 0") and "ocs[0].size.outputs" in str(e)


def test_duplicate_ocs_name(tmp_path):
    p = _mutate(tmp_path, "  - name: ocs-b\n", "  - name: ocs-a\n")
    e = _error(p)
    assert e.line == _line(p, "- name: ocs-a", 2) and "duplicate OCS name 'ocs-a'" in str(e)


def test_region_naming_an_unknown_ocs(tmp_path):
    p = _mutate(tmp_path, "    ocs: ocs-b\n", "    ocs: ocs-c\n")
    e = _error(p)
    assert e.line == _line(p, "ocs: ocs-c")
    assert "region 'region1' names OCS 'ocs-c', which the inventory does not have (it has ocs-a, ocs-b)" in str(e)


def test_region_naming_no_ocs_when_there_are_several(tmp_path):
    p = _mutate(tmp_path, "    ocs: ocs-a\n", "")
    e = _error(p)
    assert e.line == _line(p, "- name: region0")
    assert "region 'region0' names no OCS (ocs: NAME), but the inventory has 2: ocs-a, ocs-b" in str(e)


def test_port_beyond_the_regions_ocs(tmp_path):
    # gpu05 is in region1, on ocs-b: make ocs-b smaller than its ports, ocs-a stays as it is
    text = TWO.read_text()
    k = text.index("  - name: ocs-b")
    p = tmp_path / "bad.yaml"
    p.write_text(text[:k] + text[k:].replace("size: {inputs: 192, outputs: 192}", "size: {inputs: 2, outputs: 192}", 1))
    e = _error(p)
    assert "ocs_tx 3 of gpu05/nic2 lane 0 is beyond the OCS ocs-b input ports 1..2 (2x192)" in str(e)
    assert e.line == _line(p, "ocs_tx: 3, ocs_rx: 195", 2)  # gpu05's, not gpu01's (on ocs-a, 192 inputs)
    assert not any("gpu01" in m for _, m in e.problems)


def test_same_port_on_two_ocses_is_fine_but_twice_on_one_is_an_error(tmp_path):
    # gpu02 (ocs-a) takes gpu01's port 1: twice on ocs-a (gpu05 has port 1 on ocs-b: fine)
    p = _mutate(tmp_path, "ocs_tx: 4, ocs_rx: 196", "ocs_tx: 1, ocs_rx: 196")
    e = _error(p)
    assert e.line == _line(p, "ocs_tx: 1, ocs_rx: 196")
    assert "OCS ocs-a port 1 used twice: gpu02/nic0 lane 0 and gpu01/nic0 lane 0" in str(e)


def test_a_host_moved_to_the_other_region_is_checked_against_that_ocs(tmp_path):
    # gpu02 joins region1 (ocs-b), where gpu06 already uses ports 4..6: its ports clash there
    p = tmp_path / "bad.yaml"
    p.write_text(TWO.read_text().replace("hosts: [gpu01, gpu02, gpu03, gpu04]", "hosts: [gpu01, gpu09, gpu03, gpu04]")
                 .replace("hosts: [gpu05, gpu06, gpu07, gpu08]", "hosts: [gpu05, gpu06, gpu07, gpu08, gpu02]"))
    e = _error(p)
    msgs = [m for _, m in e.problems]
    assert not any("port 1 used twice" in m for m in msgs), msgs  # gpu01 (ocs-a) and gpu05 (ocs-b) share numbers only
    assert "OCS ocs-b port 4 used twice: gpu06/nic0 lane 0 and gpu02/nic0 lane 0" in msgs, msgs
    assert "region 'region0' names missing host 'gpu09'" in msgs


def test_optical_host_in_no_region_with_several_ocses(tmp_path):
    p = _mutate(tmp_path, "hosts: [gpu05, gpu06, gpu07, gpu08]", "hosts: [gpu05, gpu06, gpu07]")  # gpu08 in none
    e = _error(p)
    assert (_line(p, "- name: gpu08"), "host 'gpu08' has optical lanes but is in no region that names its OCS (the "
            "inventory has 2: ocs-a, ocs-b)") in e.problems


def test_the_key_is_ocs_never_the_models_field_name(tmp_path):
    p = _mutate(tmp_path, "\nocs:\n", "\nocses:\n", src=PROTOTYPE)
    e = _error(p)
    assert e.line == _line(p, "ocses:") and "unknown key 'ocses' (did you mean 'ocs'?)" in str(e)
