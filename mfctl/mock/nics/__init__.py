"""Mock NIC, transceiver, firmware and GPU-settings state of a host, answered in the real tools'
formats. One module per job: :mod:`.state` (the state and the dispatch), :mod:`.links` (devlink,
ethtool, ip), :mod:`.firmware` (mlxconfig, mlxfwmanager, mlxfwreset, sha256sum), :mod:`.qos`
(mlnx_qos, per netdev), :mod:`.sysfs` (ECN/CNP sysfs, conf sysctls), :mod:`.tuning` (traffic class,
rdma_cm configfs, NUMA/IRQ affinity, irqbalance), :mod:`.fec`, :mod:`.routes`
(ip rule/route), :mod:`.gpudirect` (lsmod, lspci, setpci, systemctl), :mod:`.reboot`, :mod:`.bench`
(nccl-tests, the GEMM bench). The GPU (nvidia-smi, dcgmi, dcgm-exporter,
dmesg) and RDMA (ibstat, ibv_devinfo, ibdev2netdev, show_gids, mlxlink) tools are in
:mod:`mfctl.mock.gputools` and :mod:`mfctl.mock.rdmatools`.

:data:`TOOLS` maps a program name to ``tool(cfg, argv, out, err) -> exit status``; a new tool is
one more row.
"""

from __future__ import annotations

from collections.abc import Callable

from mfctl.mock.nics import bench, fec, firmware, gpudirect, links, perftest, qos, sysfs, tuning
from mfctl.mock.nics.firmware import mock_image_sha256
from mfctl.mock.nics.state import FACTORY_FW, MODULE_CHANNELS, PROVISIONED_FW, HostConfig, NetdevState, NICState


def _args(f: Callable) -> Callable:
    """A tool that takes the arguments after the program name."""
    return lambda cfg, argv, out, err: f(cfg, argv[1:], out, err)


TOOLS: dict[str, Callable] = {
    "devlink": _args(links.devlink),
    "ethtool": _args(fec.ethtool),  # --show-fec/--set-fec; the rest: links.ethtool
    "mlxconfig": _args(firmware.mlxconfig),
    "mlxfwreset": _args(firmware.mlxfwreset),
    "mlxfwmanager": _args(firmware.mlxfwmanager),
    "sha256sum": _args(firmware.sha256sum),
    "mlnx_qos": _args(qos.mlnx_qos),
    "grep": _args(sysfs.grep),  # grep -Hs . on the ECN/CNP sysfs and conf/* sysctl files
    "sh": sysfs.sh,  # sh -c 'echo V > /sys/…' (other scripts: the host's sh)
    "sysctl": _args(sysfs.sysctl),
    "head": _args(tuning.head),  # head -v -n 1 on traffic_class / configfs / NUMA files (mfctl.mock.nics.tuning)
    "ls": _args(tuning.ls),  # ls -1 …/device/msi_irqs
    "mkdir": _args(tuning.mkdir),  # mkdir -p /sys/kernel/config/rdma_cm/IBDEV
    "lsmod": _args(gpudirect.lsmod),
    "modprobe": _args(gpudirect.modprobe),
    "lspci": _args(gpudirect.lspci),
    "setpci": _args(gpudirect.setpci),
    "systemctl": _args(gpudirect.systemctl),  # nvidia-persistenced, reboot (mfctl.mock.nics.reboot)
    "ib_write_bw": perftest.ib_write_bw,  # perftest: server, or client to SERVER_IP (mfctl.mock.nics.perftest)
    "all_reduce_perf": bench.nccl,
    "alltoall_perf": bench.nccl,
    "mfctl-gemm-bench": _args(bench.gemm),
}

__all__ = ["FACTORY_FW", "MODULE_CHANNELS", "PROVISIONED_FW", "TOOLS", "HostConfig", "NICState", "NetdevState",
           "mock_image_sha256"]
