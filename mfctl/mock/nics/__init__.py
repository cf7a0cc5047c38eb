"""Mock NIC, transceiver, firmware and GPU-settings state of a host, answered in the real tools'
formats. One module per job: :mod:`.state` (the state and the dispatch), :mod:`.links` (devlink,
ethtool, ip), :mod:`.firmware` (mlxconfig, mlxfwmanager, mlxfwreset, sha256sum), :mod:`.qos`
(mlnx_qos), :mod:`.bench` (nccl-tests, the GEMM bench). The GPU (nvidia-smi, dcgmi, dcgm-exporter,
dmesg) and RDMA (ibstat, ibv_devinfo, ibdev2netdev, show_gids, mlxlink) tools are in
:mod:`mfctl.mock.gputools` and :mod:`mfctl.mock.rdmatools`.

:data:`TOOLS` maps a program name to ``tool(cfg, argv, out, err) -> exit status``; a new tool is
one more row.
"""

from __future__ import annotations

from collections.abc import Callable

from mfctl.mock.nics import bench, firmware, links, qos
from mfctl.mock.nics.firmware import mock_image_sha256
from mfctl.mock.nics.state import FACTORY_FW, MODULE_CHANNELS, PROVISIONED_FW, HostConfig, NetdevState, NICState


def _args(f: Callable) -> Callable:
    """A tool that takes the arguments after the program name."""
    return lambda cfg, argv, out, err: f(cfg, argv[1:], out, err)


TOOLS: dict[str, Callable] = {
    "devlink": _args(links.devlink),
    "ethtool": _args(links.ethtool),
    "mlxconfig": _args(firmware.mlxconfig),
    "mlxfwreset": _args(firmware.mlxfwreset),
    "mlxfwmanager": _args(firmware.mlxfwmanager),
    "sha256sum": _args(firmware.sha256sum),
    "mlnx_qos": _args(qos.mlnx_qos),
    "all_reduce_perf": bench.nccl,
    "alltoall_perf": bench.nccl,
    "mfctl-gemm-bench": _args(bench.gemm),
}

__all__ = ["FACTORY_FW", "MODULE_CHANNELS", "PROVISIONED_FW", "TOOLS", "HostConfig", "NICState", "NetdevState",
           "mock_image_sha256"]
