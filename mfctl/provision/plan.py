"""Provisioning's plan: read a host's actual state with the real tools (:func:`read_actual`),
compare it with the desired state (inventory + recipe + firmware manifest) and list the actions
that close the gap (:func:`plan_host`, one :mod:`~mfctl.provision.steps` step after the other).

Order per host (safe order, :data:`PHASES`): firmware → firmware settings → firmware reset → links
(breakout, MTU) → addresses → RoCE QoS → GPU settings. Each action records the target,
before → after, the commands, and what it needs (``reset``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mfctl.errors import MfctlError
from mfctl.hosts import iproute, mellanox, nvidia_smi
from mfctl.provision.actions import PHASES, Action, HostActual, HostPlan, PlanContext
from mfctl.provision.models import FirmwareManifest, ProvisionSpec
from mfctl.provision.steps import READS, READS_NETDEVS, STEPS
from mfctl.provision.steps import firmware as firmware_step

if TYPE_CHECKING:
    from mfctl.observer import Observer

__all__ = ["PHASES", "Action", "HostActual", "HostPlan", "PlanContext", "plan", "plan_host", "read_actual"]


def read_actual(pool, inv_host) -> HostActual:
    """Read one host with the real tools (raises MfctlError/ParseError naming the tool). The
    read-only commands known in advance go in two batches (:mod:`mfctl.provision.batch`: one
    ``sh -c`` each, every command's output and status kept apart): the host-wide ones first, the
    per-port ones once the lanes' netdevs are known (:func:`mfctl.provision.steps.prefetch`)."""
    from mfctl.provision import batch
    from mfctl.provision.steps import prefetch_host, prefetch_ports

    h = inv_host.name
    pool = batch.Prefetched(pool, h)
    pool.prefetch(prefetch_host(inv_host))
    fw = {d.pci: d for d in mellanox.parse_mlxfwmanager(pool.run_checked(h, mellanox.mlxfwmanager_query_argv()))}
    mlx: dict = {}
    qos: dict = {}  # (QoS is per port: read by the qos step, HostActual.more["roce"])
    ports = mellanox.parse_devlink_ports(pool.run_checked(h, mellanox.devlink_ports_argv()))
    for nic in inv_host.nics:
        mlx[nic.pci] = mellanox.parse_mlxconfig(pool.run_checked(h, mellanox.mlxconfig_query_argv(nic.pci)))[0]
    ifaces = iproute.parse_addrs(pool.run_checked(h, iproute.addr_argv()))
    gpu_fields = ["index", "persistence_mode", "mig.mode.current", "mig.mode.pending"]
    gpus = nvidia_smi.parse_query_csv(pool.run_checked(h, nvidia_smi.query_argv(gpu_fields)))
    act = HostActual(fw, mlx, ports, ifaces, qos, gpus)
    act.more[firmware_step.MORE_KEY] = firmware_step.read_reset_levels(pool, inv_host, [p for p in fw if p])
    for key, read in READS.items():  # the steps' own reads (RoCE per port, rails, GPUDirect)
        act.more[key] = read(pool, inv_host, act)
        if key == READS_NETDEVS:  # the lanes' netdevs are known now
            pool.prefetch(prefetch_ports(inv_host, act))
    act.more["round_trips"] = pool.round_trips
    return act


def plan_host(inv, hi: int, inv_host, spec: ProvisionSpec, manifest: FirmwareManifest | None, act: HostActual) -> list[Action]:
    """The actions that bring host ``inv_host`` (index ``hi`` in the inventory) from ``act`` to the
    desired state: every step of :data:`~mfctl.provision.steps.STEPS`, in the safe order of :data:`PHASES`."""
    ctx = PlanContext(inv, hi, inv_host, spec, manifest, act)
    acts = [a for step in STEPS for a in step(ctx)]
    acts.sort(key=lambda a: PHASES.index(a.phase))
    return acts


def plan(pool, inv, spec: ProvisionSpec, manifest: FirmwareManifest | None, hosts: list[str] | None = None, *,
         observer: Observer | None = None, phase: str = "plan") -> list[HostPlan]:
    """Read every host (``hosts``: these only) in parallel and plan it, in host order. A host that
    cannot be read gets ``error`` (the message names it). ``phase``: what the observer hears
    (``verify`` for the re-read after apply)."""
    names = hosts or [h.name for h in inv.hosts]
    index = {h.name: i for i, h in enumerate(inv.hosts)}

    def one(name: str) -> HostPlan:
        try:
            act = read_actual(pool, inv.host(name))
        except MfctlError as e:  # (ParseError is one)
            return HostPlan(name, error=str(e))
        return HostPlan(name, plan_host(inv, index[name], inv.host(name), spec, manifest, act))

    return pool.map(names, one, observer=observer, phase=phase).values()
