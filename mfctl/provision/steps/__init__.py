"""Provisioning's plan steps, in the order they run (:data:`STEPS`). A step is
``plan(ctx: PlanContext) -> list[Action]``; a step may read more of the host in
:func:`mfctl.provision.plan.read_actual` (into ``HostActual.more``). A new kind of desired
state is one more step: a function here and a row in :data:`STEPS`. Actions are sorted by
:data:`~mfctl.provision.actions.PHASES` afterwards, so a step may emit into several phases.
"""

from __future__ import annotations

from collections.abc import Callable

from mfctl.provision.actions import Action, PlanContext
from mfctl.provision.steps import firmware, gpu, gpudirect, irq, links, qos, rails, roce, speed, tos

#: the plan steps in order: the firmware steps and the breakout fill ``ctx.reset`` before
#: ``plan_reset`` reads it, and the breakout fills ``ctx.resplit`` before the lanes are planned
STEPS: list[Callable[[PlanContext], list[Action]]] = [
    firmware.plan_firmware,
    firmware.plan_settings,
    links.plan_breakout,
    firmware.plan_reset,
    links.plan_lanes,
    speed.plan_speed,
    qos.plan_qos,
    roce.plan_roce,
    tos.plan_tos,
    irq.plan_irq,
    rails.plan_rails,
    gpudirect.plan_gpudirect,
    gpu.plan_gpu,
]

#: what the steps read for themselves: ``HostActual.more[key] = read(pool, inv_host, act)`` (in
#: :func:`mfctl.provision.plan.read_actual`, after the common reads)
READS: dict[str, Callable] = {
    links.MORE_KEY: links.read_links,  # ip -d link (parent PCI devices), only where devlink names no port by PCI
    qos.MORE_KEY: qos.read_qos,  # mlnx_qos per netdev, FEC, ECN/CNP sysfs, conf sysctls
    rails.MORE_KEY: rails.read_rails,  # ip rule, ip route
    gpudirect.MORE_KEY: gpudirect.read_gpudirect,  # lsmod, lspci, the persistence daemon
    speed.MORE_KEY: speed.read_speed,  # ethtool IF per lane (link modes, autoneg)
    tos.MORE_KEY: tos.read_tos,  # ibdev2netdev, traffic_class + rdma_cm configfs
    irq.MORE_KEY: irq.read_irq,  # irqbalance, msi_irqs, NUMA node, IRQ affinities
}

#: the read after which every lane's netdev is known (the parents of ``auxiliary/`` devlink ports)
READS_NETDEVS = links.MORE_KEY


def prefetch_host(inv_host) -> list[list[str]]:
    """The host-wide read-only commands :func:`mfctl.provision.plan.read_actual` runs for sure (one batch)."""
    from mfctl.hosts import gpudirect as gd
    from mfctl.hosts import iproute, mellanox, nvidia_smi
    from mfctl.hosts import rails as railtools
    from mfctl.provision import breakout

    pcis = [nic.pci for nic in inv_host.nics if nic.pci]
    split = [links.split_query_argv(nic.pci) for nic in inv_host.nics
             if nic.pci and (c := breakout.CARDS.get(nic.model)) is not None and c.split_param]
    return [mellanox.mlxfwmanager_query_argv(), mellanox.devlink_ports_argv(),
            *[mellanox.mlxconfig_query_argv(p) for p in pcis], *split, iproute.addr_argv(),
            nvidia_smi.query_argv(["index", "persistence_mode", "mig.mode.current", "mig.mode.pending"]),
            *[mellanox.mlxfwreset_query_argv(p) for p in pcis],
            railtools.rules_argv(), railtools.routes_argv(), gd.lsmod_argv(), gd.lspci_argv(), gd.unit_argv(gpudirect.UNIT),
            ["ibdev2netdev"], ["systemctl", "show", "-p", "ActiveState,UnitFileState", irq.UNIT]]


def prefetch_ports(inv_host, act) -> list[list[str]]:
    """The per-port read-only commands the reads run for every lane's netdev (one batch)."""
    from mfctl.hosts import roce as roce_tools
    from mfctl.provision.steps.ports import host_netdevs

    nds = host_netdevs(inv_host, act)
    return [a for nd in nds for a in (roce_tools.mlnx_qos_argv(nd), roce_tools.fec_show_argv(nd), ["ethtool", nd])] + (
        [["ls", "-1", *[irq.dev_path(nd, "msi_irqs") for nd in nds]]] if nds else [])
