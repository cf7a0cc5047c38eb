"""mlxconfig values beyond parsing (the parsers: tests/golden/mlxconfig, mlxfwmanager, mlxlink)."""

from mfctl.hosts import mellanox
from support import DATA


def test_value_codes_compare_a_name_and_its_number():
    q = mellanox.parse_mlxconfig((DATA / "mellanox" / "mlxconfig-q-cx7-osfp-ndr-truncated.txt").read_text())[0]
    assert mellanox.value_code(q.params["MEMIC_SIZE_LIMIT"]["next_boot"]) == "1"
    assert mellanox.value_code("MEMIC_ATOMIC_ENABLE(2)") == "2" and mellanox.value_code("True(1)") == "1"
    assert mellanox.value_code("Array[0..15]") == "Array[0..15]" and mellanox.value_code(None) is None


def test_pending_is_what_the_next_boot_changes():
    d = mellanox.MlxconfigDevice("ConnectX6", None, "0000:12:00.0", ["current", "next_boot"], {
        "SRIOV_EN": {"current": "True(1)", "next_boot": "1"},  # the same value, named and numbered
        "NUM_OF_VFS": {"current": "0", "next_boot": "8"},
        "LINK_TYPE_P1": {"next_boot": "ETH(2)"}})  # no current value: nothing to compare
    assert d.pending() == {"NUM_OF_VFS": ("0", "8")}
    s = mellanox.parse_mlxconfig((DATA / "mellanox" / "mlxconfig-set-cx6-vpi-reboot-required.txt").read_text())[0]
    assert s.pending() == {}  # a set's columns are next_boot and new: no current
