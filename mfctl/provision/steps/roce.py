"""Plan step for RoCE congestion control and the physical layer per port (:func:`plan_roce`):
ECN (DCQCN) enabled on the RoCE priority for both the notification and the reaction point, the
CNP's DSCP and 802.1p priority (NVIDIA MLNX_OFED "Explicit Congestion Notification (ECN)":
``/sys/class/net/IF/ecn/roce_np|roce_rp/enable/<prio>``, ``roce_np/cnp_dscp``,
``roce_np/cnp_802p_prio``), and the FEC mode (``ethtool --set-fec``). Read by
:func:`mfctl.provision.steps.qos.read_qos`. A port without the ECN files (the upstream mlx5 driver
has no ``ecn/`` sysfs: it is MLNX_OFED's/DOCA-OFED's) is "not supported on this card", not drift."""

from __future__ import annotations

from mfctl.hosts import roce
from mfctl.provision.actions import OUTCOME_UNSUPPORTED, Action, PlanContext
from mfctl.provision.steps.ports import lane_ports
from mfctl.provision.steps.qos import MORE_KEY

#: a fresh mlx5 port's ECN/CNP files (MLNX_OFED defaults: ECN on every priority, CNP DSCP 48, priority 6)
FRESH = {"enable": "1", "cnp_dscp": "48", "cnp_802p_prio": "6"}
_FEC = {"auto": "Auto", "rs": "RS", "baser": "BaseR", "off": "Off"}


def plan_roce(ctx: PlanContext) -> list[Action]:
    spec, more = ctx.spec.roce, ctx.act.more.get(MORE_KEY, {"files": {}, "fec": {}})
    prio = spec.pfc_priority if spec.pfc_priority is not None else spec.priority_of(spec.dscp)
    acts = []
    for lp in lane_ports(ctx):
        nd, files = lp.netdev, more["files"]
        if not lp.fresh and nd not in more.get("qos", {}):
            continue  # missing netdev: the links step says so
        base = f"/sys/class/net/{nd}/ecn"
        want = {f"{base}/roce_np/enable/{prio}": int(spec.ecn), f"{base}/roce_rp/enable/{prio}": int(spec.ecn)}
        if spec.cnp_dscp is not None:
            want[f"{base}/roce_np/cnp_dscp"] = spec.cnp_dscp
        if spec.cnp_priority is not None:
            want[f"{base}/roce_np/cnp_802p_prio"] = spec.cnp_priority
        have = {p: (FRESH[p.rsplit("/", 2)[-2] if "/enable/" in p else p.rsplit("/", 1)[-1]] if lp.fresh else files.get(p))
                for p in want}
        if all(v is None for v in have.values()):
            acts.append(Action("roce", nd, "ECN/CNP", "no ecn/ sysfs (the driver is not MLNX_OFED's)", f"ECN on prio {prio}",
                               [], outcome=OUTCOME_UNSUPPORTED))
        else:
            diff = {p: v for p, v in want.items() if have[p] != str(v)}
            if diff:
                acts.append(Action("roce", nd, "ECN/CNP", ", ".join(f"{_short(p)}={have[p]}" for p in diff),
                                   ", ".join(f"{_short(p)}={v}" for p, v in diff.items()),
                                   [roce.write_argv(p, v) for p, v in diff.items()]))
        if spec.fec:
            f = ("Auto", "RS") if lp.fresh else more["fec"].get(nd)
            if isinstance(f, tuple) and f[0].split()[0] != _FEC[spec.fec]:
                acts.append(Action("roce", nd, "FEC", f"{f[0]} (active {f[1]})", _FEC[spec.fec],
                                   [roce.fec_set_argv(nd, spec.fec)]))
            elif isinstance(f, str):
                acts.append(Action("roce", nd, "FEC", f"unknown (ethtool --show-fec: {f[:120]})", _FEC[spec.fec], [],
                                   outcome=OUTCOME_UNSUPPORTED))
    return acts


def _short(path: str) -> str:
    """``…/ecn/roce_np/enable/3`` → ``roce_np/enable/3``."""
    return path.split("/ecn/", 1)[-1]
