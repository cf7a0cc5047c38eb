"""ethtool helpers over parsed output (the parsers: tests/golden/ethtool, ethtool-m, ethtool-S)."""

from mfctl.hosts import ethtool
from support import DATA


def stats(name):
    return ethtool.parse_stats((DATA / "ethtool" / name).read_text())


def test_bytes_per_priority_and_the_counters_above_zero():
    full = stats("S-mlx5-cx4lx-fw14.23-kernel4.15-stripped.txt")
    assert full.prio_bytes()[0] == 2202570777997 + 2662454044895 and full.prio_bytes()[3] == 0
    assert sorted(full.prio_bytes()) == list(range(8))
    # the capture's physical-layer error and drop counters are all there, and all zero
    assert all(n in full.counters for n in ethtool.PHY_ERRORS[:4] + ethtool.DROPS)
    assert ethtool.nonzero(full, ethtool.PHY_ERRORS + ethtool.DROPS) == {}
    grep = stats("S-mlx5-grep-prio-roce-all-traffic-prio0.txt")
    assert sum(v for p, v in grep.prio_bytes().items() if p) == 0 and grep.prio_bytes()[0] > 0  # all RoCE on prio 0
    odd = ethtool.NICStats({"rx_crc_errors_phy": 3, "tx_discards_phy": 0, "rx_prio5_bytes": 7})
    assert ethtool.nonzero(odd, ethtool.PHY_ERRORS + ethtool.DROPS) == {"rx_crc_errors_phy": 3}
    assert odd.prio_bytes() == {5: 7} and odd.prio("tx", 5) == 0


def test_the_modules_own_rx_low_warning():
    mod = lambda name: ethtool.parse_module((DATA / "ethtool" / name).read_text())  # noqa: E731
    assert mod("m-sff8636-qsfp28-cwdm4-healthy.txt").rx_low_warning_dbm() == -12.0
    assert mod("m-cmis40-qsfpdd-400g-xdr4-temp-warning.txt").rx_low_warning_dbm() == -6.9
