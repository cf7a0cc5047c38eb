"""Plan step for RoCE QoS (:func:`plan_qos`): trust mode and PFC."""

from __future__ import annotations

from mfctl.hosts import mellanox
from mfctl.provision.actions import Action, PlanContext


def plan_qos(ctx: PlanContext) -> list[Action]:
    """RoCE QoS per NIC: the trust mode and PFC on the RoCE priority only."""
    return _plan_qos(ctx.host, ctx.act, ctx.spec)


def _plan_qos(inv_host, act, spec) -> list[Action]:
    """RoCE QoS per NIC: the trust mode and PFC on the RoCE priority only."""
    acts = []
    pfc = [1 if p == spec.roce.pfc_priority else 0 for p in range(8)]
    for nic in inv_host.nics:
        q = act.qos.get(nic.name)
        if q is not None and (q.trust != spec.roce.trust or q.pfc_enabled != pfc):
            acts.append(Action("qos", nic.lanes[0].netdev, "RoCE QoS", f"trust {q.trust}, {_pfc(q.pfc_enabled)}",
                               f"trust {spec.roce.trust}, {_pfc(pfc)}",
                               [mellanox.mlnx_qos_argv(nic.lanes[0].netdev, spec.roce.trust, pfc)]))
    return acts


def _pfc(v: list[int]) -> str:
    on = [str(p) for p, x in enumerate(v) if x]
    return f"PFC on prio {','.join(on)}" if on else "PFC off"
