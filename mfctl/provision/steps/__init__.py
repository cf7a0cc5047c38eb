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
