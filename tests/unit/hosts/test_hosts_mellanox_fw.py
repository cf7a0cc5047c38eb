"""mlxfwreset query parsing, the firmware argv builders, PSID/version helpers and the mlxconfig
parameter ranges (issue 16 items 3, 7, 8, 9)."""

import pytest

from mfctl.errors import ParseError
from mfctl.hosts import mellanox

# mstflint's layout ("{level}: {description:<62}-{Supported|Not Supported:<14}{(default)}") with the
# level texts of the MFT manual; the Reset-types block after it is not read
LIVE = 'Driver, PCI link, network link will remain up ("live-Patch")'
ARM = 'Only ARM side will not remain up ("Immediate reset").'
QUERY = (
    "Reset-levels:\n"
    f"0: {LIVE:<62}-{'Not Supported':<14}\n"
    f"1: {ARM:<62}-{'Not Supported':<14}\n"
    f"3: {'Driver restart and PCI reset':<62}-{'Supported':<14}(default)\n"
    f"4: {'Warm Reboot':<62}-{'Supported':<14}\n"
    "\nReset-types (relevant only for reset-levels 1,3,4):\n"
    f"0: {'Full chip reset':<62}-{'Supported':<14}(default)\n"
    f"1: {'Phy-less reset (keep network port active during reset)':<62}-{'Not Supported':<14}\n"
)


def test_mlxfwreset_query_levels():
    lv = mellanox.parse_mlxfwreset_query(QUERY)
    assert sorted(lv) == [0, 1, 3, 4]  # the Reset-types rows (0, 1) are not levels
    assert [lv[k].supported for k in (0, 1, 3, 4)] == [False, False, True, True]
    assert lv[3].default and not lv[4].default and lv[3].description == "Driver restart and PCI reset"
    assert lv[0].description == LIVE


@pytest.mark.parametrize("text", ["-E- Device not found\n", "Reset-levels:\n3: Driver restart and PCI reset\n"])
def test_mlxfwreset_query_without_levels_is_a_parse_error(text):
    with pytest.raises(ParseError, match="mlxfwreset query"):
        mellanox.parse_mlxfwreset_query(text)


def test_firmware_argv_builders():
    assert mellanox.mlxfwreset_query_argv("0000:0c:00.0") == ["mlxfwreset", "-d", "0000:0c:00.0", "query"]
    assert mellanox.mlxfwreset_argv("0000:0c:00.0", 3) == ["mlxfwreset", "-y", "-d", "0000:0c:00.0", "--level", "3", "reset"]
    assert mellanox.mlxfwreset_argv("0000:0c:00.0") == ["mlxfwreset", "-y", "-d", "0000:0c:00.0", "reset"]
    with pytest.raises(ValueError, match="no reset level 2"):
        mellanox.mlxfwreset_argv("0000:0c:00.0", 2)
    assert mellanox.mlxfwmanager_burn_argv("0000:0c:00.0", "/opt/f.bin") == \
        ["mlxfwmanager", "-u", "-y", "-d", "0000:0c:00.0", "-i", "/opt/f.bin"]
    assert "--force" in mellanox.mlxfwmanager_burn_argv("0000:0c:00.0", "/opt/f.bin", force=True)


def test_versions_and_oem_psids():
    assert mellanox.version_key("22.39.1002") > mellanox.version_key("22.31.1014")
    assert mellanox.version_key("22.4.1") < mellanox.version_key("22.39.1002")  # numeric, not text order
    with pytest.raises(ParseError):
        mellanox.version_key("22.x")
    assert [mellanox.is_oem_psid(p) for p in ("MT_0000000359", "DEL0000000027", "LNV2180110032", "HPE0000000014", None)] \
        == [False, True, True, True, False]


@pytest.mark.parametrize("name,value,why", [
    ("LINK_TYPE_P1", -1, "LINK_TYPE_P1=-1 is out of range: 1..3"),
    ("LINK_TYPE_P2", 4, "LINK_TYPE_P2=4 is out of range: 1..3"),
    ("SRIOV_EN", 2, "SRIOV_EN=2 is out of range: 0..1"),
    ("ROCE_CC_PRIO_MASK_P1", 256, "out of range: 0..255"),
    ("CNP_DSCP_P1", 64, "out of range: 0..63"),
    ("MODULE_SPLIT_M0", 2, "it is the NIC's breakout"),
    ("SOME_FUTURE_PARAM", -5, "an unknown parameter takes only a raw number"),
])
def test_mlxconfig_values_out_of_range(name, value, why):
    assert why in mellanox.check_mlxconfig_value(name, value)


def test_mlxconfig_values_in_range():
    assert [mellanox.check_mlxconfig_value(k, v) for k, v in
            (("LINK_TYPE_P1", 2), ("NUM_OF_VFS", 0), ("ROCE_CC_PRIO_MASK_P1", 255), ("SOME_FUTURE_PARAM", 7))] == [None] * 4
    assert "nic-configuration-operator" in mellanox.MLXCONFIG_PARAMS["CNP_DSCP_P1"].source  # every range names its source
