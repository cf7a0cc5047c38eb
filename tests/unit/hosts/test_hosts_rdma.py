"""RDMA helpers over parsed output (the parsers themselves: tests/golden/{ibstat,ibstatus,
ibdev2netdev,show_gids,ibv_devinfo})."""

from mfctl.hosts import rdma
from support import DATA


def test_roce_v2_ipv4_gid_index_is_what_nccl_ib_gid_index_should_be():
    g = rdma.parse_show_gids((DATA / "mellanox" / "show_gids-cx6-roce-v1-v2-ipv4.txt").read_text())
    assert rdma.roce_v2_ipv4_gid_index(g, "ens1f0") == 5  # index 4 is the v1 GID of the same address
    assert rdma.roce_v2_ipv4_gid_index(g, "ens2f0") is None
    assert rdma.roce_v2_ipv4_gid_index([x for x in g if x.version == "v1"], "ens1f0") is None
